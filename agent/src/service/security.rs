//! Security administration in domain terms: the ACL bindings the authorizer enforces,
//! the SCRAM credentials SASL listeners check, and client quotas. Kafka's ACL, SCRAM
//! and quota APIs (`api/acls.rs`, `api/users.rs`, `api/quotas.rs`) and the HTTP API's
//! `/v1/acls`, `/v1/users` and `/v1/quotas` (`http/security.rs`) translate their
//! requests to these calls and [`SecurityError`] to Kafka codes or HTTP statuses, so a
//! binding made with `strata acls create` is the one `kafka-acls.sh --list` shows.
//!
//! The service decides who may: every call takes the [`Caller`] and asks
//! [`authorize`] first, for the operation on the cluster Kafka asks (DESCRIBE or ALTER
//! for ACLs and users, DESCRIBE_CONFIGS or ALTER_CONFIGS for quotas); neither edge
//! checks these itself. It audits every change, refusals included, one entry per
//! binding, filter, user or quota entity ([`audited`]).
//!
//! As Kafka: without an authorizer there are no ACLs to read or change
//! ([`SecurityError::Disabled`]). The agent that stored a change reads the bindings or
//! quotas again before it answers, so the caller's next request here is decided by
//! them; other agents follow within moments (a metastore watch).

mod audited;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::json;

use strata_metastore::UserCredentials;
/// ACL bindings and quota entities and changes, as the service takes and answers them.
pub use strata_metastore::{AclRecord, QuotaChange, QuotaEntity};

use strata_metastore::Metastore;

use crate::audit::Audit;
use crate::authz::rules::{self, AclFilter};
use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::quota::Quotas;
use crate::quota::rules as quota_rules;
use crate::sasl::scram::{MAX_ITERATIONS, MIN_ITERATIONS, ScramHash};

/// Why a security request is refused; each edge maps the kind to its own terms.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SecurityError {
    /// The caller may not do this (CLUSTER_AUTHORIZATION_FAILED).
    #[error("{principal} may not {operation} CLUSTER {CLUSTER_NAME}")]
    Denied {
        principal: String,
        operation: &'static str,
    },
    /// No authorizer is configured, so there are no ACLs.
    #[error("no authorizer is configured (set authorizer = \"acl\")")]
    Disabled,
    /// A binding, filter, credential or quota that cannot be.
    #[error("{0}")]
    Invalid(String),
    /// A credential named that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The same user or credential twice in one request.
    #[error("{0}")]
    Duplicate(String),
    /// A credential Kafka would not accept (too few iterations, an empty name).
    #[error("{0}")]
    UnacceptableCredential(String),
    #[error("{0}")]
    UnsupportedMechanism(String),
    #[error(transparent)]
    Metastore(Arc<strata_metastore::Error>),
}

impl SecurityError {
    /// Kafka's name for the refusal, which the audit log puts before its message.
    fn name(&self) -> &'static str {
        match self {
            SecurityError::Denied { .. } => "CLUSTER_AUTHORIZATION_FAILED",
            SecurityError::Disabled => "SECURITY_DISABLED",
            SecurityError::Invalid(_) => "INVALID_REQUEST",
            SecurityError::NotFound(_) => "RESOURCE_NOT_FOUND",
            SecurityError::Duplicate(_) => "DUPLICATE_RESOURCE",
            SecurityError::UnacceptableCredential(_) => "UNACCEPTABLE_CREDENTIAL",
            SecurityError::UnsupportedMechanism(_) => "UNSUPPORTED_SASL_MECHANISM",
            SecurityError::Metastore(_) => "METASTORE_ERROR",
        }
    }

    /// As the audit log records a refusal: `NAME: message`.
    fn audited(&self) -> String {
        format!("{}: {self}", self.name())
    }
}

/// What the security service works on: the authorizer's bindings, the metastore, the
/// quotas this agent enforces (`Broker::security` lends them).
#[derive(Clone, Copy)]
pub struct Security<'a> {
    pub authorizer: &'a Authorizer,
    pub metastore: &'a Metastore,
    pub quotas: &'a Quotas,
    pub audit: &'a Audit,
}

