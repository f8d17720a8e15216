//! Security administration in domain terms: the ACL bindings the authorizer enforces,
//! the SCRAM credentials SASL listeners check, and client quotas. Kafka's ACL, SCRAM
//! and quota APIs (`api/acls.rs`, `api/users.rs`, `api/quotas.rs`) and the HTTP API's
//! `/v1/acls`, `/v1/users` and `/v1/quotas` (`http/security.rs`) translate their
//! requests to these calls and [`SecurityError`] to Kafka codes or HTTP statuses, so a
//! binding made with `strata acls create` is the one `kafka-acls.sh --list` shows.
//!
//! The service decides who may: every call that reads or changes takes an [`Allowed`],
//! which only [`authorize`] gives, for the caller's principal and address and the
//! operation on the cluster Kafka asks (DESCRIBE or ALTER for ACLs and users,
//! DESCRIBE_CONFIGS or ALTER_CONFIGS for quotas). Neither edge checks these itself.
//!
//! As Kafka: without an authorizer there are no ACLs to read or change
//! ([`SecurityError::Disabled`]). The agent that stored a change reads the bindings or
//! quotas again before it answers, so the caller's next request here is decided by
//! them; other agents follow within moments (a metastore watch).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use strata_metastore::UserCredentials;
/// ACL bindings and quota entities and changes, as the service takes and answers them.
pub use strata_metastore::{AclRecord, QuotaChange, QuotaEntity};

use strata_metastore::Metastore;

use crate::authz::rules::{self, AclFilter};
use crate::authz::{Authorizer, CLUSTER_NAME, Caller, Operation, ResourceType};
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

/// What the security service works on: the authorizer's bindings, the metastore, the
/// quotas this agent enforces (`Broker::security` lends them).
#[derive(Clone, Copy)]
pub struct Security<'a> {
    pub authorizer: &'a Authorizer,
    pub metastore: &'a Metastore,
    pub quotas: &'a Quotas,
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

/// Proof that a caller may do an [`Action`]: made only by [`authorize`].
#[derive(Debug)]
pub struct Allowed {
    action: Action,
}

impl Allowed {
    /// Refuses a proof made for another action (a caller's mistake: denied, not
    /// trusted).
    fn is_for(&self, action: Action) -> Result<(), SecurityError> {
        // As Kafka: ALTER implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS.
        let implied = matches!(
            (self.action, action),
            (Action::AlterAcls, Action::DescribeAcls)
                | (Action::AlterUsers, Action::DescribeUsers)
                | (Action::AlterQuotas, Action::DescribeQuotas)
        );
        if self.action == action || implied {
            Ok(())
        } else {
            Err(SecurityError::Denied {
                principal: format!("a caller allowed only to {:?}", self.action),
                operation: action.needs().name(),
            })
        }
    }
}

