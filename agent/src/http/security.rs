//! ACLs, SCRAM users and client quotas over HTTP (`docs/http.md`, "Security
//! administration"), on the security service the Kafka APIs also use: a binding made
//! here is the one `kafka-acls.sh --list` shows, a user set here logs in over SASL at
//! once, a quota set here holds Kafka clients and HTTP callers alike. The service
//! decides who may and audits every change, as it does for the Kafka APIs; these
//! handlers read requests and write answers.
//!
//! - `GET|POST|DELETE /v1/acls` (DESCRIBE, ALTER, ALTER on the cluster);
//! - `GET /v1/users`, `GET|PUT|DELETE /v1/users/{user}` (DESCRIBE, ALTER on the cluster);
//! - `GET|PATCH /v1/quotas` (DESCRIBE_CONFIGS, ALTER_CONFIGS on the cluster).
//!
//! Names are Kafka's (`TOPIC`, `PREFIXED`, `READ`, `ALLOW`, `SCRAM-SHA-512`,
//! `producer_byte_rate`), read in any case.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{Extensions, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::{IntoParams, ToSchema};

use super::HttpApi;
use super::admin::caller;
use super::json;
use super::model::{
    AclBinding, AclList, AclsCreated, AclsDeleted, QuotaEntry, QuotaList, ScramCredential,
    ScramUser, UserCredentialsDeleted, UserList,
};
use super::problem::{Body, Extracted, Problem, extract};
use crate::authz::rules::{Operation, PatternType, Permission, resource_type_name};
use crate::caller::Caller;
use crate::sasl::scram::{MIN_ITERATIONS, ScramHash};
use crate::service::security::{
    self, AclBindingFilter, AclRecord, Action, CredentialAlteration, CredentialInfo, EntityMatch,
    QuotaAlteration, SecurityError, UserAltered,
};

type QueryOf<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

/// May the caller describe? Asked before the request is read, so a caller who may
/// not is told so whatever else is wrong with it (Kafka's order). A change is asked
/// of the service once its body is read: the service decides and audits it.
fn may_describe(http: &HttpApi, who: &Caller, action: Action) -> Result<(), Problem> {
    security::authorize(http.broker.security(), who, action).map_err(Problem::from)
}

/// The answer: `value` with `status`, or the problem.
fn answer<T: serde::Serialize>(outcome: Result<(StatusCode, T), Problem>) -> Response {
    match outcome {
        Ok((status, value)) => (status, axum::Json(value)).into_response(),
        Err(p) => p.into_response(),
    }
}

// ---------------------------------------------------------------------------------
// ACLs

/// Kafka's resource types a binding may name, by code.
const RESOURCE_TYPES: [i8; 6] = [2, 3, 4, 5, 6, 7];

/// A name as Kafka spells it: upper case, words joined by `_`.
fn kafka_name(s: &str) -> String {
    s.trim().to_ascii_uppercase().replace('-', "_")
}

fn resource_type(name: &str) -> Result<i8, Problem> {
    let want = kafka_name(name);
    RESOURCE_TYPES
        .into_iter()
        .find(|c| resource_type_name(*c) == Some(want.as_str()))
        .ok_or_else(|| {
            Problem::bad_request(format!(
                "resource_type {name:?} is not one of TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, \
                 DELEGATION_TOKEN, USER"
            ))
        })
}

fn pattern_type(name: &str) -> Result<PatternType, Problem> {
    match kafka_name(name).as_str() {
        "LITERAL" => Ok(PatternType::Literal),
        "PREFIXED" => Ok(PatternType::Prefixed),
        _ => Err(Problem::bad_request(format!(
            "pattern_type {name:?} is not LITERAL or PREFIXED"
        ))),
    }
}

fn operation(name: &str) -> Result<Operation, Problem> {
    let want = kafka_name(name);
    (2..=12)
        .filter_map(Operation::from_code)
        .find(|o| o.name() == want)
        .ok_or_else(|| {
            Problem::bad_request(format!(
                "operation {name:?} is not one of ALL, READ, WRITE, CREATE, DELETE, ALTER, \
                 DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE"
            ))
        })
}

fn permission(name: &str) -> Result<Permission, Problem> {
    match kafka_name(name).as_str() {
        "ALLOW" => Ok(Permission::Allow),
        "DENY" => Ok(Permission::Deny),
        _ => Err(Problem::bad_request(format!(
            "permission {name:?} is not ALLOW or DENY"
        ))),
    }
}