/// What a caller asks of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    DescribeAcls,
    AlterAcls,
    DescribeUsers,
    AlterUsers,
    DescribeQuotas,
    AlterQuotas,
}

impl Action {
    /// The operation on the cluster Kafka asks for it.
    fn needs(self) -> Operation {
        match self {
            Action::DescribeAcls | Action::DescribeUsers => Operation::Describe,
            Action::AlterAcls | Action::AlterUsers => Operation::Alter,
            Action::DescribeQuotas => Operation::DescribeConfigs,
            Action::AlterQuotas => Operation::AlterConfigs,
        }
    }
}

/// May `who` do `action`? Every call here asks it first; an edge that refuses a
/// whole request before reading it (Kafka's order for describes) asks it too.
pub fn authorize(s: Security<'_>, who: &Caller, action: Action) -> Result<(), SecurityError> {
    let operation = action.needs();
    if s.authorizer
        .allows(who.authz(), operation, ResourceType::Cluster, CLUSTER_NAME)
    {
        Ok(())
    } else {
        Err(SecurityError::Denied {
            principal: who.principal.to_string(),
            operation: operation.name(),
        })
    }
}

fn metastore(e: strata_metastore::Error) -> SecurityError {
    tracing::warn!(error = %e, "a security change failed in the metastore");
    SecurityError::Metastore(Arc::new(e))
}

// ---------------------------------------------------------------------------------
// ACLs

fn acls_enabled(s: Security<'_>) -> Result<(), SecurityError> {
    if s.authorizer.is_enabled() {
        Ok(())
    } else {
        Err(SecurityError::Disabled)
    }
}

/// Reads the bindings again after a change, so this agent decides by them at once.
async fn refresh_acls(s: Security<'_>) {
    if let Err(e) = s.authorizer.refresh().await {
        tracing::warn!(error = %e, "cannot re-read ACLs after a change; the watch will");
    }
}

/// What selects bindings, as Kafka's `AclBindingFilter` carries it: Kafka's codes, with
/// ANY (1) for what it leaves open and MATCH (2, a pattern type) for the bindings that
/// apply to a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclBindingFilter {
    fn checked(&self) -> Result<AclFilter, SecurityError> {
        AclFilter::from_codes(
            self.resource_type,
            self.resource_name.clone(),
            self.pattern_type,
            self.principal.clone(),
            self.host.clone(),
            self.operation,
            self.permission,
        )
        .map_err(|e| SecurityError::Invalid(e.0))
    }
}

/// Stores checked bindings in one metastore transaction (a binding already stored is
/// not stored twice).
async fn store_acls(s: Security<'_>, valid: Vec<AclRecord>) -> Result<(), SecurityError> {
    if valid.is_empty() {
        return Ok(());
    }
    let stored = s.metastore.create_acls(valid).await;
    refresh_acls(s).await;
    stored.map_err(metastore)
}

/// Kafka's CreateAcls: each binding checked as Kafka's controller checks one
/// ([`rules::binding`]), on its own; the valid ones stored together. Audited per
/// binding (`acl.create`).
pub async fn create_acls(
    s: Security<'_>,
    who: &Caller,
    bindings: Vec<AclRecord>,
) -> Vec<Result<(), SecurityError>> {
    let asked: Vec<_> = bindings.iter().map(audited::binding).collect();
    let outcomes: Vec<Result<(), SecurityError>> =
        match authorize(s, who, Action::AlterAcls).and_then(|()| acls_enabled(s)) {
            Err(e) => bindings.iter().map(|_| Err(e.clone())).collect(),
            Ok(()) => {
                let checked: Vec<_> = (bindings.into_iter())
                    .map(|b| rules::binding(b).map_err(|e| SecurityError::Invalid(e.0)))
                    .collect();
                let valid = checked.iter().filter_map(|c| c.clone().ok()).collect();
                let stored = store_acls(s, valid).await;
                (checked.into_iter())
                    .map(|c| c.map(drop).and(stored.clone()))
                    .collect()
            }
        };
    for ((resource, request), outcome) in asked.into_iter().zip(&outcomes) {
        let outcome = outcome.as_ref().map(|()| json!({}));
        audited::record(s, who, "acl.create", &resource, request, outcome);
    }
    outcomes
}