/// May `who` do `action`? What every other call here needs first.
pub fn authorize(
    s: Security<'_>,
    who: Caller<'_>,
    action: Action,
) -> Result<Allowed, SecurityError> {
    let operation = action.needs();
    if s.authorizer
        .allows(who, operation, ResourceType::Cluster, CLUSTER_NAME)
    {
        Ok(Allowed { action })
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

/// Each binding, checked as Kafka's controller checks one ([`rules::binding`]).
pub fn check_acls(
    s: Security<'_>,
    allowed: &Allowed,
    bindings: Vec<AclRecord>,
) -> Vec<Result<AclRecord, SecurityError>> {
    bindings
        .into_iter()
        .map(|b| {
            allowed.is_for(Action::AlterAcls)?;
            acls_enabled(s)?;
            rules::binding(b).map_err(|e| SecurityError::Invalid(e.0))
        })
        .collect()
}

/// Stores checked bindings in one metastore transaction (a binding already stored is
/// not stored twice).
pub async fn store_acls(
    s: Security<'_>,
    allowed: &Allowed,
    valid: Vec<AclRecord>,
) -> Result<(), SecurityError> {
    allowed.is_for(Action::AlterAcls)?;
    acls_enabled(s)?;
    if valid.is_empty() {
        return Ok(());
    }
    let stored = s.metastore.create_acls(valid).await;
    refresh_acls(s).await;
    stored.map_err(metastore)
}

/// Kafka's CreateAcls: each binding checked on its own; the valid ones stored together.
pub async fn create_acls(
    s: Security<'_>,
    allowed: &Allowed,
    bindings: Vec<AclRecord>,
) -> Vec<Result<(), SecurityError>> {
    let checked = check_acls(s, allowed, bindings);
    let valid: Vec<AclRecord> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let stored = store_acls(s, allowed, valid).await;
    checked
        .into_iter()
        .map(|c| c.map(|_| ()).and(stored.clone()))
        .collect()
}

/// The bindings `filter` selects.
pub async fn acls(
    s: Security<'_>,
    allowed: &Allowed,
    filter: &AclFilter,
) -> Result<Vec<AclRecord>, SecurityError> {
    allowed.is_for(Action::DescribeAcls)?;
    acls_enabled(s)?;
    let all = s.metastore.acls().await.map_err(metastore)?;
    Ok(all.into_iter().filter(|a| filter.matches(a)).collect())
}

/// Deletes the bindings each filter selects; answers, filter by filter, what it deleted.
pub async fn delete_acls(
    s: Security<'_>,
    allowed: &Allowed,
    filters: Vec<AclFilter>,
) -> Vec<Result<Vec<AclRecord>, SecurityError>> {
    let mut out = Vec::with_capacity(filters.len());
    let mut changed = false;
    for filter in filters {
        let deleted = match allowed
            .is_for(Action::AlterAcls)
            .and_then(|()| acls_enabled(s))
        {
            Ok(()) => s
                .metastore
                .delete_acls(move |a| filter.matches(a))
                .await
                .map_err(metastore),
            Err(e) => Err(e),
        };
        changed |= deleted.as_ref().is_ok_and(|d| !d.is_empty());
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
    allowed: &Allowed,
) -> Result<Vec<(String, Vec<CredentialInfo>)>, SecurityError> {
    allowed.is_for(Action::DescribeUsers)?;
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
    allowed: &Allowed,
    name: &str,
) -> Result<Vec<CredentialInfo>, SecurityError> {
    allowed.is_for(Action::DescribeUsers)?;
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

/// One change of one user's credential for one mechanism.
#[derive(Debug, Clone)]
pub enum CredentialChange {
    Delete(ScramHash),
    Upsert(ScramHash, strata_metastore::ScramCredential),
}

impl CredentialChange {
    pub fn mechanism(&self) -> ScramHash {
        match self {
            CredentialChange::Delete(h) | CredentialChange::Upsert(h, _) => *h,
        }
    }
}

/// Checks one alteration as Kafka does; the credential is computed from the client's
/// salted password (what AlterUserScramCredentials carries), so no password reaches
/// the metastore. `mechanism` is Kafka's code (1: SCRAM-SHA-256, 2: SCRAM-SHA-512).
pub fn credential_change(
    name: &str,
    mechanism: i8,
    upsert: Option<(i32, &[u8], &[u8])>,
) -> Result<CredentialChange, SecurityError> {
    let unacceptable = |why: String| SecurityError::UnacceptableCredential(why);
    if name.is_empty() {
        return Err(unacceptable("Username must not be empty".into()));
    }
    let Some(hash) = ScramHash::from_kafka_type(mechanism) else {
        return Err(SecurityError::UnsupportedMechanism(format!(
            "Unknown SCRAM mechanism {mechanism} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"
        )));
    };
    let Some((iterations, salt, salted_password)) = upsert else {
        return Ok(CredentialChange::Delete(hash));
    };
    check_iterations(iterations.into())?;
    if salt.is_empty() || salted_password.is_empty() {
        return Err(unacceptable(
            "Salt and salted password must not be empty".into(),
        ));
    }
    Ok(CredentialChange::Upsert(
        hash,
        hash.credential_from_salted(salted_password, salt, iterations as u32),
    ))
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

/// A credential made here from a password (the HTTP API's way, as `kafka-configs.sh
/// --add-config 'SCRAM-SHA-512=[password=…]'` is Kafka's): a fresh random salt.
pub fn credential_from_password(
    name: &str,
    mechanism: ScramHash,
    password: &str,
    iterations: u32,
) -> Result<CredentialChange, SecurityError> {
    if name.is_empty() {
        return Err(SecurityError::UnacceptableCredential(
            "Username must not be empty".into(),
        ));
    }
    check_iterations(iterations.into())?;
    if password.is_empty() {
        return Err(SecurityError::UnacceptableCredential(
            "the password must not be empty".into(),
        ));
    }
    let mut salt = [0u8; 32];
    aws_lc_rs::rand::fill(&mut salt).expect("the system's random source works");
    let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
    Ok(CredentialChange::Upsert(
        mechanism,
        mechanism.credential_from_salted(&salted, &salt, iterations),
    ))
}

/// Applies each user's changes in one metastore transaction. A user whose changes
/// delete a credential it does not have keeps what it had and is answered NotFound;
/// the others' go ahead. Returns those refusals by user.
pub async fn alter_users(
    s: Security<'_>,
    allowed: &Allowed,
    changes: BTreeMap<String, Vec<CredentialChange>>,
) -> Result<BTreeMap<String, SecurityError>, SecurityError> {
    allowed.is_for(Action::AlterUsers)?;
    if changes.is_empty() {
        return Ok(BTreeMap::new());
    }
    // The refusals of the transaction's last run are the answer.
    let missing: Arc<Mutex<BTreeMap<String, SecurityError>>> = Arc::default();
    let users = changes.keys().cloned().collect();
    let refusals = Arc::clone(&missing);
    s
        .metastore
        .alter_user_credentials(users, move |stored| {
            let mut refused = BTreeMap::new();
            for (user, changes) in &changes {
                let Some(creds) = stored.get_mut(user) else { continue };
                let before = creds.clone();
                for change in changes {
                    match change {
                        CredentialChange::Upsert(h, c) => {
                            creds.mechanisms.insert(h.mechanism().to_string(), c.clone());
                        }
                        CredentialChange::Delete(h) => {
                            if creds.mechanisms.remove(h.mechanism()).is_none() {
                                refused.insert(
                                    user.clone(),
                                    SecurityError::NotFound(format!(
                                        "Attempt to delete a user credential that does not exist: {user} {}",
                                        h.mechanism()
                                    )),
                                );
                            }
                        }
                    }
                }
                if refused.contains_key(user) {
                    *creds = before;
                }
            }
            *refusals.lock().expect("not poisoned") = refused;
            Ok(())
        })
        .await
        .map_err(metastore)?;
    let refused = std::mem::take(&mut *missing.lock().expect("not poisoned"));
    Ok(refused)
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
    allowed: &Allowed,
    filter: &[(String, EntityMatch)],
    strict: bool,
) -> Result<Vec<QuotaEntry>, SecurityError> {
    allowed.is_for(Action::DescribeQuotas)?;
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

/// One entity's quotas as this agent enforces them: after [`store_quotas`], which has
/// just read them again, what it stored (no second metastore read).
pub fn entity_quotas(
    s: Security<'_>,
    allowed: &Allowed,
    entity: &QuotaEntity,
) -> Result<BTreeMap<String, f64>, SecurityError> {
    allowed.is_for(Action::DescribeQuotas)?;
    let index = s.quotas.snapshot();
    Ok(index
        .entries()
        .find(|(e, _)| *e == entity)
        .map(|(_, values)| values.clone())
        .unwrap_or_default())
}

/// Checks one entity's alteration as Kafka does ([`quota_rules::validate`]).
pub fn check_quota(
    entity: &QuotaEntity,
    ops: &[(String, Option<f64>)],
) -> Result<(), SecurityError> {
    quota_rules::validate(entity, ops).map_err(|e| SecurityError::Invalid(e.0))
}

/// Stores checked quota changes in one metastore transaction (each op sets a quota, or
/// with `None` removes it), then reads them again so this agent enforces them at once.
pub async fn store_quotas(
    s: Security<'_>,
    allowed: &Allowed,
    changes: Vec<QuotaChange>,
) -> Result<(), SecurityError> {
    allowed.is_for(Action::AlterQuotas)?;
    if changes.is_empty() {
        return Ok(());
    }
    let stored = s.metastore.alter_quotas(changes).await;
    if let Err(e) = s.quotas.refresh().await {
        tracing::warn!(error = %e, "cannot re-read client quotas after a change; the watch will");
    }
    stored.map_err(metastore)
}
