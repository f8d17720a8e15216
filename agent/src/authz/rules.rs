//! Kafka's ACL model as plain data: resource types, pattern types, operations and
//! permissions by their Kafka codes; bindings, the filters DescribeAcls and DeleteAcls
//! take, and the decision for one principal, host, operation and resource. No I/O: the
//! [`super::Authorizer`] keeps an [`AclIndex`] current and asks it.
//!
//! The decision is Kafka's (`StandardAuthorizer`): super users may do anything; a
//! resource no binding names is open only with `allow.everyone.if.no.acl.found`; a
//! matching DENY wins over any ALLOW; and an ALLOW of READ, WRITE, DELETE or ALTER
//! implies DESCRIBE, one of ALTER_CONFIGS implies DESCRIBE_CONFIGS.

use std::collections::HashMap;
use std::fmt;

use strata_metastore::AclRecord;

/// Kafka's `ResourceType`, less delegation tokens and users (out of scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
    ];

    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
        }
    }

    pub fn from_code(code: i8) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "TOPIC",
            ResourceType::Group => "GROUP",
            ResourceType::Cluster => "CLUSTER",
            ResourceType::TransactionalId => "TRANSACTIONAL_ID",
        }
    }

    /// The operations a binding on this type may name (Kafka's
    /// `AclEntry.supportedOperations`), without ALL.
    pub fn operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Delete,
                Alter,
                Describe,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write],
        }
    }
}

/// Kafka's name of a resource type code, the two types nothing here decides on
/// included (delegation tokens and users are stored and listed only).
pub fn resource_type_name(code: i8) -> Option<&'static str> {
    match code {
        6 => Some("DELEGATION_TOKEN"),
        7 => Some("USER"),
        c => ResourceType::from_code(c).map(ResourceType::name),
    }
}

/// The one name a CLUSTER resource has.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The literal resource name that matches every resource of its type.
pub const WILDCARD: &str = "*";

/// The principal that matches every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Kafka's `PatternType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    /// The resource of this name (or every resource, for `*`).
    Literal,
    /// Every resource whose name starts with this name.
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }
}

/// Kafka's `AclOperation`; [`Operation::code`] is also the bit of KIP-430's
/// authorized-operations field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

impl Operation {
    const EVERY: [Operation; 11] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
    ];

    pub fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
        }
    }

    pub fn from_code(code: i8) -> Option<Operation> {
        Operation::EVERY.into_iter().find(|o| o.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Operation::All => "ALL",
            Operation::Read => "READ",
            Operation::Write => "WRITE",
            Operation::Create => "CREATE",
            Operation::Delete => "DELETE",
            Operation::Alter => "ALTER",
            Operation::Describe => "DESCRIBE",
            Operation::ClusterAction => "CLUSTER_ACTION",
            Operation::DescribeConfigs => "DESCRIBE_CONFIGS",
            Operation::AlterConfigs => "ALTER_CONFIGS",
            Operation::IdempotentWrite => "IDEMPOTENT_WRITE",
        }
    }

    /// The operations whose ALLOW also allows this one (itself and ALL among them).
    fn allowed_by(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            Describe => &[Describe, Read, Write, Delete, Alter, All],
            DescribeConfigs => &[DescribeConfigs, AlterConfigs, All],
            Read => &[Read, All],
            Write => &[Write, All],
            Create => &[Create, All],
            Delete => &[Delete, All],
            Alter => &[Alter, All],
            ClusterAction => &[ClusterAction, All],
            AlterConfigs => &[AlterConfigs, All],
            IdempotentWrite => &[IdempotentWrite, All],
            All => &[All],
        }
    }
}

/// Kafka's `AclPermissionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Permission> {
        match code {
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            _ => None,
        }
    }
}

/// Why a binding or filter from a client is refused (INVALID_REQUEST, with this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// Resource types a binding may name: TOPIC (2) to USER (7). Delegation tokens (6)
/// and users (7) are stored and listed as Kafka does, but nothing here asks about them.
const BINDABLE_TYPES: std::ops::RangeInclusive<i8> = 2..=7;