/// The HTTP API's creation: every binding, or (one refused) none. The refusal names
/// the binding refused by its index; `None` when the request as a whole was. Audited
/// per binding (`acl.create`).
pub async fn create_acls_together(
    s: Security<'_>,
    who: &Caller,
    bindings: Vec<AclRecord>,
) -> Result<Vec<AclRecord>, (Option<usize>, SecurityError)> {
    let asked: Vec<_> = bindings.iter().map(audited::binding).collect();
    let outcome = async {
        let whole = |e| (None, e);
        authorize(s, who, Action::AlterAcls).map_err(whole)?;
        acls_enabled(s).map_err(whole)?;
        let valid: Vec<AclRecord> = (bindings.into_iter().enumerate())
            .map(|(i, b)| rules::binding(b).map_err(|e| (Some(i), SecurityError::Invalid(e.0))))
            .collect::<Result<_, _>>()?;
        store_acls(s, valid.clone()).await.map_err(whole)?;
        Ok(valid)
    }
    .await;
    for (i, (resource, request)) in asked.into_iter().enumerate() {
        let outcome = match &outcome {
            Ok(_) => Ok(json!({})),
            Err((Some(j), e)) if *j != i => Err(format!(
                "not created: binding {j} of the request was refused ({})",
                e.audited()
            )),
            Err((_, e)) => Err(e.audited()),
        };
        s.audit
            .record(who, "acl.create", &resource, request, outcome);
    }
    outcome
}

/// The bindings `filter` selects: for a caller with DESCRIBE on the cluster.
pub async fn acls(
    s: Security<'_>,
    who: &Caller,
    filter: &AclBindingFilter,
) -> Result<Vec<AclRecord>, SecurityError> {
    authorize(s, who, Action::DescribeAcls)?;
    acls_enabled(s)?;
    let filter = filter.checked()?;
    let all = s.metastore.acls().await.map_err(metastore)?;
    Ok(all.into_iter().filter(|a| filter.matches(a)).collect())
}

/// Deletes the bindings each filter selects; answers, filter by filter, what it
/// deleted. Audited per filter (`acl.delete`).
pub async fn delete_acls(
    s: Security<'_>,
    who: &Caller,
    filters: Vec<AclBindingFilter>,
) -> Vec<Result<Vec<AclRecord>, SecurityError>> {
    let allowed = authorize(s, who, Action::AlterAcls).and_then(|()| acls_enabled(s));
    let mut out = Vec::with_capacity(filters.len());
    let mut changed = false;
    for asked in filters {
        let deleted = match allowed.clone().and_then(|()| asked.checked()) {
            Ok(filter) => s
                .metastore
                .delete_acls(move |a| filter.matches(a))
                .await
                .map_err(metastore),
            Err(e) => Err(e),
        };
        changed |= deleted.as_ref().is_ok_and(|d| !d.is_empty());
        let (resource, request) = audited::filter(&asked);
        let outcome = (deleted.as_ref()).map(|d| json!({ "deleted": d.len() }));
        audited::record(s, who, "acl.delete", &resource, request, outcome);
        out.push(deleted);
    }
    if changed {
        refresh_acls(s).await;
    }
    out
}

// ---------------------------------------------------------------------------------
// SCRAM users

/// One stored credential of a user: its mechanism and iteration count (never the
/// credential itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialInfo {
    pub mechanism: ScramHash,
    pub iterations: u32,
}

fn infos(user: &UserCredentials) -> Vec<CredentialInfo> {
    user.mechanisms
        .iter()
        .filter_map(|(name, c)| {
            Some(CredentialInfo {
                mechanism: ScramHash::from_mechanism(name)?,
                iterations: c.iterations,
            })
        })
        .collect()
}

/// Every user with SCRAM credentials, and theirs.
pub async fn users(
    s: Security<'_>,
    who: &Caller,
) -> Result<Vec<(String, Vec<CredentialInfo>)>, SecurityError> {
    authorize(s, who, Action::DescribeUsers)?;
    let all = s
        .metastore
        .all_user_credentials()
        .await
        .map_err(metastore)?;
    Ok(all.iter().map(|u| (u.user.clone(), infos(u))).collect())
}