fn pattern_name(code: i8) -> &'static str {
    match PatternType::from_code(code) {
        Some(PatternType::Prefixed) => "PREFIXED",
        _ => "LITERAL",
    }
}

fn binding(a: &AclRecord) -> AclBinding {
    AclBinding {
        resource_type: resource_type_name(a.resource_type)
            .unwrap_or("UNKNOWN")
            .to_string(),
        resource_name: a.resource_name.clone(),
        pattern_type: pattern_name(a.pattern_type).to_string(),
        principal: a.principal.clone(),
        host: a.host.clone(),
        operation: Operation::from_code(a.operation)
            .map_or("UNKNOWN", Operation::name)
            .to_string(),
        permission: match Permission::from_code(a.permission) {
            Some(Permission::Deny) => "DENY",
            _ => "ALLOW",
        }
        .to_string(),
    }
}

fn bindings(mut acls: Vec<AclRecord>) -> Vec<AclBinding> {
    acls.sort_by(|a, b| {
        (
            a.resource_type,
            &a.resource_name,
            a.pattern_type,
            &a.principal,
        )
            .cmp(&(
                b.resource_type,
                &b.resource_name,
                b.pattern_type,
                &b.principal,
            ))
            .then((&a.host, a.operation, a.permission).cmp(&(
                &b.host,
                b.operation,
                b.permission,
            )))
    });
    acls.iter().map(binding).collect()
}

/// An ACL binding to create; names are Kafka's, read in any case.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AclBindingInput)]
pub(crate) struct Binding {
    /// TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN or USER; in any case,
    /// `-` for `_`
    pub(crate) resource_type: String,
    /// `kafka-cluster` for CLUSTER; `*` (LITERAL) for every resource of the type
    #[schema(min_length = 1)]
    pub(crate) resource_name: String,
    /// LITERAL or PREFIXED, in any case
    #[serde(default)]
    #[schema(default = "LITERAL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pattern_type: Option<String>,
    /// The principal's type and name: `User:alice`; `User:*` for every principal
    #[schema(pattern = r"^[^:]+:[\s\S]+$")]
    pub(crate) principal: String,
    /// The client's address; `*` for any host
    #[serde(default)]
    #[schema(default = "*")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) host: Option<String>,
    /// ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
    /// DESCRIBE_CONFIGS, ALTER_CONFIGS or IDEMPOTENT_WRITE; in any case, `-` for `_`
    pub(crate) operation: String,
    /// ALLOW or DENY, in any case
    #[serde(default)]
    #[schema(default = "ALLOW")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permission: Option<String>,
}

impl Binding {
    fn record(&self) -> Result<AclRecord, Problem> {
        Ok(AclRecord {
            resource_type: resource_type(&self.resource_type)?,
            resource_name: self.resource_name.clone(),
            pattern_type: self
                .pattern_type
                .as_deref()
                .map_or(Ok(PatternType::Literal), pattern_type)?
                .code(),
            principal: self.principal.clone(),
            host: self.host.clone().unwrap_or_else(|| "*".to_string()),
            operation: operation(&self.operation)?.code(),
            permission: self
                .permission
                .as_deref()
                .map_or(Ok(Permission::Allow), permission)?
                .code(),
        })
    }
}

/// ACL bindings to create.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateAclsRequest)]
pub(crate) struct CreateAcls {
    #[schema(min_items = 1)]
    pub(crate) acls: Vec<Binding>,
}

/// What `GET` and `DELETE /v1/acls` select; each field left out matches any value.
#[derive(Debug, Deserialize, Default, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AclQuery {
    /// TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER, or ANY; in any
    /// case, `-` for `_`. Left out: any
    resource_type: Option<String>,
    /// Exactly this resource name (with `pattern_type=MATCH`: the resource the
    /// bindings apply to). Left out: any
    resource_name: Option<String>,
    /// LITERAL, PREFIXED, ANY, or MATCH (the bindings that apply to `resource_name`:
    /// literal, `*` and prefixed ones); in any case. Left out: ANY
    pattern_type: Option<String>,
    /// Exactly this principal (`User:alice`). Left out: any
    principal: Option<String>,
    /// Exactly this host (`*` is the binding for any host). Left out: any
    host: Option<String>,
    /// ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
    /// DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, or ANY; in any case, `-` for
    /// `_`. Left out: any
    operation: Option<String>,
    /// ALLOW, DENY, or ANY; in any case. Left out: any
    permission: Option<String>,
}