/// A valid binding, checked from the wire as Kafka's controller checks one: known codes
/// (not UNKNOWN, ANY or MATCH), a resource name, the cluster's one name, a principal
/// of the form `type:name`. Like Kafka, it does not check that the operation is one
/// the resource type has (a binding of WRITE on a group is stored, and allows nothing).
pub fn binding(acl: AclRecord) -> Result<AclRecord, Invalid> {
    if !BINDABLE_TYPES.contains(&acl.resource_type) {
        return Err(Invalid(format!(
            "resource type {} cannot be bound (TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5, \
             DELEGATION_TOKEN 6, USER 7)",
            acl.resource_type
        )));
    }
    PatternType::from_code(acl.pattern_type).ok_or_else(|| {
        Invalid(format!(
            "pattern type {} cannot be bound (LITERAL 3, PREFIXED 4)",
            acl.pattern_type
        ))
    })?;
    Operation::from_code(acl.operation).ok_or_else(|| {
        Invalid(format!(
            "operation {} cannot be bound (ALL 2 to IDEMPOTENT_WRITE 12)",
            acl.operation
        ))
    })?;
    Permission::from_code(acl.permission).ok_or_else(|| {
        Invalid(format!(
            "permission {} cannot be bound (DENY 2, ALLOW 3)",
            acl.permission
        ))
    })?;
    if acl.resource_name.is_empty() {
        return Err(Invalid("The resource name is empty".into()));
    }
    if acl.resource_type == ResourceType::Cluster.code() && acl.resource_name != CLUSTER_NAME {
        return Err(Invalid(format!(
            "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        )));
    }
    match acl.principal.split_once(':') {
        Some((t, n)) if !t.is_empty() && !n.is_empty() => {}
        _ => {
            return Err(Invalid(format!(
                "Could not parse principal from `{}` (no colon is present separating the \
                 principal type from the principal name)",
                acl.principal
            )));
        }
    }
    Ok(acl)
}

/// What DescribeAcls and DeleteAcls select: each field a value, or any (`None`, and the
/// code 1, Kafka's ANY). `pattern_type` may also be 2, Kafka's MATCH: the bindings that
/// would apply to the resource named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    /// A Kafka resource type code (TOPIC 2 to USER 7).
    pub resource_type: Option<i8>,
    pub resource_name: Option<String>,
    pub pattern_type: FilterPattern,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

/// A filter's pattern type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterPattern {
    Any,
    Match,
    Exactly(PatternType),
}

impl AclFilter {
    /// A filter from Kafka's codes; unknown codes (0, or outside the range) are invalid.
    pub fn from_codes(
        resource_type: i8,
        resource_name: Option<String>,
        pattern_type: i8,
        principal: Option<String>,
        host: Option<String>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, Invalid> {
        let resource_type = match resource_type {
            1 => None,
            c if BINDABLE_TYPES.contains(&c) => Some(c),
            c => return Err(Invalid(format!("resource type {c} cannot be filtered on"))),
        };
        let pattern_type = match pattern_type {
            1 => FilterPattern::Any,
            2 => FilterPattern::Match,
            c => FilterPattern::Exactly(
                PatternType::from_code(c)
                    .ok_or_else(|| Invalid(format!("pattern type {c} cannot be filtered on")))?,
            ),
        };
        let operation = match operation {
            1 => None,
            c => Some(
                Operation::from_code(c)
                    .ok_or_else(|| Invalid(format!("operation {c} cannot be filtered on")))?,
            ),
        };
        let permission = match permission {
            1 => None,
            c => Some(
                Permission::from_code(c)
                    .ok_or_else(|| Invalid(format!("permission {c} cannot be filtered on")))?,
            ),
        };
        Ok(AclFilter {
            resource_type,
            resource_name,
            pattern_type,
            principal,
            host,
            operation,
            permission,
        })
    }

    /// Kafka's `AclBindingFilter.matches`.
    pub fn matches(&self, acl: &AclRecord) -> bool {
        if self.resource_type.is_some_and(|t| t != acl.resource_type) {
            return false;
        }
        if let FilterPattern::Exactly(p) = self.pattern_type
            && p.code() != acl.pattern_type
        {
            return false;
        }
        if let Some(name) = &self.resource_name {
            let named = match self.pattern_type {
                FilterPattern::Any | FilterPattern::Exactly(_) => *name == acl.resource_name,
                FilterPattern::Match => match PatternType::from_code(acl.pattern_type) {
                    Some(PatternType::Literal) => {
                        *name == acl.resource_name || acl.resource_name == WILDCARD
                    }
                    Some(PatternType::Prefixed) => name.starts_with(&acl.resource_name),
                    None => false,
                },
            };
            if !named {
                return false;
            }
        }
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && self.operation.is_none_or(|o| o.code() == acl.operation)
            && self.permission.is_none_or(|p| p.code() == acl.permission)
    }
}

/// One binding's who and what, once its resource is known.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    principal: String,
    host: String,
    operation: Operation,
    permission: Permission,
}

impl Entry {
    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == WILDCARD || self.host == host)
    }
}