/// One user's credentials; NotFound if it has none.
pub async fn user(
    s: Security<'_>,
    who: &Caller,
    name: &str,
) -> Result<Vec<CredentialInfo>, SecurityError> {
    authorize(s, who, Action::DescribeUsers)?;
    match s
        .metastore
        .user_credentials(name)
        .await
        .map_err(metastore)?
    {
        Some(u) => Ok(infos(&u)),
        None => Err(SecurityError::NotFound(format!(
            "Attempt to describe a user credential that does not exist: {name}"
        ))),
    }
}

/// Whether `password` is the password of SCRAM user `user`, for any mechanism it has a
/// credential for (an HTTP Basic login). False for a user that does not exist.
pub async fn password_matches(
    s: Security<'_>,
    user: &str,
    password: &str,
) -> Result<bool, SecurityError> {
    let stored = s
        .metastore
        .user_credentials(user)
        .await
        .map_err(metastore)?;
    Ok(stored.is_some_and(|u| {
        u.mechanisms.iter().any(|(mechanism, credential)| {
            ScramHash::from_mechanism(mechanism)
                .is_some_and(|h| h.password_matches(credential, password.as_bytes()))
        })
    }))
}

/// One alteration of one user's credentials, as a caller asks it. Mechanisms are
/// Kafka's codes (1: SCRAM-SHA-256, 2: SCRAM-SHA-512).
#[derive(Debug, Clone)]
pub enum CredentialAlteration {
    /// The user's credential of this mechanism.
    Delete { mechanism: i8 },
    /// Every credential the user has (the user is then gone).
    DeleteAll,
    /// A credential from the client's salted password, as AlterUserScramCredentials
    /// carries it: no password reaches the agent.
    Salted {
        mechanism: i8,
        iterations: i32,
        salt: Vec<u8>,
        salted_password: Vec<u8>,
    },
    /// A credential made here from a password, with a fresh random salt (as
    /// `kafka-configs.sh --add-config 'SCRAM-SHA-512=[password=…]'`); the password is
    /// kept nowhere.
    Password {
        mechanism: i8,
        iterations: u32,
        password: String,
    },
}

/// What one user's alterations did: the mechanisms deleted, and the credentials the
/// user has now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserAltered {
    pub deleted: Vec<ScramHash>,
    pub credentials: Vec<CredentialInfo>,
}

/// One change of one user's credential for one mechanism, checked.
#[derive(Debug, Clone)]
enum CredentialChange {
    Delete(ScramHash),
    DeleteAll,
    Upsert(ScramHash, strata_metastore::ScramCredential),
}

/// Checks one alteration as Kafka does and makes the credential it sets.
fn credential_change(
    name: &str,
    alteration: &CredentialAlteration,
) -> Result<CredentialChange, SecurityError> {
    let unacceptable = |why: &str| Err(SecurityError::UnacceptableCredential(why.into()));
    if name.is_empty() {
        return unacceptable("Username must not be empty");
    }
    let hash = |mechanism: i8| {
        ScramHash::from_kafka_type(mechanism).ok_or_else(|| {
            SecurityError::UnsupportedMechanism(format!(
                "Unknown SCRAM mechanism {mechanism} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"
            ))
        })
    };
    match alteration {
        CredentialAlteration::Delete { mechanism } => {
            Ok(CredentialChange::Delete(hash(*mechanism)?))
        }
        CredentialAlteration::DeleteAll => Ok(CredentialChange::DeleteAll),
        CredentialAlteration::Salted {
            mechanism,
            iterations,
            salt,
            salted_password,
        } => {
            let hash = hash(*mechanism)?;
            check_iterations((*iterations).into())?;
            if salt.is_empty() || salted_password.is_empty() {
                return unacceptable("Salt and salted password must not be empty");
            }
            let credential = hash.credential_from_salted(salted_password, salt, *iterations as u32);
            Ok(CredentialChange::Upsert(hash, credential))
        }
        CredentialAlteration::Password {
            mechanism,
            iterations,
            password,
        } => {
            let hash = hash(*mechanism)?;
            check_iterations((*iterations).into())?;
            if password.is_empty() {
                return unacceptable("the password must not be empty");
            }
            let mut salt = [0u8; 32];
            aws_lc_rs::rand::fill(&mut salt).expect("the system's random source works");
            let salted = hash.salted_password(password.as_bytes(), &salt, *iterations);
            let credential = hash.credential_from_salted(&salted, &salt, *iterations);
            Ok(CredentialChange::Upsert(hash, credential))
        }
    }
}