impl AclQuery {
    fn is_empty(&self) -> bool {
        self.resource_type.is_none()
            && self.resource_name.is_none()
            && self.pattern_type.is_none()
            && self.principal.is_none()
            && self.host.is_none()
            && self.operation.is_none()
            && self.permission.is_none()
    }

    /// The filter, in Kafka's codes: ANY (1) for a field left out.
    fn filter(&self) -> Result<AclBindingFilter, Problem> {
        fn any(
            v: &Option<String>,
            code: impl Fn(&str) -> Result<i8, Problem>,
        ) -> Result<i8, Problem> {
            match v.as_deref() {
                None => Ok(1),
                Some(v) if kafka_name(v) == "ANY" => Ok(1),
                Some(v) => code(v),
            }
        }
        Ok(AclBindingFilter {
            resource_type: any(&self.resource_type, resource_type)?,
            resource_name: self.resource_name.clone(),
            pattern_type: any(&self.pattern_type, |v| match kafka_name(v).as_str() {
                "MATCH" => Ok(2),
                _ => pattern_type(v).map(PatternType::code),
            })?,
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: any(&self.operation, |v| operation(v).map(Operation::code))?,
            permission: any(&self.permission, |v| permission(v).map(Permission::code))?,
        })
    }
}

/// Without an authorizer there are no ACLs: said before the request itself is read.
fn enabled(http: &HttpApi) -> Result<(), Problem> {
    if http.broker.authorizer().is_enabled() {
        Ok(())
    } else {
        Err(SecurityError::Disabled.into())
    }
}

/// `GET /v1/acls`: the bindings the query selects.
#[utoipa::path(
    get,
    path = "/v1/acls",
    summary = "The ACL bindings a filter selects",
    description = "As DescribeAcls: the bindings the authorizer enforces (those `kafka-acls.sh --list` shows), sorted; each parameter left out matches any value. Names are Kafka's, read in any case. Needs DESCRIBE on the cluster.",
    params(AclQuery),
    responses(
        (status = 200, description = "The bindings", body = AclList),
        super::openapi::ListAclsProblems,
    ),
)]
pub async fn list_acls(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    query: QueryOf<AclQuery>,
) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        may_describe(&http, &who, Action::DescribeAcls)?;
        enabled(&http)?;
        let query = query.map_err(|e| Problem::bad_request(e.body_text()))?.0;
        let acls = security::acls(http.broker.security(), &who, &query.filter()?).await?;
        let acls = bindings(acls);
        Ok((StatusCode::OK, AclList { acls }))
    }
    .await;
    answer(outcome)
}

/// `POST /v1/acls` `{"acls": [binding, …]}`: all of them, or (one invalid) none.
#[utoipa::path(
    post,
    path = "/v1/acls",
    summary = "Create ACL bindings",
    description = "As CreateAcls, but all or none: each binding is checked as Kafka's controller checks one, and one refused refuses the request; the bindings are stored in one metastore transaction (a binding already stored is not stored twice). This agent enforces them at once, the others within moments. Needs ALTER on the cluster; audited (`acl.create`).",
    request_body = CreateAcls,
    responses(
        (status = 201, description = "The bindings, created (as stored: names in Kafka's spelling, defaults filled in)", body = AclsCreated),
        super::openapi::CreateAclsProblems,
    ),
)]
pub async fn create_acls(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    body: Body,
) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        let req: CreateAcls = json::parse(&body?, "ACL creation")?;
        if req.acls.is_empty() {
            return Err(Problem::bad_request(
                "acls is empty: name at least one binding",
            ));
        }
        let records = (req.acls.iter().enumerate())
            .map(|(i, b)| {
                b.record()
                    .map_err(|p| Problem::bad_request(format!("acls[{i}]: {}", p.detail)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        match security::create_acls_together(http.broker.security(), &who, records).await {
            Ok(created) => Ok((
                StatusCode::CREATED,
                AclsCreated {
                    created: bindings(created),
                },
            )),
            Err((Some(i), e @ SecurityError::Invalid(_))) => {
                Err(Problem::bad_request(format!("acls[{i}]: {e}")))
            }
            Err((_, e)) => Err(e.into()),
        }
    }
    .await;
    answer(outcome)
}

/// `DELETE /v1/acls?…`: the bindings the query selects (at least one field named;
/// `resource_type=ANY` selects every binding).
#[utoipa::path(
    delete,
    path = "/v1/acls",
    summary = "Delete the ACL bindings a filter selects",
    description = "As DeleteAcls with one filter. At least one parameter must be given (else 400); `resource_type=ANY` deletes every binding. Needs ALTER on the cluster; audited (`acl.delete`).",
    params(AclQuery),
    responses(
        (status = 200, description = "The bindings deleted (none if the filter selects none)", body = AclsDeleted),
        super::openapi::DeleteAclsProblems,
    ),
)]
pub async fn delete_acls(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    query: QueryOf<AclQuery>,
) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        let query = query.map_err(|e| Problem::bad_request(e.body_text()))?.0;
        if query.is_empty() {
            return Err(Problem::bad_request(
                "name what to delete (resource_type, resource_name, principal, …); \
                 resource_type=ANY deletes every binding",
            ));
        }
        let filter = query.filter()?;
        let mut deleted = security::delete_acls(http.broker.security(), &who, vec![filter]).await;
        let deleted = bindings(deleted.pop().expect("one outcome per filter")?);
        Ok((StatusCode::OK, AclsDeleted { deleted }))
    }
    .await;
    answer(outcome)
}