/// Every binding, arranged for the decision: literal ones by resource, prefixed ones by
/// prefix. Bindings a newer agent stored with codes this one does not know are left out
/// (they can neither allow nor deny here).
#[derive(Debug, Default)]
pub struct AclIndex {
    literal: HashMap<(ResourceType, String), Vec<Entry>>,
    prefixed: HashMap<(ResourceType, String), Vec<Entry>>,
    /// By type, whether any binding names a resource of it.
    typed: HashMap<ResourceType, Vec<(PatternType, String, Entry)>>,
    count: usize,
}

impl AclIndex {
    pub fn new(acls: &[AclRecord]) -> AclIndex {
        let mut index = AclIndex::default();
        for acl in acls {
            let (Some(kind), Some(pattern), Some(operation), Some(permission)) = (
                ResourceType::from_code(acl.resource_type),
                PatternType::from_code(acl.pattern_type),
                Operation::from_code(acl.operation),
                Permission::from_code(acl.permission),
            ) else {
                continue;
            };
            let entry = Entry {
                principal: acl.principal.clone(),
                host: acl.host.clone(),
                operation,
                permission,
            };
            let key = (kind, acl.resource_name.clone());
            match pattern {
                PatternType::Literal => index.literal.entry(key).or_default(),
                PatternType::Prefixed => index.prefixed.entry(key).or_default(),
            }
            .push(entry.clone());
            index
                .typed
                .entry(kind)
                .or_default()
                .push((pattern, acl.resource_name.clone(), entry));
            index.count += 1;
        }
        index
    }