fn check_iterations(iterations: i64) -> Result<(), SecurityError> {
    if iterations < MIN_ITERATIONS.into() {
        return Err(SecurityError::UnacceptableCredential(format!(
            "Too few iterations: {iterations} (at least {MIN_ITERATIONS})"
        )));
    }
    if iterations > MAX_ITERATIONS.into() {
        return Err(SecurityError::UnacceptableCredential(format!(
            "Too many iterations: {iterations} (at most {MAX_ITERATIONS})"
        )));
    }
    Ok(())
}

/// Each user's alterations checked as Kafka's controller checks them: the first
/// refusal of a user is its answer, and a mechanism altered twice is refused.
fn checked_by_user(
    alterations: &[(String, CredentialAlteration)],
) -> Vec<(String, Result<Vec<CredentialChange>, SecurityError>)> {
    let checked = |name: &str, asked: Vec<&CredentialAlteration>| {
        let mut changes: Vec<CredentialChange> = Vec::new();
        for alteration in asked {
            let change = credential_change(name, alteration)?;
            let twice = changes.iter().any(|c| match (c, &change) {
                (CredentialChange::DeleteAll, _) | (_, CredentialChange::DeleteAll) => true,
                (a, b) => a.mechanism() == b.mechanism(),
            });
            if twice {
                return Err(SecurityError::Duplicate(
                    "A user credential cannot be altered twice in the same request".into(),
                ));
            }
            changes.push(change);
        }
        Ok(changes)
    };
    (by_user(alterations).into_iter())
        .map(|(name, asked)| (name.to_string(), checked(name, asked)))
        .collect()
}

/// The alterations of each user, users in the order first named.
fn by_user(
    alterations: &[(String, CredentialAlteration)],
) -> Vec<(&str, Vec<&CredentialAlteration>)> {
    let mut users: Vec<(&str, Vec<&CredentialAlteration>)> = Vec::new();
    for (name, alteration) in alterations {
        match users.iter_mut().find(|(u, _)| *u == name.as_str()) {
            Some((_, asked)) => asked.push(alteration),
            None => users.push((name, vec![alteration])),
        }
    }
    users
}

impl CredentialChange {
    fn mechanism(&self) -> Option<ScramHash> {
        match self {
            CredentialChange::Delete(h) | CredentialChange::Upsert(h, _) => Some(*h),
            CredentialChange::DeleteAll => None,
        }
    }
}

/// Applies one user's checked changes to what it has; what they did, or why not (a
/// credential to delete that it does not have: then it keeps what it had).
fn apply(
    user: &str,
    creds: &mut UserCredentials,
    changes: &[CredentialChange],
) -> Result<UserAltered, SecurityError> {
    let missing = |what: String| {
        SecurityError::NotFound(format!(
            "Attempt to delete a user credential that does not exist: {what}"
        ))
    };
    let before = creds.clone();
    let mut deleted = Vec::new();
    for change in changes {
        let done = match change {
            CredentialChange::Upsert(h, c) => {
                creds
                    .mechanisms
                    .insert(h.mechanism().to_string(), c.clone());
                Ok(())
            }
            CredentialChange::Delete(h) => match creds.mechanisms.remove(h.mechanism()) {
                Some(_) => {
                    deleted.push(*h);
                    Ok(())
                }
                None => Err(missing(format!("{user} {}", h.mechanism()))),
            },
            CredentialChange::DeleteAll if creds.mechanisms.is_empty() => {
                Err(missing(user.to_string()))
            }
            CredentialChange::DeleteAll => {
                let all = std::mem::take(&mut creds.mechanisms);
                deleted.extend(all.keys().filter_map(|m| ScramHash::from_mechanism(m)));
                Ok(())
            }
        };
        if let Err(e) = done {
            *creds = before;
            return Err(e);
        }
    }
    Ok(UserAltered {
        deleted,
        credentials: infos(creds),
    })
}