// ---------------------------------------------------------------------------------
// SCRAM users

fn credentials(infos: &[CredentialInfo]) -> Vec<ScramCredential> {
    (infos.iter())
        .map(|i| ScramCredential {
            mechanism: i.mechanism.mechanism().to_string(),
            iterations: i.iterations,
        })
        .collect()
}

fn mechanism(name: &str) -> Result<ScramHash, Problem> {
    ScramHash::from_mechanism(&name.trim().to_ascii_uppercase()).ok_or_else(|| {
        Problem::bad_request(format!(
            "mechanism {name:?} is not SCRAM-SHA-256 or SCRAM-SHA-512"
        ))
    })
}

const MECHANISMS: [ScramHash; 2] = [ScramHash::Sha256, ScramHash::Sha512];

/// `GET /v1/users`: every user with SCRAM credentials, and their mechanisms.
#[utoipa::path(
    get,
    path = "/v1/users",
    summary = "Every SCRAM user",
    description = "As DescribeUserScramCredentials without users: every user with a SCRAM credential, with each credential's mechanism and iteration count (never the credential itself). Needs DESCRIBE on the cluster.",
    responses(
        (status = 200, description = "The users", body = UserList),
        super::openapi::ListUsersProblems,
    ),
)]
pub async fn list_users(State(http): State<Arc<HttpApi>>, extensions: Extensions) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        let users = security::users(http.broker.security(), &who).await?;
        let users = (users.iter())
            .map(|(u, c)| ScramUser {
                user: u.clone(),
                credentials: credentials(c),
            })
            .collect();
        Ok((StatusCode::OK, UserList { users }))
    }
    .await;
    answer(outcome)
}

/// `GET /v1/users/{user}`.
#[utoipa::path(
    get,
    path = "/v1/users/{user}",
    summary = "One SCRAM user's credentials",
    description = "Each credential's mechanism and iteration count (never the credential itself). Needs DESCRIBE on the cluster.",
    params(("user" = String, Path, min_length = 1, description = "The SCRAM user's name")),
    responses(
        (status = 200, description = "The user", body = ScramUser),
        super::openapi::GetUserProblems,
    ),
)]
pub async fn get_user(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    user: Extracted<String>,
) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        may_describe(&http, &who, Action::DescribeUsers)?;
        let user = user?.0;
        let credentials = credentials(&security::user(http.broker.security(), &who, &user).await?);
        Ok((StatusCode::OK, ScramUser { user, credentials }))
    }
    .await;
    answer(outcome)
}

/// A user's password, to make SCRAM credentials from.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SetUserRequest)]
pub(crate) struct SetUser {
    /// The credential is made from it; it is kept nowhere
    #[schema(min_length = 1)]
    pub(crate) password: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512, in any case; left out or null: both, so the
    /// user logs in with either
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mechanism: Option<String>,
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = 4096, maximum = 16384, default = 4096)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) iterations: Option<u32>,
}

