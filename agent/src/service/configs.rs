//! Dynamic configuration in domain terms: a topic's configs, a broker's dynamic configs
//! (per broker, or the cluster's default; `broker_config.rs`) and a broker's log levels
//! (`log_level.rs`). Kafka's DescribeConfigs, AlterConfigs and IncrementalAlterConfigs
//! (`api/configs.rs`) and the HTTP API's `PATCH /v1/topics/{topic}/configs`
//! (`http/admin.rs`) translate their requests to these calls and [`ConfigError`] to
//! Kafka codes or HTTP statuses.
//!
//! The service decides who may and records what was changed: each call takes the
//! [`Caller`] and checks DESCRIBE_CONFIGS or ALTER_CONFIGS (on the topic; on the cluster
//! for brokers and loggers) before it looks at the resource, as Kafka's broker does.
//! Changes, refusals included, are audited (`topic.alter_configs`,
//! `broker.alter_configs`, `broker_logger.alter_configs`); descriptions are not.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use strata_metastore::ConfigScope;

use crate::audit::Audit;
use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::broker_config;
use crate::caller::Caller;
use crate::log_level;
use crate::replicas::{ReplicaManager, SyncError};
use crate::topic_config::{self, Kind, Source};

/// What has configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    Topic(String),
    /// A broker's dynamic configs: its node id, or empty for the cluster's default.
    Broker(String),
    /// A broker's log levels: its node id.
    BrokerLogger(String),
}

impl Resource {
    /// The audit log's action and resource name for a change to it.
    fn audited(&self) -> (&'static str, String) {
        match self {
            Resource::Topic(name) => ("topic.alter_configs", format!("topic:{name}")),
            Resource::Broker(name) if name.is_empty() => {
                ("broker.alter_configs", "broker:<default>".to_string())
            }
            Resource::Broker(name) => ("broker.alter_configs", format!("broker:{name}")),
            Resource::BrokerLogger(name) => (
                "broker_logger.alter_configs",
                format!("broker_logger:{name}"),
            ),
        }
    }

    /// What the authorizer checks: the topic, or the cluster for brokers and loggers.
    fn checked_on(&self) -> (ResourceType, &str) {
        match self {
            Resource::Topic(name) => (ResourceType::Topic, name),
            Resource::Broker(_) | Resource::BrokerLogger(_) => {
                (ResourceType::Cluster, CLUSTER_NAME)
            }
        }
    }
}

/// Why a config request is refused; each edge maps the kind to its own terms.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// TOPIC_ or CLUSTER_AUTHORIZATION_FAILED, by `resource`.
    #[error("{principal} may not {operation} {} {name}", .resource.name())]
    Denied {
        principal: String,
        operation: &'static str,
        resource: ResourceType,
        name: String,
    },
    #[error("{0}")]
    UnknownTopic(String),
    /// A config name or value that cannot be (INVALID_CONFIG).
    #[error("{0}")]
    Invalid(String),
    /// A request that cannot be (INVALID_REQUEST): another broker's resource, an
    /// operation the resource does not support.
    #[error("{0}")]
    InvalidRequest(String),
    /// Stored, but this agent could not apply it before answering.
    #[error("stored, but not yet applied on this agent: {0}")]
    NotApplied(String),
    #[error(transparent)]
    Metastore(#[from] strata_metastore::Error),
    #[error(transparent)]
    Sync(#[from] SyncError),
}

impl ConfigError {
    /// Kafka's name for the refusal, which the audit log puts before its message.
    fn name(&self) -> &'static str {
        match self {
            ConfigError::Denied {
                resource: ResourceType::Topic,
                ..
            } => "TOPIC_AUTHORIZATION_FAILED",
            ConfigError::Denied { .. } => "CLUSTER_AUTHORIZATION_FAILED",
            ConfigError::UnknownTopic(_) => "UNKNOWN_TOPIC_OR_PARTITION",
            ConfigError::Invalid(_) => "INVALID_CONFIG",
            ConfigError::InvalidRequest(_) => "INVALID_REQUEST",
            ConfigError::NotApplied(_) => "UNKNOWN_SERVER_ERROR",
            ConfigError::Metastore(_) => "METASTORE_ERROR",
            ConfigError::Sync(_) => "NOT_SERVED",
        }
    }
}

/// One change of an incremental alteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Set(String),
    Delete,
    /// Adds items to a list config (those not in it yet).
    Append(String),
    /// Takes items out of a list config.
    Subtract(String),
}

