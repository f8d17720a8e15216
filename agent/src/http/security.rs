//! ACLs, SCRAM users and client quotas over HTTP (`docs/http.md`, "Security
//! administration"), on the security service the Kafka APIs also use: a binding made
//! here is the one `kafka-acls.sh --list` shows, a user set here logs in over SASL at
//! once, a quota set here holds Kafka clients and HTTP callers alike. Every change is
//! audited with the actions the Kafka APIs record (`acl.create`, `acl.delete`,
//! `user.alter_scram_credentials`, `quota.alter`).
//!
//! - `GET|POST|DELETE /v1/acls` (DESCRIBE, ALTER, ALTER on the cluster);
//! - `GET /v1/users`, `GET|PUT|DELETE /v1/users/{user}` (DESCRIBE, ALTER on the cluster);
//! - `GET|PATCH /v1/quotas` (DESCRIBE_CONFIGS, ALTER_CONFIGS on the cluster).
//!
//! Names are Kafka's (`TOPIC`, `PREFIXED`, `READ`, `ALLOW`, `SCRAM-SHA-512`,
//! `producer_byte_rate`), read in any case.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{Extensions, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::HttpApi;
use super::admin::{audited, caller};
use super::json;
use super::problem::{Body, Extracted, Problem, extract};
use crate::authz::Caller;
use crate::authz::rules::{
    AclFilter, FilterPattern, Operation, PatternType, Permission, resource_type_name,
};
use crate::sasl::scram::{MIN_ITERATIONS, ScramHash};
use crate::service::security::{
    self, AclRecord, Action, Allowed, CredentialChange, CredentialInfo, EntityMatch, QuotaEntity,
    SecurityError,
};

type QueryOf<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

/// May the caller make the change `audited_as` names? The security service decides; a
/// refusal is audited here, with `resource` as the request's path names it (its body
/// is not read for a caller refused).
fn may_change(
    http: &HttpApi,
    extensions: &Extensions,
    action: Action,
    audited_as: &str,
    resource: &str,
) -> Result<Allowed, Problem> {
    allowed(http, extensions, action).inspect_err(|p| {
        let who = caller(extensions);
        let refused = Err(p.detail.clone());
        http.broker
            .audit()
            .record(&who, audited_as, resource, json!({}), refused);
    })
}

/// A user's resource in the audit log, as the path names it.
fn user_resource(user: &Extracted<String>) -> String {
    match user {
        Ok(u) => format!("user:{}", u.0),
        Err(_) => "user:".to_string(),
    }
}

