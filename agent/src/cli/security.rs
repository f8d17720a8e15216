//! `strata acls`, `strata users` and `strata quotas`: ACL bindings, SCRAM users and
//! client quotas (`/v1/acls`, `/v1/users`, `/v1/quotas`), with the flags of Kafka's
//! `kafka-acls.sh` and `kafka-configs.sh` where they have one.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::Value;

use super::{Api, Conn, Output, key_value, print_json, seg, table, typed};
use crate::http::model::{
    AclBinding, AclBindingInput, AclList, AclsCreated, AclsDeleted, AlterQuotasRequest,
    CreateAclsRequest, QuotaEntry, QuotaList, ScramCredential, ScramUser, SetUserRequest,
    UserCredentialsDeleted, UserList,
};

/// The one resource a binding names (or, listing and deleting, selects).
#[derive(Debug, Clone, Args, Default)]
pub struct Resource {
    /// A topic (`*` for every topic).
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group (`*` for every group).
    #[arg(long)]
    group: Option<String>,
    /// A transactional id (`*` for every one).
    #[arg(long)]
    transactional_id: Option<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
    /// LITERAL or PREFIXED (creating); listing and deleting also ANY or MATCH (the
    /// bindings that apply to the resource named).
    #[arg(long, value_name = "TYPE")]
    resource_pattern_type: Option<String>,
}

