//! How the security service's changes read in the audit log (`docs/audit.md`): one
//! entry per binding, filter, user or quota entity a request names, whichever edge
//! asked. Resources are named `acl:TYPE:PATTERN:name`, `user:{name}` and
//! `quota:user=alice,client-id=<default>`; names are Kafka's.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    AclBindingFilter, AclRecord, CredentialAlteration, QuotaAlteration, Security, SecurityError,
    UserAltered,
};
use crate::authz::rules::{Operation, PatternType, Permission, resource_type_name};
use crate::caller::Caller;
use crate::sasl::scram::ScramHash;

/// A filter's ANY (1), or what `known` names for another code.
fn any_or(code: i8, known: impl FnOnce(i8) -> Option<String>) -> String {
    match code {
        1 => "ANY".to_string(),
        c => known(c).unwrap_or_else(|| format!("UNKNOWN({c})")),
    }
}

fn resource(resource_type: i8, pattern_type: i8, name: Option<&str>) -> String {
    let kind = any_or(resource_type, |c| resource_type_name(c).map(str::to_string));
    let pattern = any_or(pattern_type, |c| match (c, PatternType::from_code(c)) {
        (2, _) => Some("MATCH".to_string()),
        (_, Some(PatternType::Literal)) => Some("LITERAL".to_string()),
        (_, Some(PatternType::Prefixed)) => Some("PREFIXED".to_string()),
        (_, None) => None,
    });
    format!("acl:{kind}:{pattern}:{}", name.unwrap_or("*"))
}

fn who_may(principal: Option<&str>, host: Option<&str>, operation: i8, permission: i8) -> Value {
    let operation = any_or(operation, |c| {
        Operation::from_code(c).map(|o| o.name().to_string())
    });
    let permission = any_or(permission, |c| match Permission::from_code(c)? {
        Permission::Allow => Some("ALLOW".to_string()),
        Permission::Deny => Some("DENY".to_string()),
    });
    json!({ "principal": principal, "host": host, "operation": operation, "permission": permission })
}

/// A binding's resource and request.
pub(super) fn binding(b: &AclRecord) -> (String, Value) {
    (
        resource(b.resource_type, b.pattern_type, Some(&b.resource_name)),
        who_may(Some(&b.principal), Some(&b.host), b.operation, b.permission),
    )
}

/// A filter's resource (`ANY` and `*` for what it leaves open) and request.
pub(super) fn filter(f: &AclBindingFilter) -> (String, Value) {
    (
        resource(f.resource_type, f.pattern_type, f.resource_name.as_deref()),
        who_may(
            f.principal.as_deref(),
            f.host.as_deref(),
            f.operation,
            f.permission,
        ),
    )
}

fn mechanism(code: i8) -> String {
    ScramHash::from_kafka_type(code).map_or_else(
        || format!("unknown ({code})"),
        |h| h.mechanism().to_string(),
    )
}

/// Per user, in the order first named: the mechanisms to delete (`*`: every one) and
/// those to upsert with their iteration counts; never a salt or a password.
pub(super) fn user_alterations(
    alterations: &[(String, CredentialAlteration)],
) -> Vec<(String, Value)> {
    let request = |asked: Vec<&CredentialAlteration>| {
        let (mut delete, mut upsert) = (Vec::new(), Vec::new());
        for a in asked {
            match a {
                CredentialAlteration::Delete { mechanism: m } => delete.push(mechanism(*m)),
                CredentialAlteration::DeleteAll => delete.push("*".to_string()),
                CredentialAlteration::Salted {
                    mechanism: m,
                    iterations,
                    ..
                } => upsert.push(json!({ "mechanism": mechanism(*m), "iterations": iterations })),
                CredentialAlteration::Password {
                    mechanism: m,
                    iterations,
                    ..
                } => upsert.push(json!({ "mechanism": mechanism(*m), "iterations": iterations })),
            }
        }
        json!({ "delete": delete, "upsert": upsert })
    };
    (super::by_user(alterations).into_iter())
        .map(|(name, asked)| (name.to_string(), request(asked)))
        .collect()
}

/// The request as done: `*` replaced by the mechanisms it deleted.
pub(super) fn deleted(mut request: Value, outcome: &Result<UserAltered, SecurityError>) -> Value {
    if let (Ok(done), Some(delete)) = (outcome, request.get_mut("delete")) {
        *delete = json!(
            done.deleted
                .iter()
                .map(|h| h.mechanism())
                .collect::<Vec<_>>()
        );
    }
    request
}

/// A quota entity's resource, and the quotas set (`null`: removed).
pub(super) fn quota(a: &QuotaAlteration) -> (String, Value) {
    let entity: Vec<String> = (a.entity.iter())
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("<default>")))
        .collect();
    let set: BTreeMap<&str, Option<f64>> = a.ops.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    (format!("quota:{}", entity.join(",")), json!({ "set": set }))
}

/// Records one entry; a refusal as Kafka's name for it and its message.
pub(super) fn record(
    s: Security<'_>,
    who: &Caller,
    action: &str,
    resource: &str,
    request: Value,
    outcome: Result<Value, &SecurityError>,
) {
    let outcome = outcome.map_err(SecurityError::audited);
    s.audit.record(who, action, resource, request, outcome);
}