/// May the caller do `action`? The security service decides (the route table leaves
/// it to it).
fn allowed(http: &HttpApi, extensions: &Extensions, action: Action) -> Result<Allowed, Problem> {
    let principal = super::auth::authenticated(extensions);
    let host = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    let who = Caller {
        principal: &principal,
        host,
    };
    security::authorize(http.broker.security(), who, action).map_err(Problem::from)
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

fn binding_json(a: &AclRecord) -> Value {
    json!({
        "resource_type": resource_type_name(a.resource_type).unwrap_or("UNKNOWN"),
        "resource_name": a.resource_name,
        "pattern_type": pattern_name(a.pattern_type),
        "principal": a.principal,
        "host": a.host,
        "operation": Operation::from_code(a.operation).map_or("UNKNOWN", Operation::name),
        "permission": match Permission::from_code(a.permission) {
            Some(Permission::Deny) => "DENY",
            _ => "ALLOW",
        },
    })
}

fn bindings_json(mut acls: Vec<AclRecord>) -> Value {
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
    Value::Array(acls.iter().map(binding_json).collect())
}

/// An ACL binding as the API reads one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Binding {
    resource_type: String,
    resource_name: String,
    #[serde(default)]
    pattern_type: Option<String>,
    principal: String,
    #[serde(default)]
    host: Option<String>,
    operation: String,
    #[serde(default)]
    permission: Option<String>,
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateAcls {
    acls: Vec<Binding>,
}

/// What `GET` and `DELETE /v1/acls` select; each field left out matches any value.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AclQuery {
    resource_type: Option<String>,
    resource_name: Option<String>,
    /// LITERAL, PREFIXED, ANY, or MATCH: the bindings that apply to `resource_name`.
    pattern_type: Option<String>,
    principal: Option<String>,
    host: Option<String>,
    operation: Option<String>,
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

    fn filter(&self) -> Result<AclFilter, Problem> {
        fn any(v: &Option<String>) -> Option<&str> {
            v.as_deref().filter(|v| kafka_name(v) != "ANY")
        }
        Ok(AclFilter {
            resource_type: any(&self.resource_type).map(resource_type).transpose()?,
            resource_name: self.resource_name.clone(),
            pattern_type: match self.pattern_type.as_deref().map(kafka_name).as_deref() {
                None | Some("ANY") => FilterPattern::Any,
                Some("MATCH") => FilterPattern::Match,
                Some(_) => FilterPattern::Exactly(pattern_type(
                    self.pattern_type.as_deref().unwrap_or_default(),
                )?),
            },
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: any(&self.operation).map(operation).transpose()?,
            permission: any(&self.permission).map(permission).transpose()?,
        })
    }

    fn describe(&self) -> Value {
        serde_json::to_value(BTreeMap::from([
            ("resource_type", &self.resource_type),
            ("resource_name", &self.resource_name),
            ("pattern_type", &self.pattern_type),
            ("principal", &self.principal),
            ("host", &self.host),
            ("operation", &self.operation),
            ("permission", &self.permission),
        ]))
        .unwrap_or_default()
    }
}