/// Alters users' SCRAM credentials, answering per user in the order first named. As
/// Kafka's controller: a user any of whose alterations is refused has none of them
/// applied, and the other users' go ahead, all in one metastore transaction. Audited
/// per user (`user.alter_scram_credentials`: the mechanisms deleted and upserted,
/// with iteration counts; never a salt, a salted password or a password).
pub async fn alter_users(
    s: Security<'_>,
    who: &Caller,
    alterations: Vec<(String, CredentialAlteration)>,
) -> Vec<(String, Result<UserAltered, SecurityError>)> {
    let asked = audited::user_alterations(&alterations);
    let mut outcomes: Vec<(String, Result<UserAltered, SecurityError>)> =
        match authorize(s, who, Action::AlterUsers) {
            // A caller who may not is told so for every user, whatever else is wrong
            // with the request (Kafka's order).
            Err(e) => (asked.iter())
                .map(|(user, _)| (user.clone(), Err(e.clone())))
                .collect(),
            Ok(()) => {
                let checked = checked_by_user(&alterations);
                let accepted: BTreeMap<String, Vec<CredentialChange>> = (checked.iter())
                    .filter_map(|(u, c)| Some((u.clone(), c.as_ref().ok()?.clone())))
                    .collect();
                let mut done = store_users(s, accepted).await;
                (checked.into_iter())
                    .map(|(user, c)| {
                        let outcome = match (c, &mut done) {
                            (Err(e), _) => Err(e),
                            (Ok(_), Err(e)) => Err(e.clone()),
                            (Ok(_), Ok(done)) => done.remove(&user).unwrap_or_else(|| {
                                Err(SecurityError::Invalid("no outcome".into()))
                            }),
                        };
                        (user, outcome)
                    })
                    .collect()
            }
        };
    for ((user, outcome), (_, request)) in outcomes.iter_mut().zip(asked) {
        let request = audited::deleted(request, outcome);
        let logged = outcome.as_ref().map(|_| json!({}));
        audited::record(
            s,
            who,
            "user.alter_scram_credentials",
            &format!("user:{user}"),
            request,
            logged,
        );
    }
    outcomes
}

/// Applies each user's checked changes in one metastore transaction; what each did.
async fn store_users(
    s: Security<'_>,
    changes: BTreeMap<String, Vec<CredentialChange>>,
) -> Result<BTreeMap<String, Result<UserAltered, SecurityError>>, SecurityError> {
    if changes.is_empty() {
        return Ok(BTreeMap::new());
    }
    // The outcomes of the transaction's last run are the answer.
    let outcomes: Arc<Mutex<BTreeMap<String, Result<UserAltered, SecurityError>>>> = Arc::default();
    let users = changes.keys().cloned().collect();
    let out = Arc::clone(&outcomes);
    s.metastore
        .alter_user_credentials(users, move |stored| {
            let done = (changes.iter())
                .filter_map(|(user, changes)| {
                    let creds = stored.get_mut(user)?;
                    Some((user.clone(), apply(user, creds, changes)))
                })
                .collect();
            *out.lock().expect("not poisoned") = done;
            Ok(())
        })
        .await
        .map_err(metastore)?;
    let done = std::mem::take(&mut *outcomes.lock().expect("not poisoned"));
    Ok(done)
}

// ---------------------------------------------------------------------------------
// Client quotas

/// How a quota filter matches one entity type (Kafka's `match_type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntityMatch {
    /// This name.
    Exactly(String),
    /// The type's default.
    Default,
    /// Any entity of the type, the default included (Kafka's `ofEntityType`).
    Any,
}

/// A quota entity and its quotas.
pub type QuotaEntry = (QuotaEntity, BTreeMap<String, f64>);