impl Op {
    fn describe(&self) -> (&'static str, Option<&str>) {
        match self {
            Op::Set(v) => ("set", Some(v)),
            Op::Delete => ("delete", None),
            Op::Append(v) => ("append", Some(v)),
            Op::Subtract(v) => ("subtract", Some(v)),
        }
    }
}

/// One config as described.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: String,
    pub value: String,
    pub source: Source,
    pub kind: Kind,
    pub read_only: bool,
    pub doc: &'static str,
    /// Every level that sets it, first the one in effect (Kafka's synonyms): name,
    /// value and level.
    pub synonyms: Vec<(String, String, Source)>,
}

/// The config service, on what it borrows from the broker (`Broker::configs`).
#[derive(Clone, Copy)]
pub struct Configs<'a> {
    pub replicas: &'a Arc<ReplicaManager>,
    pub authorizer: &'a Authorizer,
    pub audit: &'a Audit,
}

impl Configs<'_> {
    fn authorize(
        &self,
        who: &Caller,
        operation: Operation,
        resource: &Resource,
    ) -> Result<(), ConfigError> {
        let (kind, name) = resource.checked_on();
        if self.authorizer.allows(who.authz(), operation, kind, name) {
            return Ok(());
        }
        Err(ConfigError::Denied {
            principal: who.principal.to_string(),
            operation: operation.name(),
            resource: kind,
            name: name.to_string(),
        })
    }

    /// The configs of `resource` named in `keys` (`None`: all), for a caller with
    /// DESCRIBE_CONFIGS on it.
    pub fn describe(
        &self,
        who: &Caller,
        resource: &Resource,
        keys: Option<&[String]>,
    ) -> Result<Vec<Entry>, ConfigError> {
        self.authorize(who, Operation::DescribeConfigs, resource)?;
        let wanted = |name: &str| keys.is_none_or(|k| k.iter().any(|k| k == name));
        let config = self.replicas.broker_config();
        Ok(match resource {
            Resource::Topic(name) => {
                let topic = self
                    .replicas
                    .topic(name)
                    .ok_or_else(|| unknown_topic(name))?;
                topic
                    .config
                    .entries()
                    .filter(|e| wanted(e.0))
                    .filter_map(|(name, value, source)| {
                        let def = topic_config::lookup(name)?;
                        let own = topic
                            .record
                            .configs
                            .get(name)
                            .map(|v| (name.to_string(), v.clone(), Source::Topic));
                        Some(Entry {
                            name: name.to_string(),
                            value: value.to_string(),
                            source,
                            kind: def.kind,
                            read_only: false,
                            doc: def.doc,
                            synonyms: own.into_iter().chain(config.topic_synonyms(name)).collect(),
                        })
                    })
                    .collect()
            }
            Resource::Broker(name) => {
                let described = match self.scope(name)? {
                    ConfigScope::Cluster => config.describe_cluster_defaults(),
                    ConfigScope::Broker(_) => config.describe(),
                };
                described
                    .into_iter()
                    .filter(|d| wanted(&d.name))
                    .map(|d| Entry {
                        synonyms: d
                            .synonyms
                            .into_iter()
                            .map(|(value, source)| (d.name.clone(), value, source))
                            .collect(),
                        name: d.name,
                        value: d.value,
                        source: d.source,
                        kind: d.kind,
                        read_only: d.read_only,
                        doc: d.doc,
                    })
                    .collect()
            }
            Resource::BrokerLogger(name) => {
                self.this_broker(name)?;
                log_level::loggers()
                    .into_iter()
                    .filter(|l| wanted(&l.0))
                    .map(|(logger, level)| Entry {
                        name: logger,
                        value: level,
                        source: Source::DynamicBroker,
                        kind: Kind::String,
                        read_only: false,
                        doc: "",
                        synonyms: Vec::new(),
                    })
                    .collect()
            }
        })
    }

    /// Replaces the dynamic configs of `resource` with `configs` (Kafka's
    /// AlterConfigs: what is not given goes back to its default), for a caller with
    /// ALTER_CONFIGS on it. Audited.
    pub async fn replace(
        &self,
        who: &Caller,
        resource: &Resource,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ConfigError> {
        let request = json!({ "replace": configs, "validate_only": validate_only });
        let outcome = async {
            self.authorize(who, Operation::AlterConfigs, resource)?;
            match resource {
                Resource::Topic(name) => {
                    if self.replicas.topic(name).is_none() {
                        return Err(unknown_topic(name));
                    }
                    self.store_topic(name, configs, validate_only).await
                }
                Resource::Broker(name) => {
                    let scope = self.scope(name)?;
                    self.store_broker(scope, validate_only, move |stored| {
                        stored.clone_from(&configs);
                        Ok(())
                    })
                    .await
                }
                Resource::BrokerLogger(_) => Err(ConfigError::InvalidRequest(
                    "AlterConfigs does not support BROKER_LOGGER resources: use IncrementalAlterConfigs"
                        .to_string(),
                )),
            }
        }
        .await;
        self.record(who, resource, request, &outcome);
        outcome
    }

    /// Applies `ops` to the dynamic configs of `resource` (Kafka's
    /// IncrementalAlterConfigs: the others keep their values), for a caller with
    /// ALTER_CONFIGS on it. Answers a topic's own configs as they are now (or would be,
    /// `validate_only`). Audited.
    pub async fn alter(
        &self,
        who: &Caller,
        resource: &Resource,
        ops: Vec<(String, Op)>,
        validate_only: bool,
    ) -> Result<Option<BTreeMap<String, String>>, ConfigError> {
        let described: Vec<Value> = ops
            .iter()
            .map(|(name, op)| {
                let (op, value) = op.describe();
                json!({ "name": name, "op": op, "value": value })
            })
            .collect();
        let request = json!({ "ops": described, "validate_only": validate_only });
        let outcome = async {
            self.authorize(who, Operation::AlterConfigs, resource)?;
            self.apply(resource, ops, validate_only).await
        }
        .await;
        self.record(who, resource, request, &outcome);
        outcome
    }

    async fn apply(
        &self,
        resource: &Resource,
        ops: Vec<(String, Op)>,
        validate_only: bool,
    ) -> Result<Option<BTreeMap<String, String>>, ConfigError> {
        match resource {
            // The metastore's record, not this agent's last view of it: a change made
            // through another agent a moment ago is built on, not undone.
            Resource::Topic(name) => {
                let topic = match self.replicas.sync_topic(name).await {
                    Ok(Some(topic)) => topic,
                    _ => return Err(unknown_topic(name)),
                };
                let mut configs = topic.record.configs.clone();
                let kind = |key: &str| {
                    topic_config::lookup(key)
                        .map(|d| d.kind)
                        .ok_or_else(|| format!("Unknown topic config name: {key}"))
                };
                let current = |key: &str| topic.config.get(key).unwrap_or_default().to_string();
                apply_ops(&mut configs, &ops, &kind, &current).map_err(ConfigError::Invalid)?;
                self.store_topic(name, configs.clone(), validate_only)
                    .await?;
                Ok(Some(configs))
            }
            Resource::Broker(name) => {
                let scope = self.scope(name)?;
                let config = Arc::clone(self.replicas.broker_config());
                self.store_broker(scope, validate_only, move |stored| {
                    let kind = |key: &str| {
                        broker_config::validate_name(key)?;
                        Ok(config.kind(key))
                    };
                    let current = |key: &str| config.value(key).unwrap_or_default();
                    apply_ops(stored, &ops, &kind, &current)
                })
                .await?;
                Ok(None)
            }
            Resource::BrokerLogger(name) => {
                self.this_broker(name)?;
                let changes: Vec<(String, Option<String>)> = ops
                    .into_iter()
                    .map(|(logger, op)| match op {
                        Op::Set(level) => Ok((logger, Some(level))),
                        Op::Delete => Ok((logger, None)),
                        Op::Append(_) | Op::Subtract(_) => Err(ConfigError::InvalidRequest(
                            format!("APPEND and SUBTRACT are not supported for logger {logger}"),
                        )),
                    })
                    .collect::<Result<_, _>>()?;
                log_level::alter(&changes, validate_only).map_err(ConfigError::Invalid)?;
                Ok(None)
            }
        }
    }

    fn record<T>(
        &self,
        who: &Caller,
        resource: &Resource,
        request: Value,
        outcome: &Result<T, ConfigError>,
    ) {
        let (action, name) = resource.audited();
        let outcome = match outcome {
            Ok(_) => Ok(json!({})),
            Err(e) => Err(format!("{}: {e}", e.name())),
        };
        self.audit.record(who, action, &name, request, outcome);
    }

    /// The broker resource `name` stands for: the cluster's default (empty) or a node
    /// id.
    fn scope(&self, name: &str) -> Result<ConfigScope, ConfigError> {
        if name.is_empty() {
            return Ok(ConfigScope::Cluster);
        }
        self.this_broker(name)?;
        Ok(ConfigScope::Broker(self.replicas.node_id().max(0) as u32))
    }

    /// Refuses a per-broker resource sent to another broker (Kafka's clients send each
    /// to the broker it names).
    fn this_broker(&self, name: &str) -> Result<(), ConfigError> {
        let node_id = self.replicas.node_id();
        if name == node_id.to_string() {
            return Ok(());
        }
        Err(ConfigError::InvalidRequest(format!(
            "Unexpected broker id, expected {node_id} but received {name}"
        )))
    }

    /// Validates `configs` and, unless `validate_only`, stores them as the topic's.
    async fn store_topic(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ConfigError> {
        topic_config::validate_all(&configs).map_err(ConfigError::Invalid)?;
        if validate_only {
            return Ok(());
        }
        self.replicas
            .metastore()
            .set_topic_configs(name, configs)
            .await?;
        self.replicas.sync_topic(name).await?;
        Ok(())
    }

    /// Stores a change to the dynamic configs of `scope` and applies it here before
    /// answering (the other agents apply it when their topic watch fires). `change`
    /// edits what is stored now, inside the metastore transaction, so that changes made
    /// at once through different agents never undo one another; its error is
    /// [`ConfigError::Invalid`].
    async fn store_broker<F>(
        &self,
        scope: ConfigScope,
        validate_only: bool,
        change: F,
    ) -> Result<(), ConfigError>
    where
        F: Fn(&mut BTreeMap<String, String>) -> Result<(), String> + Send + Sync + 'static,
    {
        let validated = move |configs: &mut BTreeMap<String, String>| {
            change(configs)
                .and_then(|()| {
                    configs
                        .iter()
                        .try_for_each(|(k, v)| broker_config::validate(k, v))
                })
                .map_err(strata_metastore::Error::Invalid)
        };
        let metastore = self.replicas.metastore();
        let outcome = if validate_only {
            let node = match scope {
                ConfigScope::Broker(id) => id,
                ConfigScope::Cluster => 0,
            };
            let stored = metastore.broker_configs(node).await?;
            let mut configs = match scope {
                ConfigScope::Cluster => stored.cluster,
                ConfigScope::Broker(_) => stored.broker,
            };
            validated(&mut configs)
        } else {
            metastore
                .alter_broker_configs(scope, validated)
                .await
                .map(drop)
        };
        match outcome {
            Err(strata_metastore::Error::Invalid(m)) => return Err(ConfigError::Invalid(m)),
            other => other?,
        }
        if !validate_only {
            self.replicas
                .refresh()
                .await
                .map_err(|e| ConfigError::NotApplied(e.to_string()))?;
        }
        Ok(())
    }
}

fn unknown_topic(name: &str) -> ConfigError {
    ConfigError::UnknownTopic(format!("Topic '{name}' does not exist."))
}

/// Applies incremental `ops` to `configs`. `kind` gives a config's type (an error for
/// an unknown name); `current` its effective value, which APPEND and SUBTRACT start
/// from when `configs` does not set it.
fn apply_ops(
    configs: &mut BTreeMap<String, String>,
    ops: &[(String, Op)],
    kind: &dyn Fn(&str) -> Result<Kind, String>,
    current: &dyn Fn(&str) -> String,
) -> Result<(), String> {
    let items = |v: &str| -> Vec<String> {
        v.split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect()
    };
    for (key, op) in ops {
        let kind = kind(key)?;
        match op {
            Op::Set(v) => {
                configs.insert(key.clone(), v.clone());
            }
            Op::Delete => {
                configs.remove(key);
            }
            Op::Append(value) | Op::Subtract(value) => {
                if kind != Kind::List {
                    return Err(format!(
                        "Config value append/subtract is not allowed for config key {key}"
                    ));
                }
                let now = configs.get(key).cloned().unwrap_or_else(|| current(key));
                let mut list = items(&now);
                let given = items(value);
                if matches!(op, Op::Append(_)) {
                    for g in given {
                        if !list.contains(&g) {
                            list.push(g);
                        }
                    }
                } else {
                    list.retain(|i| !given.contains(i));
                }
                configs.insert(key.clone(), list.join(","));
            }
        }
    }
    Ok(())
}