/// `PUT /v1/users/{user}` `{"password": …, "mechanism"?, "iterations"?}`: sets the
/// user's SCRAM credential (both mechanisms unless one is named) from a password, with
/// a fresh salt; the password itself is kept nowhere.
#[utoipa::path(
    put,
    path = "/v1/users/{user}",
    summary = "Set a user's SCRAM credentials from a password",
    description = "As `kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[password=…]'`: the credential of each mechanism (both unless `mechanism` names one) is made here from the password with a fresh random salt, and replaces the one the user had; the password itself is kept nowhere. The user logs in over SASL at once. Needs ALTER on the cluster; audited (`user.alter_scram_credentials`).",
    params(("user" = String, Path, min_length = 1, description = "The SCRAM user's name")),
    request_body = SetUser,
    responses(
        (status = 200, description = "The user's credentials now", body = ScramUser),
        super::openapi::SetUserProblems,
    ),
)]
pub async fn set_user(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    user: Extracted<String>,
    body: Body,
) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        let (user, body) = extract(user, body)?;
        let req: SetUser = json::parse(&body, "SCRAM user")?;
        let hashes = match &req.mechanism {
            Some(m) => vec![mechanism(m)?],
            None => MECHANISMS.to_vec(),
        };
        let iterations = req.iterations.unwrap_or(MIN_ITERATIONS);
        let alterations = (hashes.iter())
            .map(|h| {
                let alteration = CredentialAlteration::Password {
                    mechanism: h.kafka_type(),
                    iterations,
                    password: req.password.clone(),
                };
                (user.clone(), alteration)
            })
            .collect();
        let altered = alter_user(&http, &who, alterations).await?;
        let credentials = credentials(&altered.credentials);
        Ok((StatusCode::OK, ScramUser { user, credentials }))
    }
    .await;
    answer(outcome)
}

/// One user's alterations, done by the service (which audits them).
async fn alter_user(
    http: &HttpApi,
    who: &Caller,
    alterations: Vec<(String, CredentialAlteration)>,
) -> Result<UserAltered, Problem> {
    let mut outcomes = security::alter_users(http.broker.security(), who, alterations).await;
    let (_, outcome) = outcomes.pop().expect("one outcome for the one user");
    Ok(outcome?)
}

/// Which of a user's credentials to delete.
#[derive(Debug, Deserialize, Default, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteUserQuery {
    /// SCRAM-SHA-256 or SCRAM-SHA-512, in any case; left out: every mechanism
    mechanism: Option<String>,
}

/// `DELETE /v1/users/{user}[?mechanism=…]`: one of the user's credentials, or all.
#[utoipa::path(
    delete,
    path = "/v1/users/{user}",
    summary = "Delete a user's SCRAM credentials",
    description = "The credential of the mechanism named, or without `mechanism` every credential the user has (the user is then gone). Needs ALTER on the cluster; audited (`user.alter_scram_credentials`).",
    params(("user" = String, Path, min_length = 1, description = "The SCRAM user's name"), DeleteUserQuery),
    responses(
        (status = 200, description = "The credentials deleted", body = UserCredentialsDeleted),
        super::openapi::DeleteUserProblems,
    ),
)]
pub async fn delete_user(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    user: Extracted<String>,
    query: QueryOf<DeleteUserQuery>,
) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        let user = user?.0;
        let query = query.map_err(|e| Problem::bad_request(e.body_text()))?.0;
        let alteration = match &query.mechanism {
            Some(m) => CredentialAlteration::Delete {
                mechanism: mechanism(m)?.kafka_type(),
            },
            None => CredentialAlteration::DeleteAll,
        };
        let altered = alter_user(&http, &who, vec![(user.clone(), alteration)]).await?;
        let deleted = (altered.deleted.iter())
            .map(|h| h.mechanism().to_string())
            .collect();
        Ok((StatusCode::OK, UserCredentialsDeleted { user, deleted }))
    }
    .await;
    answer(outcome)
}

// ---------------------------------------------------------------------------------
// Client quotas

/// Kafka's entity types, as the API names them.
const ENTITY_TYPES: [&str; 3] = ["user", "client-id", "ip"];

/// `GET /v1/quotas` selects by entity: each given name exactly, `<default>` for the
/// type's default entity.
#[derive(Debug, Deserialize, Default, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QuotaQuery {
    /// The user's name, or `<default>`
    user: Option<String>,
    /// The client id, or `<default>`
    client_id: Option<String>,
    /// The client's address, or `<default>`; not with `user` or `client_id` (400)
    ip: Option<String>,
}

/// The default entity of a type, as Kafka's tools print it.
const DEFAULT_ENTITY: &str = "<default>";

fn quota((entity, values): &security::QuotaEntry) -> QuotaEntry {
    QuotaEntry {
        entity: entity.clone(),
        values: values.clone(),
    }
}