fn acl_resource(a: &AclRecord) -> String {
    format!(
        "acl:{}:{}:{}",
        resource_type_name(a.resource_type).unwrap_or("UNKNOWN"),
        pattern_name(a.pattern_type),
        a.resource_name
    )
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
pub async fn list_acls(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    query: QueryOf<AclQuery>,
) -> Response {
    let outcome = async {
        let allowed = allowed(&http, &extensions, Action::DescribeAcls)?;
        enabled(&http)?;
        let query = query.map_err(|e| Problem::bad_request(e.body_text()))?.0;
        let filter = query.filter()?;
        let acls = security::acls(http.broker.security(), &allowed, &filter).await?;
        Ok::<_, Problem>(json!({ "acls": bindings_json(acls) }))
    }
    .await;
    match outcome {
        Ok(v) => axum::Json(v).into_response(),
        Err(p) => p.into_response(),
    }
}

/// `POST /v1/acls` `{"acls": [binding, …]}`: all of them, or (one invalid) none.
pub async fn create_acls(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    body: Body,
) -> Response {
    let caller = caller(&extensions);
    let allowed = match may_change(&http, &extensions, Action::AlterAcls, "acl.create", "acls") {
        Ok(a) => a,
        Err(p) => return p.into_response(),
    };
    if let Err(p) = enabled(&http) {
        return p.into_response();
    }
    let parsed = body.map_err(Problem::from).and_then(|b| {
        let req: CreateAcls = json::parse(&b, "ACL creation")?;
        if req.acls.is_empty() {
            return Err(Problem::bad_request(
                "acls is empty: name at least one binding",
            ));
        }
        req.acls
            .iter()
            .enumerate()
            .map(|(i, b)| {
                b.record()
                    .map_err(|p| Problem::bad_request(format!("acls[{i}]: {}", p.detail)))
            })
            .collect::<Result<Vec<_>, _>>()
    });
    let records = match parsed {
        Ok(r) => r,
        Err(p) => return p.into_response(),
    };
    let resource = acl_resource(&records[0]);
    let request = json!({ "acls": records.iter().map(binding_json).collect::<Vec<_>>() });
    let checked = security::check_acls(http.broker.security(), &allowed, records.clone());
    let outcome = match checked
        .into_iter()
        .enumerate()
        .find_map(|(i, c)| c.err().map(|e| (i, e)))
    {
        Some((i, e @ SecurityError::Invalid(_))) => {
            Err(Problem::bad_request(format!("acls[{i}]: {e}")))
        }
        Some((_, e)) => Err(e.into()),
        None => security::store_acls(http.broker.security(), &allowed, records.clone())
            .await
            .map(|()| {
                (
                    StatusCode::CREATED,
                    json!({ "created": bindings_json(records) }),
                )
            })
            .map_err(Problem::from),
    };
    audited(&http, &caller, "acl.create", &resource, request, outcome)
}

/// `DELETE /v1/acls?…`: the bindings the query selects (at least one field named;
/// `resource_type=ANY` selects every binding).
pub async fn delete_acls(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    query: QueryOf<AclQuery>,
) -> Response {
    let caller = caller(&extensions);
    let allowed = match may_change(&http, &extensions, Action::AlterAcls, "acl.delete", "acls") {
        Ok(a) => a,
        Err(p) => return p.into_response(),
    };
    if let Err(p) = enabled(&http) {
        return p.into_response();
    }
    let query = match query {
        Ok(q) => q.0,
        Err(e) => return Problem::bad_request(e.body_text()).into_response(),
    };
    if query.is_empty() {
        return Problem::bad_request(
            "name what to delete (resource_type, resource_name, principal, …); \
             resource_type=ANY deletes every binding",
        )
        .into_response();
    }
    let filter = match query.filter() {
        Ok(f) => f,
        Err(p) => return p.into_response(),
    };
    let resource = format!(
        "acl:{}:{}:{}",
        query
            .resource_type
            .as_deref()
            .map_or("ANY".into(), kafka_name),
        query
            .pattern_type
            .as_deref()
            .map_or("ANY".into(), kafka_name),
        query.resource_name.as_deref().unwrap_or("*"),
    );
    let outcome = security::delete_acls(http.broker.security(), &allowed, vec![filter])
        .await
        .pop()
        .expect("one outcome per filter")
        .map(|deleted| (StatusCode::OK, json!({ "deleted": bindings_json(deleted) })))
        .map_err(Problem::from);
    audited(
        &http,
        &caller,
        "acl.delete",
        &resource,
        query.describe(),
        outcome,
    )
}

// ---------------------------------------------------------------------------------
// SCRAM users

fn credentials_json(infos: &[CredentialInfo]) -> Value {
    Value::Array(
        infos
            .iter()
            .map(|i| json!({ "mechanism": i.mechanism.mechanism(), "iterations": i.iterations }))
            .collect(),
    )
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
pub async fn list_users(State(http): State<Arc<HttpApi>>, extensions: Extensions) -> Response {
    let allowed = match allowed(&http, &extensions, Action::DescribeUsers) {
        Ok(a) => a,
        Err(p) => return p.into_response(),
    };
    match security::users(http.broker.security(), &allowed).await {
        Ok(users) => axum::Json(json!({
            "users": users
                .iter()
                .map(|(u, c)| json!({ "user": u, "credentials": credentials_json(c) }))
                .collect::<Vec<_>>(),
        }))
        .into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// `GET /v1/users/{user}`.
pub async fn get_user(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    user: Extracted<String>,
) -> Response {
    let allowed = match allowed(&http, &extensions, Action::DescribeUsers) {
        Ok(a) => a,
        Err(p) => return p.into_response(),
    };
    let user = match user {
        Ok(u) => u.0,
        Err(e) => return Problem::from(e).into_response(),
    };
    match security::user(http.broker.security(), &allowed, &user).await {
        Ok(c) => {
            axum::Json(json!({ "user": user, "credentials": credentials_json(&c) })).into_response()
        }
        Err(e) => Problem::from(e).into_response(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetUser {
    password: String,
    /// One mechanism; by default both, so the user logs in with either.
    #[serde(default)]
    mechanism: Option<String>,
    #[serde(default, deserialize_with = "json::opt")]
    iterations: Option<u32>,
}

/// `PUT /v1/users/{user}` `{"password": …, "mechanism"?, "iterations"?}`: sets the
/// user's SCRAM credential (both mechanisms unless one is named) from a password, with
/// a fresh salt; the password itself is kept nowhere.
pub async fn set_user(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    user: Extracted<String>,
    body: Body,
) -> Response {
    let caller = caller(&extensions);
    let named = user_resource(&user);
    let allowed = match may_change(
        &http,
        &extensions,
        Action::AlterUsers,
        "user.alter_scram_credentials",
        &named,
    ) {
        Ok(a) => a,
        Err(p) => return p.into_response(),
    };
    let (user, body) = match extract(user, body) {
        Ok(parts) => parts,
        Err(p) => return p.into_response(),
    };
    let resource = format!("user:{user}");
    let prepared = async {
        let req: SetUser = json::parse(&body, "SCRAM user")?;
        let hashes = match &req.mechanism {
            Some(m) => vec![mechanism(m)?],
            None => MECHANISMS.to_vec(),
        };
        let iterations = req.iterations.unwrap_or(MIN_ITERATIONS);
        let changes = hashes
            .iter()
            .map(|h| security::credential_from_password(&user, *h, &req.password, iterations))
            .collect::<Result<Vec<_>, _>>()?;
        let upsert: Vec<Value> = hashes
            .iter()
            .map(|h| json!({ "mechanism": h.mechanism(), "iterations": iterations }))
            .collect();
        Ok::<_, Problem>((changes, json!({ "delete": [], "upsert": upsert })))
    }
    .await;
    let (changes, request) = match prepared {
        Ok(p) => p,
        Err(p) => {
            return audited::<Value>(
                &http,
                &caller,
                "user.alter_scram_credentials",
                &resource,
                json!({}),
                Err(p),
            );
        }
    };
    let outcome = alter_user(&http, &allowed, &user, changes).await;
    audited(
        &http,
        &caller,
        "user.alter_scram_credentials",
        &resource,
        request,
        outcome,
    )
}

async fn alter_user(
    http: &HttpApi,
    allowed: &Allowed,
    user: &str,
    changes: Vec<CredentialChange>,
) -> Result<(StatusCode, Value), Problem> {
    let mut refused = security::alter_users(
        http.broker.security(),
        allowed,
        BTreeMap::from([(user.to_string(), changes)]),
    )
    .await?;
    if let Some(e) = refused.remove(user) {
        return Err(e.into());
    }
    let now = match security::user(http.broker.security(), allowed, user).await {
        Ok(c) => c,
        Err(SecurityError::NotFound(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    Ok((
        StatusCode::OK,
        json!({ "user": user, "credentials": credentials_json(&now) }),
    ))
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DeleteUserQuery {
    mechanism: Option<String>,
}

/// `DELETE /v1/users/{user}[?mechanism=…]`: one of the user's credentials, or all.
pub async fn delete_user(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    user: Extracted<String>,
    query: QueryOf<DeleteUserQuery>,
) -> Response {
    let caller = caller(&extensions);
    let named = user_resource(&user);
    let allowed = match may_change(
        &http,
        &extensions,
        Action::AlterUsers,
        "user.alter_scram_credentials",
        &named,
    ) {
        Ok(a) => a,
        Err(p) => return p.into_response(),
    };
    let user = match user {
        Ok(u) => u.0,
        Err(e) => return Problem::from(e).into_response(),
    };
    let resource = format!("user:{user}");
    let outcome = async {
        let query = query.map_err(|e| Problem::bad_request(e.body_text()))?.0;
        let hashes = match &query.mechanism {
            Some(m) => vec![mechanism(m)?],
            None => security::user(http.broker.security(), &allowed, &user)
                .await?
                .iter()
                .map(|c| c.mechanism)
                .collect(),
        };
        let deleted: Vec<&str> = hashes.iter().map(|h| h.mechanism()).collect();
        let changes = hashes
            .iter()
            .map(|h| CredentialChange::Delete(*h))
            .collect();
        alter_user(&http, &allowed, &user, changes).await?;
        Ok((StatusCode::OK, json!({ "user": user, "deleted": deleted })))
    }
    .await;
    audited(
        &http,
        &caller,
        "user.alter_scram_credentials",
        &resource,
        json!({ "delete": query_mechanism(&outcome) }),
        outcome,
    )
}

fn query_mechanism(outcome: &Result<(StatusCode, Value), Problem>) -> Value {
    match outcome {
        Ok((_, v)) => v["deleted"].clone(),
        Err(_) => Value::Array(Vec::new()),
    }
}

// ---------------------------------------------------------------------------------
// Client quotas

/// Kafka's entity types, as the API names them.
const ENTITY_TYPES: [&str; 3] = ["user", "client-id", "ip"];

/// `GET /v1/quotas` selects by entity: each given name exactly, `<default>` for the
/// type's default entity.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct QuotaQuery {
    user: Option<String>,
    client_id: Option<String>,
    ip: Option<String>,
}

/// The default entity of a type, as Kafka's tools print it.
const DEFAULT_ENTITY: &str = "<default>";

fn quota_json((entity, values): &security::QuotaEntry) -> Value {
    json!({ "entity": entity, "values": values })
}

/// `GET /v1/quotas`: the quotas of every entity the query selects.
pub async fn list_quotas(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    query: QueryOf<QuotaQuery>,
) -> Response {
    let outcome = async {
        let allowed = allowed(&http, &extensions, Action::DescribeQuotas)?;
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
        let entries = security::quotas(http.broker.security(), &allowed, &filter, false).await?;
        Ok::<_, Problem>(json!({ "quotas": entries.iter().map(quota_json).collect::<Vec<_>>() }))
    }
    .await;
    match outcome {
        Ok(v) => axum::Json(v).into_response(),
        Err(p) => p.into_response(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlterQuotas {
    /// Entity type to name, `null` for the type's default.
    entity: BTreeMap<String, Option<String>>,
    #[serde(default)]
    set: BTreeMap<String, f64>,
    #[serde(default)]
    delete: Vec<String>,
}

/// `PATCH /v1/quotas` `{"entity": {"user": "alice"}, "set": {key: value}, "delete":
/// [key]}`: as AlterClientQuotas; answers the entity's quotas after.
pub async fn alter_quotas(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    body: Body,
) -> Response {
    let caller = caller(&extensions);
    let allowed = match may_change(
        &http,
        &extensions,
        Action::AlterQuotas,
        "quota.alter",
        "quotas",
    ) {
        Ok(a) => a,
        Err(p) => return p.into_response(),
    };
    let parsed = body.map_err(Problem::from).and_then(|b| {
        let req: AlterQuotas = json::parse(&b, "quota alteration")?;
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
        Ok(req)
    });
    let req = match parsed {
        Ok(r) => r,
        Err(p) => return p.into_response(),
    };
    let entity: QuotaEntity = req.entity;
    let ops: Vec<(String, Option<f64>)> = req
        .set
        .iter()
        .map(|(k, v)| (k.clone(), Some(*v)))
        .chain(req.delete.iter().map(|k| (k.clone(), None)))
        .collect();
    let resource = format!(
        "quota:{}",
        entity
            .iter()
            .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or(DEFAULT_ENTITY)))
            .collect::<Vec<_>>()
            .join(",")
    );
    let request = json!({ "set": ops.iter().cloned().collect::<BTreeMap<_, _>>() });
    let outcome = async {
        security::check_quota(&entity, &ops)?;
        security::store_quotas(
            http.broker.security(),
            &allowed,
            vec![(entity.clone(), ops)],
        )
        .await?;
        let values = security::entity_quotas(http.broker.security(), &allowed, &entity)?;
        Ok::<_, Problem>((
            StatusCode::OK,
            json!({ "entity": entity, "values": values }),
        ))
    }
    .await;
    audited(&http, &caller, "quota.alter", &resource, request, outcome)
}