    /// How many bindings the index holds.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The bindings that name the resource: literally, by the wildcard, or by a prefix.
    fn entries<'a>(&'a self, kind: ResourceType, name: &str) -> Vec<&'a Entry> {
        let mut out: Vec<&Entry> = Vec::new();
        let mut add = |map: &'a HashMap<(ResourceType, String), Vec<Entry>>, n: &str| {
            if let Some(es) = map.get(&(kind, n.to_string())) {
                out.extend(es.iter());
            }
        };
        add(&self.literal, name);
        if name != WILDCARD {
            add(&self.literal, WILDCARD);
        }
        if !self.prefixed.is_empty() {
            for (end, _) in name.char_indices().skip(1) {
                add(&self.prefixed, &name[..end]);
            }
            add(&self.prefixed, name);
        }
        out
    }

    /// Kafka's decision for `principal` (`User:alice`) at `host` (an IP address) doing
    /// `operation` on a resource, super users and the no-ACL default aside.
    pub fn allows(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        kind: ResourceType,
        name: &str,
        if_no_acl: bool,
    ) -> bool {
        let entries = self.entries(kind, name);
        if entries.is_empty() {
            return if_no_acl;
        }
        let applying = || entries.iter().filter(|e| e.applies_to(principal, host));
        let denied = applying().any(|e| {
            e.permission == Permission::Deny
                && (e.operation == operation || e.operation == Operation::All)
        });
        !denied
            && applying().any(|e| {
                e.permission == Permission::Allow && operation.allowed_by().contains(&e.operation)
            })
    }

    /// Whether `principal` may do `operation` on some resource of type `kind` (Kafka's
    /// `authorizeByResourceType`, which InitProducerId asks of WRITE on topics): some
    /// ALLOW applies that no DENY of the same pattern or of every resource cancels.
    pub fn allows_some(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        kind: ResourceType,
        if_no_acl: bool,
    ) -> bool {
        let Some(bound) = self.typed.get(&kind).filter(|b| !b.is_empty()) else {
            return if_no_acl;
        };
        let applying = || {
            bound
                .iter()
                .filter(|(_, _, e)| e.applies_to(principal, host))
        };
        let denies = |pattern: PatternType, name: &str| {
            applying().any(|(p, n, e)| {
                e.permission == Permission::Deny
                    && (e.operation == operation || e.operation == Operation::All)
                    && ((*p == PatternType::Literal && n == WILDCARD)
                        || (*p == PatternType::Prefixed && name.starts_with(n.as_str()))
                        || (*p == pattern && n == name))
            })
        };
        applying().any(|(p, n, e)| {
            e.permission == Permission::Allow
                && operation.allowed_by().contains(&e.operation)
                && !denies(*p, n)
        })
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        kind: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        host: &str,
        op: Operation,
        perm: Permission,
    ) -> AclRecord {
        AclRecord {
            resource_type: kind.code(),
            resource_name: name.into(),
            pattern_type: pattern.code(),
            principal: principal.into(),
            host: host.into(),
            operation: op.code(),
            permission: perm.code(),
        }
    }

    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn literal_prefixed_wildcard_and_deny() {
        let index = AclIndex::new(&[
            acl(Topic, "orders", Literal, "User:alice", "*", Read, Allow),
            acl(Topic, "pay-", Prefixed, "User:bob", "*", Write, Allow),
            acl(Topic, "pay-secret", Literal, "User:bob", "*", All, Deny),
            acl(Topic, "*", Literal, "User:*", "10.0.0.9", Describe, Allow),
            acl(Group, "g", Literal, "User:alice", "*", All, Allow),
        ]);
        let allows =
            |p: &str, h: &str, op, kind, name: &str| index.allows(p, h, op, kind, name, false);
        assert!(allows("User:alice", "1.2.3.4", Read, Topic, "orders"));
        // READ implies DESCRIBE; nothing implies WRITE.
        assert!(allows("User:alice", "1.2.3.4", Describe, Topic, "orders"));
        assert!(!allows("User:alice", "1.2.3.4", Write, Topic, "orders"));
        assert!(!allows("User:carol", "1.2.3.4", Read, Topic, "orders"));
        assert!(allows("User:bob", "1.2.3.4", Write, Topic, "pay-in"));
        assert!(allows("User:bob", "1.2.3.4", Write, Topic, "pay-"));
        assert!(!allows("User:bob", "1.2.3.4", Write, Topic, "pa"));
        // A DENY of ALL beats the prefixed ALLOW.
        assert!(!allows("User:bob", "1.2.3.4", Write, Topic, "pay-secret"));
        // The wildcard resource and principal, from one host only.
        assert!(allows("User:zed", "10.0.0.9", Describe, Topic, "anything"));
        assert!(!allows("User:zed", "10.0.0.8", Describe, Topic, "anything"));
        // ALL allows every group operation.
        assert!(allows("User:alice", "h", Delete, Group, "g"));
        // No binding names group "h": the default decides.
        assert!(!index.allows("User:alice", "h", Read, Group, "other", false));
        assert!(index.allows("User:alice", "h", Read, Group, "other", true));
    }

    #[test]
    fn alter_configs_implies_describe_configs_only() {
        let index = AclIndex::new(&[acl(
            Cluster,
            CLUSTER_NAME,
            Literal,
            "User:ops",
            "*",
            AlterConfigs,
            Allow,
        )]);
        let on_cluster = |op| index.allows("User:ops", "h", op, Cluster, CLUSTER_NAME, false);
        assert!(on_cluster(DescribeConfigs));
        assert!(on_cluster(AlterConfigs));
        assert!(!on_cluster(Describe));
        assert!(!on_cluster(Alter));
    }

    #[test]
    fn writing_some_topic() {
        let index = AclIndex::new(&[
            acl(Topic, "logs-", Prefixed, "User:app", "*", Write, Allow),
            acl(Topic, "*", Literal, "User:banned", "*", Write, Deny),
            acl(Topic, "x", Literal, "User:banned", "*", Write, Allow),
        ]);
        assert!(index.allows_some("User:app", "h", Write, Topic, false));
        assert!(!index.allows_some("User:other", "h", Write, Topic, false));
        assert!(!index.allows_some("User:banned", "h", Write, Topic, false));
        // No binding on transactional ids at all: the default decides.
        assert!(index.allows_some("User:x", "h", Write, TransactionalId, true));
    }

    #[test]
    fn bindings_from_the_wire_are_checked_as_kafka_does() {
        let ok = acl(Topic, "t", Literal, "User:a", "*", Read, Allow);
        let checked = |f: &dyn Fn(&mut AclRecord)| {
            let mut a = ok.clone();
            f(&mut a);
            binding(a)
        };
        assert!(checked(&|_| {}).is_ok());
        for bad in [
            checked(&|a| a.resource_type = 1),
            checked(&|a| a.resource_type = 8),
            checked(&|a| a.pattern_type = 2),
            checked(&|a| a.operation = 1),
            checked(&|a| a.operation = 13),
            checked(&|a| a.permission = 1),
            checked(&|a| a.principal = "alice".into()),
            checked(&|a| a.resource_name = String::new()),
            checked(&|a| {
                a.resource_type = Cluster.code();
                a.resource_name = "other".into();
            }),
        ] {
            bad.expect_err("invalid");
        }
        // Kafka stores these, though no request asks about them.
        for fine in [
            checked(&|a| a.operation = IdempotentWrite.code()),
            checked(&|a| a.resource_type = 7),
            checked(&|a| {
                a.resource_type = Cluster.code();
                a.resource_name = CLUSTER_NAME.into();
                a.pattern_type = Prefixed.code();
            }),
        ] {
            fine.expect("valid");
        }
    }

    #[test]
    fn filters_as_kafka() {
        let lit = acl(Topic, "orders", Literal, "User:a", "*", Read, Allow);
        let wild = acl(Topic, "*", Literal, "User:a", "*", Read, Allow);
        let pre = acl(Topic, "ord", Prefixed, "User:b", "*", Write, Deny);
        let group = acl(Group, "orders", Literal, "User:a", "*", Read, Allow);
        let filter = |t: i8, name: Option<&str>, p: i8, principal: Option<&str>| {
            AclFilter::from_codes(
                t,
                name.map(String::from),
                p,
                principal.map(String::from),
                None,
                1,
                1,
            )
            .expect("valid")
        };
        let picks = |f: &AclFilter| {
            [&lit, &wild, &pre, &group]
                .into_iter()
                .map(|a| f.matches(a))
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(&filter(1, None, 1, None)), [true; 4]);
        assert_eq!(
            picks(&filter(2, Some("orders"), 1, None)),
            [true, false, false, false]
        );
        assert_eq!(
            picks(&filter(2, Some("orders"), 2, None)),
            [true, true, true, false]
        );
        assert_eq!(
            picks(&filter(1, None, 4, Some("User:b"))),
            [false, false, true, false]
        );
        assert!(AclFilter::from_codes(0, None, 1, None, None, 1, 1).is_err());
        assert!(AclFilter::from_codes(1, None, 0, None, None, 1, 1).is_err());
        assert!(AclFilter::from_codes(1, None, 1, None, None, 0, 1).is_err());
    }
}
