//! Authorization: whether a principal may do an operation on a resource, by Kafka's ACL
//! model ([`rules`]) over the bindings in the metastore.
//!
//! With no authorizer configured (the default), everything is allowed, as in Kafka.
//! With one, the agent keeps every binding in memory ([`rules::AclIndex`]), read before
//! it serves and again whenever any agent changes them (a metastore watch); a decision
//! never waits on the metastore. Super users (`super_users`) may do anything; a resource
//! no binding names is open to everyone only with `allow_everyone_if_no_acl_found`.

pub mod rules;

use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use strata_metastore::Metastore;
use tokio_util::sync::CancellationToken;

use rules::AclIndex;
pub use rules::{CLUSTER_NAME, Operation, ResourceType};

use crate::context::Principal;
use crate::tasks::Stopped;

/// How requests are authorized, from the settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthzConfig {
    /// Whether ACLs are enforced at all (Kafka's `authorizer.class.name` set).
    pub enabled: bool,
    /// Principals allowed everything (`User:admin`).
    pub super_users: Vec<String>,
    /// What a resource no binding names allows (Kafka's
    /// `allow.everyone.if.no.acl.found`, false by default).
    pub allow_if_no_acl: bool,
}

/// Who asks: the principal and the address it connected from.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub principal: &'a Principal,
    pub host: IpAddr,
}

/// Denials a client can cause at any rate are logged at most once a second.
static DENIALS: crate::throttle::Throttle = crate::throttle::Throttle::per_second();

/// The agent's authorizer.
#[derive(Debug)]
pub struct Authorizer {
    config: AuthzConfig,
    metastore: Metastore,
    index: RwLock<Arc<AclIndex>>,
}

impl Authorizer {
    pub fn new(config: AuthzConfig, metastore: Metastore) -> Authorizer {
        Authorizer {
            config,
            metastore,
            index: RwLock::new(Arc::new(AclIndex::default())),
        }
    }

    /// Whether ACLs are enforced (DescribeAcls and friends answer SECURITY_DISABLED
    /// without).
    pub fn is_enabled(&self) -> bool {
        self.config.enabled
    }

    fn index(&self) -> Arc<AclIndex> {
        Arc::clone(&self.index.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn is_super(&self, principal: &Principal) -> bool {
        let name = principal.to_string();
        self.config.super_users.contains(&name)
    }

    /// May `who` do `operation` on the resource? Denials are logged (throttled) and
    /// counted; allowed requests are not.
    pub fn allows(
        &self,
        who: Caller<'_>,
        operation: Operation,
        kind: ResourceType,
        name: &str,
    ) -> bool {
        let allowed = self.decide(who, operation, kind, name);
        if !allowed {
            crate::metrics::authorization_denied(kind.name(), operation.name());
            if let Some(left_out) = DENIALS.allow() {
                tracing::info!(
                    principal = %who.principal,
                    host = %who.host,
                    operation = operation.name(),
                    resource = %format_args!("{}:{}", kind.name(), name),
                    left_out,
                    "authorization denied"
                );
            }
        }
        allowed
    }

    /// [`Authorizer::allows`] without logging: for answers that only filter (Metadata
    /// of all topics, authorized-operation fields), where a denial is no refusal.
    pub fn decide(
        &self,
        who: Caller<'_>,
        operation: Operation,
        kind: ResourceType,
        name: &str,
    ) -> bool {
        if !self.config.enabled || self.is_super(who.principal) {
            return true;
        }
        self.index().allows(
            &who.principal.to_string(),
            &who.host.to_string(),
            operation,
            kind,
            name,
            self.config.allow_if_no_acl,
        )
    }

    /// May `who` do `operation` on some resource of type `kind` (Kafka's
    /// `authorizeByResourceType`)?
    pub fn allows_some(&self, who: Caller<'_>, operation: Operation, kind: ResourceType) -> bool {
        if !self.config.enabled || self.is_super(who.principal) {
            return true;
        }
        self.index().allows_some(
            &who.principal.to_string(),
            &who.host.to_string(),
            operation,
            kind,
            self.config.allow_if_no_acl,
        )
    }

    /// KIP-430's field: bit `code` set for each operation `who` may do on the resource.
    pub fn operations(&self, who: Caller<'_>, kind: ResourceType, name: &str) -> i32 {
        kind.operations()
            .iter()
            .filter(|op| self.decide(who, **op, kind, name))
            .fold(0i32, |bits, op| bits | (1 << op.code()))
    }

    /// Re-reads every binding from the metastore.
    pub async fn refresh(&self) -> strata_metastore::Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        let acls = self.metastore.acls().await?;
        let index = Arc::new(AclIndex::new(&acls));
        tracing::debug!(acls = index.len(), "ACLs read from the metastore");
        *self.index.write().unwrap_or_else(|p| p.into_inner()) = index;
        Ok(())
    }

    /// Keeps the bindings current: re-reads them whenever any agent changes them (a
    /// metastore watch), and every `backstop` in case a watch is lost. Stops on shutdown.
    pub async fn follow_changes(
        self: Arc<Self>,
        backstop: Duration,
        shutdown: CancellationToken,
    ) -> Stopped {
        if !self.config.enabled {
            return Stopped::Done("no authorizer configured");
        }
        crate::tasks::follow(
            "ACLs",
            || self.metastore.watch_acls(),
            || self.refresh(),
            backstop,
            shutdown,
        )
        .await
    }
}
