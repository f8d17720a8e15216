//! The audit log of the Kafka API's security mutations: SCRAM credentials altered,
//! client quotas altered, ACLs created and deleted. (Every other privileged change is
//! audited by its service, for both edges: topics in `service/admin.rs`, configs in
//! `configs.rs`, groups in `groups.rs`, reassignments and elections in `placement.rs`,
//! deleted records in `lifecycle.rs`.) Each resource a request names is one entry,
//! with the same actions the HTTP API records, `via: "kafka"`, and the error name and
//! message of a refusal.
//!
//! What was asked is taken from the request before its handler runs ([`asked`]); how
//! each resource ended, from the response ([`record`]).

use std::collections::BTreeMap;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use serde_json::{Value, json};

use crate::broker::Broker;
use crate::context::RequestContext;

/// One resource of a privileged request, before it is handled.
#[derive(Debug)]
struct Entry {
    action: &'static str,
    resource: String,
    request: Value,
}

/// What a privileged request asks, resource by resource; `None` for other requests.
#[derive(Debug)]
pub struct Asked(Vec<Entry>);

// Resources are named as the HTTP API's entries name them.
fn user(name: &str) -> String {
    format!("user:{name}")
}

/// A quota entity: `quota:user=alice,client-id=<default>`.
fn quota_resource<'a>(entity: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> String {
    let parts: Vec<String> = entity
        .map(|(t, n)| format!("{t}={}", n.unwrap_or("<default>")))
        .collect();
    format!("quota:{}", parts.join(","))
}

/// An ACL binding's (or filter's) resource: `acl:TOPIC:PREFIXED:orders-`, `ANY` and
/// `*` for what a filter leaves open.
fn acl_resource(resource_type: i8, pattern_type: i8, name: Option<&str>) -> String {
    use crate::authz::rules::{PatternType, resource_type_name};
    let kind = match resource_type {
        1 => "ANY".to_string(),
        c => resource_type_name(c).map_or_else(|| format!("UNKNOWN({c})"), str::to_string),
    };
    let pattern = match PatternType::from_code(pattern_type) {
        Some(PatternType::Literal) => "LITERAL".to_string(),
        Some(PatternType::Prefixed) => "PREFIXED".to_string(),
        None if pattern_type == 1 => "ANY".to_string(),
        None if pattern_type == 2 => "MATCH".to_string(),
        None => format!("UNKNOWN({pattern_type})"),
    };
    format!("acl:{kind}:{pattern}:{}", name.unwrap_or("*"))
}

fn acl_request(
    principal: Option<&str>,
    host: Option<&str>,
    operation: i8,
    permission: i8,
) -> Value {
    use crate::authz::rules::{Operation, Permission};
    let operation = Operation::from_code(operation).map_or_else(
        || {
            if operation == 1 {
                "ANY".to_string()
            } else {
                format!("UNKNOWN({operation})")
            }
        },
        |o| o.name().to_string(),
    );
    let permission = match Permission::from_code(permission) {
        Some(Permission::Allow) => "ALLOW".to_string(),
        Some(Permission::Deny) => "DENY".to_string(),
        None if permission == 1 => "ANY".to_string(),
        None => format!("UNKNOWN({permission})"),
    };
    json!({ "principal": principal, "host": host, "operation": operation, "permission": permission })
}