impl Resource {
    /// The resource's type and name, if one was named.
    fn named(&self) -> anyhow::Result<Option<(&'static str, String)>> {
        let mut named: Vec<(&'static str, String)> = Vec::new();
        if let Some(t) = &self.topic {
            named.push(("TOPIC", t.clone()));
        }
        if let Some(g) = &self.group {
            named.push(("GROUP", g.clone()));
        }
        if let Some(x) = &self.transactional_id {
            named.push(("TRANSACTIONAL_ID", x.clone()));
        }
        if self.cluster {
            named.push(("CLUSTER", "kafka-cluster".to_string()));
        }
        match named.len() {
            0 => Ok(None),
            1 => Ok(named.pop()),
            _ => bail!("name one resource: --topic, --group, --transactional-id or --cluster"),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Acls {
    /// The bindings, or those of a resource or principal.
    List {
        #[command(flatten)]
        resource: Resource,
        /// Only this principal's (User:alice).
        #[arg(long)]
        principal: Option<String>,
    },
    /// Allow (or deny) principals operations on one resource: a binding for each
    /// principal and operation.
    Create {
        #[command(flatten)]
        resource: Resource,
        /// A principal to allow (User:alice; repeatable).
        #[arg(long)]
        allow_principal: Vec<String>,
        /// A principal to deny (repeatable).
        #[arg(long)]
        deny_principal: Vec<String>,
        /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
        /// DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE or ALL (repeatable).
        #[arg(long, required = true)]
        operation: Vec<String>,
        /// The client address the bindings hold for (default: any).
        #[arg(long, default_value = "*")]
        host: String,
    },
    /// Delete the bindings a resource, principal, operation and permission select.
    Delete {
        #[command(flatten)]
        resource: Resource,
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        operation: Option<String>,
        /// ALLOW or DENY.
        #[arg(long)]
        permission: Option<String>,
        /// Every binding of every resource (when no resource is named).
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum Users {
    /// Every user with SCRAM credentials, and their mechanisms.
    List,
    /// One user's SCRAM credentials.
    Describe {
        #[arg(value_name = "USER")]
        name: String,
    },
    /// Set a user's SCRAM credentials from a password read from STRATA_NEW_PASSWORD or,
    /// without it, the first line of stdin (never the command line).
    Set {
        #[arg(value_name = "USER")]
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (default: both).
        #[arg(long)]
        mechanism: Option<String>,
        /// PBKDF2 iterations (4096 to 16384; default 4096).
        #[arg(long)]
        iterations: Option<u32>,
    },
    /// Delete a user's SCRAM credentials (one mechanism's, or all).
    Delete {
        #[arg(value_name = "USER")]
        name: String,
        #[arg(long)]
        mechanism: Option<String>,
    },
}

/// The default entity of a type, as Kafka's tools print it (and the API reads it).
const DEFAULT: &str = "<default>";

/// The entity quotas belong to, as `strata quotas list` prints it:
/// `user=alice`, `user=<default>,client-id=app`, `ip=10.0.0.1`; each type to its name,
/// `<default>` for the type's default: each type with its name, `None` for a default.
#[derive(Debug, Clone, Default)]
pub struct EntitySpec(Vec<(String, Option<String>)>);

fn entity(s: &str) -> Result<EntitySpec, String> {
    let mut parts: Vec<(String, Option<String>)> = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((kind, name)) = part.split_once('=') else {
            return Err(format!(
                "{part:?} is not type=name (user=alice, client-id=app, ip=10.0.0.1)"
            ));
        };
        let kind = kind.trim();
        if !["user", "client-id", "ip"].contains(&kind) {
            return Err(format!(
                "{kind:?} is not an entity type: user, client-id or ip"
            ));
        }
        if parts.iter().any(|(k, _)| k == kind) {
            return Err(format!("{kind} is named twice"));
        }
        let name = (name != DEFAULT).then(|| name.to_string());
        parts.push((kind.to_string(), name));
    }
    Ok(EntitySpec(parts))
}

#[derive(Debug, Subcommand)]
pub enum Quotas {
    /// Every entity's quotas, or those of one entity (user=alice,client-id=app; a
    /// name `<default>` for the type's default).
    List {
        #[arg(value_parser = entity)]
        entity: Option<EntitySpec>,
    },
    /// Set or remove an entity's quotas (producer_byte_rate, consumer_byte_rate,
    /// request_percentage, controller_mutation_rate; an address's
    /// connection_creation_rate).
    Alter {
        /// user=alice, client-id=app, user=<default>,client-id=app or ip=10.0.0.1.
        #[arg(value_parser = entity)]
        entity: EntitySpec,
        /// name=value (repeatable).
        #[arg(long, value_parser = key_value)]
        set: Vec<(String, String)>,
        /// A quota to remove (repeatable).
        #[arg(long)]
        delete: Vec<String>,
    },
}

/// `?name=value&…` of the pairs with a value.
fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let set: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", seg(v.as_ref()?))))
        .collect();
    if set.is_empty() {
        String::new()
    } else {
        format!("?{}", set.join("&"))
    }
}

const ACL_HEADERS: [&str; 7] = [
    "RESOURCE_TYPE",
    "NAME",
    "PATTERN",
    "PRINCIPAL",
    "HOST",
    "OPERATION",
    "PERMISSION",
];

fn acl_rows(list: &[AclBinding]) -> Vec<Vec<String>> {
    (list.iter())
        .map(|a| {
            [
                &a.resource_type,
                &a.resource_name,
                &a.pattern_type,
                &a.principal,
                &a.host,
                &a.operation,
                &a.permission,
            ]
            .into_iter()
            .cloned()
            .collect()
        })
        .collect()
}

pub async fn acls(command: Acls, conn: &Conn) -> anyhow::Result<()> {
    let api = Api::new(conn)?;
    let json_out = conn.output == Output::Json;
    let mut out = std::io::stdout().lock();
    match command {
        Acls::List {
            resource,
            principal,
        } => {
            let named = resource.named()?;
            let path = format!(
                "/v1/acls{}",
                query(&[
                    ("resource_type", named.as_ref().map(|n| n.0)),
                    ("resource_name", named.as_ref().map(|n| n.1.as_str())),
                    ("pattern_type", resource.resource_pattern_type.as_deref()),
                    ("principal", principal.as_deref()),
                ])
            );
            let v = api.get(&path).await?;
            if json_out {
                return print_json(&v);
            }
            let list: AclList = typed(v, "a list of ACL bindings")?;
            table(&mut out, &ACL_HEADERS, &acl_rows(&list.acls))?;
        }
        Acls::Create {
            resource,
            allow_principal,
            deny_principal,
            operation,
            host,
        } => {
            let Some((kind, name)) = resource.named()? else {
                bail!("name the resource: --topic, --group, --transactional-id or --cluster");
            };
            if allow_principal.is_empty() && deny_principal.is_empty() {
                bail!("name a principal: --allow-principal or --deny-principal (User:alice)");
            }
            let principals = allow_principal
                .iter()
                .map(|p| (p, "ALLOW"))
                .chain(deny_principal.iter().map(|p| (p, "DENY")));
            let mut acls = Vec::new();
            for (principal, permission) in principals {
                for op in &operation {
                    acls.push(AclBindingInput {
                        resource_type: kind.to_string(),
                        resource_name: name.to_string(),
                        pattern_type: Some(
                            (resource.resource_pattern_type.as_deref())
                                .unwrap_or("LITERAL")
                                .to_string(),
                        ),
                        principal: principal.to_string(),
                        host: Some(host.to_string()),
                        operation: op.to_string(),
                        permission: Some(permission.to_string()),
                    });
                }
            }
            let v = api.post("/v1/acls", CreateAclsRequest { acls }).await?;
            if json_out {
                return print_json(&v);
            }
            let created: AclsCreated = typed(v, "the ACL bindings created")?;
            writeln!(out, "created:")?;
            table(&mut out, &ACL_HEADERS, &acl_rows(&created.created))?;
        }
        Acls::Delete {
            resource,
            principal,
            operation,
            permission,
            all,
        } => {
            let named = resource.named()?;
            if named.is_some() && all {
                bail!("--all deletes every resource's bindings: name no resource with it");
            }
            if named.is_none() && !all && principal.is_none() {
                bail!("name a resource or a principal, or give --all to delete every binding");
            }
            let kind = match &named {
                Some((kind, _)) => Some(*kind),
                None if all => Some("ANY"),
                None => None,
            };
            let path = format!(
                "/v1/acls{}",
                query(&[
                    ("resource_type", kind),
                    ("resource_name", named.as_ref().map(|n| n.1.as_str())),
                    ("pattern_type", resource.resource_pattern_type.as_deref()),
                    ("principal", principal.as_deref()),
                    ("operation", operation.as_deref()),
                    ("permission", permission.as_deref()),
                ])
            );
            let v = api.delete(&path).await?;
            if json_out {
                return print_json(&v);
            }
            let deleted: AclsDeleted = typed(v, "the ACL bindings deleted")?;
            writeln!(out, "deleted:")?;
            table(&mut out, &ACL_HEADERS, &acl_rows(&deleted.deleted))?;
        }
    }
    Ok(())
}

fn credentials(credentials: &[ScramCredential]) -> String {
    let c: Vec<String> = (credentials.iter())
        .map(|c| format!("{} ({} iterations)", c.mechanism, c.iterations))
        .collect();
    if c.is_empty() {
        "-".to_string()
    } else {
        c.join(", ")
    }
}

/// The new password: STRATA_NEW_PASSWORD, else the first line of stdin.
fn new_password() -> anyhow::Result<String> {
    if let Ok(p) = std::env::var("STRATA_NEW_PASSWORD") {
        return Ok(p);
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("password: ");
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .context("cannot read the password from stdin")?;
    let password = line.trim_end_matches(['\r', '\n']).to_string();
    if password.is_empty() {
        bail!("no password: set STRATA_NEW_PASSWORD or give it on stdin");
    }
    Ok(password)
}

pub async fn users(command: Users, conn: &Conn) -> anyhow::Result<()> {
    let api = Api::new(conn)?;
    let json_out = conn.output == Output::Json;
    let mut out = std::io::stdout().lock();
    let v = match command {
        Users::List => {
            let v = api.get("/v1/users").await?;
            if json_out {
                return print_json(&v);
            }
            let list: UserList = typed(v, "a list of users")?;
            let rows: Vec<Vec<String>> = (list.users.iter())
                .map(|u| vec![u.user.clone(), credentials(&u.credentials)])
                .collect();
            table(&mut out, &["USER", "CREDENTIALS"], &rows)?;
            return Ok(());
        }
        Users::Describe { name } => api.get(&format!("/v1/users/{}", seg(&name))).await?,
        Users::Set {
            name,
            mechanism,
            iterations,
        } => {
            let body = SetUserRequest {
                password: new_password()?,
                mechanism,
                iterations,
            };
            api.put(&format!("/v1/users/{}", seg(&name)), body).await?
        }
        Users::Delete { name, mechanism } => {
            let v = api
                .delete(&format!(
                    "/v1/users/{}{}",
                    seg(&name),
                    query(&[("mechanism", mechanism.as_deref())])
                ))
                .await?;
            if json_out {
                return print_json(&v);
            }
            let deleted: UserCredentialsDeleted = typed(v, "the credentials deleted")?;
            writeln!(
                out,
                "deleted {}'s {} credentials",
                deleted.user,
                deleted.deleted.join(",")
            )?;
            return Ok(());
        }
    };
    if json_out {
        return print_json(&v);
    }
    let user: ScramUser = typed(v, "a user")?;
    table(
        &mut out,
        &["USER", "CREDENTIALS"],
        &[vec![user.user, credentials(&user.credentials)]],
    )?;
    Ok(())
}

/// An entity and its quotas as table cells.
fn quota_row(q: &QuotaEntry) -> Vec<String> {
    let entity = (q.entity.iter())
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or(DEFAULT)))
        .collect::<Vec<_>>()
        .join(",");
    let values = (q.values.iter())
        .map(|(k, v)| format!("{k}={}", Value::from(*v)))
        .collect::<Vec<_>>()
        .join(",");
    vec![entity, values]
}

pub async fn quotas(command: Quotas, conn: &Conn) -> anyhow::Result<()> {
    let api = Api::new(conn)?;
    let json_out = conn.output == Output::Json;
    let mut out = std::io::stdout().lock();
    let rows = match command {
        Quotas::List { entity } => {
            let parts = entity.unwrap_or_default().0;
            let name = |kind: &str| {
                parts
                    .iter()
                    .find(|(k, _)| k == kind)
                    .map(|(_, n)| n.clone().unwrap_or_else(|| DEFAULT.to_string()))
            };
            let (user, client, ip) = (name("user"), name("client-id"), name("ip"));
            let v = api
                .get(&format!(
                    "/v1/quotas{}",
                    query(&[
                        ("user", user.as_deref()),
                        ("client_id", client.as_deref()),
                        ("ip", ip.as_deref()),
                    ])
                ))
                .await?;
            if json_out {
                return print_json(&v);
            }
            let list: QuotaList = typed(v, "a list of quotas")?;
            list.quotas.iter().map(quota_row).collect::<Vec<_>>()
        }
        Quotas::Alter {
            entity,
            set,
            delete,
        } => {
            let parts = entity.0;
            if parts.is_empty() {
                bail!("name the entity: user=alice, client-id=app, ip=10.0.0.1 (or <default>)");
            }
            if set.is_empty() && delete.is_empty() {
                bail!("nothing to change: give --set name=value or --delete name");
            }
            let mut values = BTreeMap::new();
            for (k, v) in set {
                let n: f64 = v
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--set {k}={v}: {v:?} is not a number"))?;
                values.insert(k, n);
            }
            let request = AlterQuotasRequest {
                entity: parts.into_iter().collect(),
                set: values,
                delete,
            };
            let v = api.patch("/v1/quotas", request).await?;
            if json_out {
                return print_json(&v);
            }
            let entry: QuotaEntry = typed(v, "an entity's quotas")?;
            vec![quota_row(&entry)]
        }
    };
    table(&mut out, &["ENTITY", "QUOTAS"], &rows)?;
    Ok(())
}