/// `GET /v1/quotas`: the quotas of every entity the query selects.
#[utoipa::path(
    get,
    path = "/v1/quotas",
    summary = "Client quotas",
    description = "As DescribeClientQuotas: the quotas of every entity the parameters select, read from the metastore now (what a tool set a moment ago through another agent is shown). Each parameter given matches that entity type's name exactly, `<default>` the type's default entity; an entity may name types not asked for (`user=alice` also selects `user=alice, client-id=…`); with none, every entity. Needs DESCRIBE_CONFIGS on the cluster.",
    params(QuotaQuery),
    responses(
        (status = 200, description = "The entities and their quotas", body = QuotaList),
        super::openapi::ListQuotasProblems,
    ),
)]
pub async fn list_quotas(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    query: QueryOf<QuotaQuery>,
) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        may_describe(&http, &who, Action::DescribeQuotas)?;
        let query = query.map_err(|e| Problem::bad_request(e.body_text()))?.0;
        let filter: Vec<(String, EntityMatch)> = [
            ("user", query.user),
            ("client-id", query.client_id),
            ("ip", query.ip),
        ]
        .into_iter()
        .filter_map(|(kind, name)| {
            let m = match name?.as_str() {
                DEFAULT_ENTITY => EntityMatch::Default,
                n => EntityMatch::Exactly(n.to_string()),
            };
            Some((kind.to_string(), m))
        })
        .collect();
        let entries = security::quotas(http.broker.security(), &who, &filter, false).await?;
        let quotas = entries.iter().map(quota).collect();
        Ok((StatusCode::OK, QuotaList { quotas }))
    }
    .await;
    answer(outcome)
}

/// An entity's quotas to set and delete. (Its schema says which quotas go with which
/// entity, which utoipa's derive cannot: [`super::openapi::alter_quotas`].)
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AlterQuotas {
    /// Entity type to name, `null` for the type's default.
    pub(crate) entity: BTreeMap<String, Option<String>>,
    #[serde(default)]
    pub(crate) set: BTreeMap<String, f64>,
    #[serde(default)]
    pub(crate) delete: Vec<String>,
}

impl utoipa::PartialSchema for AlterQuotas {
    fn schema() -> RefOr<Schema> {
        super::openapi::alter_quotas().into()
    }
}

impl ToSchema for AlterQuotas {
    fn name() -> std::borrow::Cow<'static, str> {
        "AlterQuotasRequest".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        let entity = super::openapi::quota_entity().into();
        schemas.push(("QuotaEntity".to_string(), entity));
    }
}

/// `PATCH /v1/quotas` `{"entity": {"user": "alice"}, "set": {key: value}, "delete":
/// [key]}`: as AlterClientQuotas; answers the entity's quotas after.
#[utoipa::path(
    patch,
    path = "/v1/quotas",
    summary = "Set or remove an entity's client quotas",
    description = "As AlterClientQuotas for one entity: `set` gives quotas their values, `delete` removes them, and the others keep theirs. Kafka clients and HTTP callers are held to them alike, on this agent at once and on the others within moments. Needs ALTER_CONFIGS on the cluster; audited (`quota.alter`).",
    request_body = AlterQuotas,
    responses(
        (status = 200, description = "The entity's quotas now", body = QuotaEntry),
        super::openapi::AlterQuotasProblems,
    ),
)]
pub async fn alter_quotas(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    body: Body,
) -> Response {
    let who = caller(&extensions);
    let outcome = async {
        let req: AlterQuotas = json::parse(&body?, "quota alteration")?;
        if let Some(kind) = req
            .entity
            .keys()
            .find(|k| !ENTITY_TYPES.contains(&k.as_str()))
        {
            return Err(Problem::bad_request(format!(
                "entity type {kind:?} is not one of user, client-id, ip"
            )));
        }
        if req.set.is_empty() && req.delete.is_empty() {
            return Err(Problem::bad_request("set or delete at least one quota"));
        }
        if let Some(key) = req.delete.iter().find(|k| req.set.contains_key(*k)) {
            return Err(Problem::bad_request(format!(
                "{key} is both set and deleted"
            )));
        }
        let ops = (req.set.into_iter())
            .map(|(k, v)| (k, Some(v)))
            .chain(req.delete.into_iter().map(|k| (k, None)))
            .collect();
        let alteration = QuotaAlteration {
            entity: req.entity.clone().into_iter().collect(),
            ops,
        };
        let security = http.broker.security();
        let mut outcomes = security::alter_quotas(security, &who, vec![alteration], false).await;
        outcomes.pop().expect("one outcome for the one entity")?;
        let values = security::entity_quotas(security, &who, &req.entity)?;
        let entity = req.entity;
        Ok((StatusCode::OK, QuotaEntry { entity, values }))
    }
    .await;
    answer(outcome)
}