/// Summarizes a privileged request; `None` for every other request.
pub fn asked(request: &RequestKind) -> Option<Asked> {
    let entry = |action, resource: String, request| Entry {
        action,
        resource,
        request,
    };
    let entries: Vec<Entry> = match request {
        RequestKind::AlterUserScramCredentials(r) => {
            // Per user, the mechanisms changed and the iteration counts; never the salt
            // or the salted password.
            let mechanism = |m: i8| match m {
                1 => "SCRAM-SHA-256".to_string(),
                2 => "SCRAM-SHA-512".to_string(),
                _ => format!("unknown ({m})"),
            };
            let mut users: BTreeMap<String, (Vec<String>, Vec<Value>)> = BTreeMap::new();
            for d in &r.deletions {
                let u = users.entry(d.name.to_string()).or_default();
                u.0.push(mechanism(d.mechanism));
            }
            for up in &r.upsertions {
                let u = users.entry(up.name.to_string()).or_default();
                u.1.push(
                    json!({ "mechanism": mechanism(up.mechanism), "iterations": up.iterations }),
                );
            }
            users
                .into_iter()
                .map(|(name, (delete, upsert))| {
                    entry(
                        "user.alter_scram_credentials",
                        user(&name),
                        json!({ "delete": delete, "upsert": upsert }),
                    )
                })
                .collect()
        }
        RequestKind::AlterClientQuotas(r) => r
            .entries
            .iter()
            .map(|e| {
                let ops: BTreeMap<String, Option<f64>> = e
                    .ops
                    .iter()
                    .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                    .collect();
                let action = if r.validate_only {
                    "quota.validate"
                } else {
                    "quota.alter"
                };
                entry(
                    action,
                    quota_resource(
                        e.entity
                            .iter()
                            .map(|d| (d.entity_type.as_str(), d.entity_name.as_deref())),
                    ),
                    json!({ "set": ops }),
                )
            })
            .collect(),
        RequestKind::CreateAcls(r) => r
            .creations
            .iter()
            .map(|c| {
                entry(
                    "acl.create",
                    acl_resource(
                        c.resource_type,
                        c.resource_pattern_type,
                        Some(&c.resource_name),
                    ),
                    acl_request(
                        Some(&c.principal),
                        Some(&c.host),
                        c.operation,
                        c.permission_type,
                    ),
                )
            })
            .collect(),
        RequestKind::DeleteAcls(r) => r
            .filters
            .iter()
            .map(|f| {
                entry(
                    "acl.delete",
                    acl_resource(
                        f.resource_type_filter,
                        f.pattern_type_filter,
                        f.resource_name_filter.as_deref(),
                    ),
                    acl_request(
                        f.principal_filter.as_deref(),
                        f.host_filter.as_deref(),
                        f.operation,
                        f.permission_type,
                    ),
                )
            })
            .collect(),
        _ => return None,
    };
    Some(Asked(entries))
}

fn refused(code: i16, message: Option<&str>) -> Result<Value, String> {
    let name = crate::metrics::kafka_error_name(code);
    Err(match message {
        Some(m) if !m.is_empty() => format!("{name}: {m}"),
        _ => name,
    })
}

/// How each resource of a response ended, by resource name.
fn answered(response: &ResponseKind) -> BTreeMap<String, Result<Value, String>> {
    let outcome = |code: i16, message: Option<&str>, done: Value| {
        if code == 0 {
            Ok(done)
        } else {
            refused(code, message)
        }
    };
    let mut out = BTreeMap::new();
    match response {
        ResponseKind::AlterUserScramCredentials(r) => {
            for u in &r.results {
                let o = outcome(u.error_code, u.error_message.as_deref(), json!({}));
                out.insert(user(&u.user), o);
            }
        }
        ResponseKind::AlterClientQuotas(r) => {
            for e in &r.entries {
                let name = quota_resource(
                    e.entity
                        .iter()
                        .map(|d| (d.entity_type.as_str(), d.entity_name.as_deref())),
                );
                out.insert(
                    name,
                    outcome(e.error_code, e.error_message.as_deref(), json!({})),
                );
            }
        }
        // Positional answers: `#i` is the request's `i`th binding or filter.
        ResponseKind::CreateAcls(r) => {
            for (i, c) in r.results.iter().enumerate() {
                let o = outcome(c.error_code, c.error_message.as_deref(), json!({}));
                out.insert(format!("#{i}"), o);
            }
        }
        ResponseKind::DeleteAcls(r) => {
            for (i, f) in r.filter_results.iter().enumerate() {
                let done = json!({ "deleted": f.matching_acls.len() });
                let o = outcome(f.error_code, f.error_message.as_deref(), done);
                out.insert(format!("#{i}"), o);
            }
        }
        _ => {}
    }
    out
}

/// Records what `asked` became in `response`, one entry per resource. A resource the
/// response does not name took the request's overall outcome (an empty-named entry),
/// or is recorded as unanswered.
pub fn record(broker: &Broker, ctx: &RequestContext, asked: Asked, response: &ResponseKind) {
    let caller = super::caller(ctx);
    let mut answered = answered(response);
    let overall = answered.remove("");
    let single = asked.0.len() == 1;
    for (i, e) in asked.0.into_iter().enumerate() {
        let answer = answered
            .remove(&e.resource)
            .or_else(|| answered.remove(&format!("#{i}")));
        let outcome = match (answer, &overall) {
            (Some(o), _) => o,
            (None, Some(o)) => o.clone(),
            // One entry for many resources (ElectLeaders of every partition): each
            // resource's outcome.
            (None, None) if single && !answered.is_empty() => {
                let each: BTreeMap<&String, Value> = answered
                    .iter()
                    .map(|(r, o)| (r, o.as_ref().map_or_else(|e| json!(e), |_| json!("ok"))))
                    .collect();
                Ok(json!({ "resources": each }))
            }
            (None, None) => Err("no answer for this resource".to_string()),
        };
        broker
            .audit()
            .record(&caller, e.action, &e.resource, e.request, outcome);
    }
}