/// The quotas of the entities `filter` selects (every entity for an empty filter;
/// with `strict`, only entities of exactly the filter's types), read from the
/// metastore now: what a tool wrote a moment ago through another agent is shown.
pub async fn quotas(
    s: Security<'_>,
    who: &Caller,
    filter: &[(String, EntityMatch)],
    strict: bool,
) -> Result<Vec<QuotaEntry>, SecurityError> {
    authorize(s, who, Action::DescribeQuotas)?;
    for (i, (kind, _)) in filter.iter().enumerate() {
        if ![quota_rules::USER, quota_rules::CLIENT_ID, quota_rules::IP].contains(&kind.as_str()) {
            return Err(SecurityError::Invalid(format!(
                "Custom entity type '{kind}' not supported"
            )));
        }
        if filter[..i].iter().any(|(k, _)| k == kind) {
            return Err(SecurityError::Invalid(format!(
                "Entity type {kind} cannot appear more than once in the filter."
            )));
        }
    }
    if filter.iter().any(|(k, _)| k == quota_rules::IP) && filter.len() > 1 {
        return Err(SecurityError::Invalid(
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component."
                .into(),
        ));
    }
    if let Err(e) = s.quotas.refresh().await {
        tracing::warn!(error = %e, "cannot re-read client quotas; describing the ones read before");
    }
    let index = s.quotas.snapshot();
    let mut entries: Vec<QuotaEntry> = index
        .entries()
        .filter(|(entity, _)| {
            let matched = filter.iter().all(|(kind, m)| match (entity.get(kind), m) {
                (Some(Some(n)), EntityMatch::Exactly(want)) => n == want,
                (Some(None), EntityMatch::Default) => true,
                (Some(_), EntityMatch::Any) => true,
                _ => false,
            });
            matched && (!strict || entity.len() == filter.len())
        })
        .map(|(entity, values)| (entity.clone(), values.clone()))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// One entity's quotas as this agent enforces them: after [`alter_quotas`], which has
/// just read them again, what it stored (no second metastore read).
pub fn entity_quotas(
    s: Security<'_>,
    who: &Caller,
    entity: &QuotaEntity,
) -> Result<BTreeMap<String, f64>, SecurityError> {
    authorize(s, who, Action::DescribeQuotas)?;
    let index = s.quotas.snapshot();
    Ok(index
        .entries()
        .find(|(e, _)| *e == entity)
        .map(|(_, values)| values.clone())
        .unwrap_or_default())
}

/// One entity's quota alteration, as a caller asks it: the entity's types and names
/// (`None` for the type's default), and each quota's new value (`None`: removed).
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaAlteration {
    pub entity: Vec<(String, Option<String>)>,
    pub ops: Vec<(String, Option<f64>)>,
}

/// Alters client quotas, each entity's checked as Kafka does ([`quota_rules::validate`])
/// and the valid ones stored in one metastore transaction, then read again so this
/// agent enforces them at once; with `validate_only`, checked and not stored. Answers
/// per entity, in order. Audited per entity (`quota.alter`, `quota.validate`).
pub async fn alter_quotas(
    s: Security<'_>,
    who: &Caller,
    alterations: Vec<QuotaAlteration>,
    validate_only: bool,
) -> Vec<Result<(), SecurityError>> {
    let allowed = authorize(s, who, Action::AlterQuotas);
    let checked: Vec<Result<QuotaChange, SecurityError>> = (alterations.iter())
        .map(|a| {
            allowed.clone()?;
            let entity: QuotaEntity = a.entity.iter().cloned().collect();
            if entity.len() != a.entity.len() {
                return Err(SecurityError::Invalid(
                    "an entity type appears twice".into(),
                ));
            }
            quota_rules::validate(&entity, &a.ops).map_err(|e| SecurityError::Invalid(e.0))?;
            Ok((entity, a.ops.clone()))
        })
        .collect();
    let valid: Vec<QuotaChange> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let stored = if validate_only || valid.is_empty() {
        Ok(())
    } else {
        let stored = s.metastore.alter_quotas(valid).await;
        if let Err(e) = s.quotas.refresh().await {
            tracing::warn!(error = %e, "cannot re-read client quotas after a change; the watch will");
        }
        stored.map_err(metastore)
    };
    let outcomes: Vec<Result<(), SecurityError>> = (checked.into_iter())
        .map(|c| c.map(drop).and(stored.clone()))
        .collect();
    let action = if validate_only {
        "quota.validate"
    } else {
        "quota.alter"
    };
    for (a, outcome) in alterations.iter().zip(&outcomes) {
        let (resource, request) = audited::quota(a);
        let outcome = outcome.as_ref().map(|()| json!({}));
        audited::record(s, who, action, &resource, request, outcome);
    }
    outcomes
}
