//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topics, brokers (the
//! dynamic configs of `broker_config.rs`, per broker or as the cluster's default) and
//! broker loggers (`log_level.rs`).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, alter_configs_response,
    incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;

use super::errors::ApiError;
use crate::broker::Broker;
use strata_metastore::ConfigScope;

use crate::broker_config;
use crate::log_level;
use crate::topic_config::{self, Kind, Source};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub fn describe_configs(
    broker: &Broker,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let mut response = DescribeConfigsResponse::default();
    for resource in req.resources {
        let mut result = DescribeConfigsResult::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        // Null or empty: every config (as Kafka does).
        let keys: Option<Vec<String>> = resource
            .configuration_keys
            .as_ref()
            .filter(|k| !k.is_empty())
            .map(|k| k.iter().map(|k| k.to_string()).collect());
        let wanted = |name: &str| keys.as_ref().is_none_or(|k| k.iter().any(|k| k == name));
        match resource.resource_type {
            RESOURCE_TOPIC => match broker.replicas().topic(resource.resource_name.as_str()) {
                Some(topic) => {
                    for (name, value, source) in topic.config.entries().filter(|e| wanted(e.0)) {
                        let def = topic_config::lookup(name).expect("entries are known configs");
                        let mut c = DescribeConfigsResourceResult::default();
                        c.name = StrBytes::from_static_str(name);
                        c.value = Some(s(value));
                        c.config_source = source as i8;
                        if version >= 3 {
                            c.config_type = def.kind as i8;
                            if req.include_documentation {
                                c.documentation = Some(StrBytes::from_static_str(def.doc));
                            }
                        }
                        if req.include_synonyms {
                            c.synonyms = synonyms(broker, &topic.record.configs, name);
                        }
                        result.configs.push(c);
                    }
                }
                None => {
                    result.error_code = ResponseError::UnknownTopicOrPartition.code();
                    result.error_message = Some(s(format!(
                        "Topic '{}' does not exist.",
                        resource.resource_name.as_str()
                    )));
                }
            },
            RESOURCE_BROKER => match broker_scope(broker, resource.resource_name.as_str()) {
                Ok(scope) => {
                    let config = broker.replicas().broker_config();
                    let described = match scope {
                        ConfigScope::Cluster => config.describe_cluster_defaults(),
                        ConfigScope::Broker(_) => config.describe(),
                    };
                    for d in described.into_iter().filter(|d| wanted(&d.name)) {
                        let mut c = DescribeConfigsResourceResult::default();
                        c.name = s(d.name.clone());
                        c.value = Some(s(d.value));
                        c.read_only = d.read_only;
                        c.config_source = d.source as i8;
                        if version >= 3 {
                            c.config_type = d.kind as i8;
                            if req.include_documentation {
                                c.documentation = Some(StrBytes::from_static_str(d.doc));
                            }
                        }
                        if req.include_synonyms {
                            c.synonyms = d
                                .synonyms
                                .into_iter()
                                .map(|(value, source)| synonym(&d.name, &value, source))
                                .collect();
                        }
                        result.configs.push(c);
                    }
                }
                Err(e) => {
                    result.error_code = e.code();
                    result.error_message = Some(s(e.message));
                }
            },
            RESOURCE_BROKER_LOGGER => match this_broker(broker, resource.resource_name.as_str()) {
                Ok(()) => {
                    for (logger, level) in log_level::loggers().into_iter().filter(|l| wanted(&l.0))
                    {
                        let mut c = DescribeConfigsResourceResult::default();
                        c.name = s(logger);
                        c.value = Some(s(level));
                        c.config_source = Source::DynamicBroker as i8;
                        if version >= 3 {
                            c.config_type = Kind::String as i8;
                        }
                        result.configs.push(c);
                    }
                }
                Err(e) => {
                    result.error_code = e.code();
                    result.error_message = Some(s(e.message));
                }
            },
            other => {
                result.error_code = ResponseError::InvalidRequest.code();
                result.error_message = Some(s(format!("Unsupported resource type {other}")));
            }
        }
        response.results.push(result);
    }
    response
}

fn synonym(name: &str, value: &str, source: Source) -> DescribeConfigsSynonym {
    let mut syn = DescribeConfigsSynonym::default();
    syn.name = s(name);
    syn.value = Some(s(value));
    syn.source = source as i8;
    syn
}

/// A topic config's synonyms: the topic's own value, then each broker level's (under
/// the broker config's name, `log.retention.ms` for `retention.ms`), as Kafka lists them.
fn synonyms(
    broker: &Broker,
    topic: &BTreeMap<String, String>,
    name: &str,
) -> Vec<DescribeConfigsSynonym> {
    let own = topic.get(name).map(|v| synonym(name, v, Source::Topic));
    let inherited = broker.replicas().broker_config().topic_synonyms(name);
    own.into_iter()
        .chain(
            inherited
                .iter()
                .map(|(n, v, source)| synonym(n, v, *source)),
        )
        .collect()
}

/// The broker resource `name` stands for: the cluster's default (empty) or a node id.
fn broker_scope(broker: &Broker, name: &str) -> Result<ConfigScope, ApiError> {
    if name.is_empty() {
        return Ok(ConfigScope::Cluster);
    }
    this_broker(broker, name).map(|()| ConfigScope::Broker(broker.node_id().max(0) as u32))
}

/// Refuses a per-broker resource sent to another broker (Kafka's clients send each to
/// the broker it names).
fn this_broker(broker: &Broker, name: &str) -> Result<(), ApiError> {
    if name == broker.node_id().to_string() {
        return Ok(());
    }
    Err(ApiError::new(
        ResponseError::InvalidRequest,
        format!(
            "Unexpected broker id, expected {} but received {name}",
            broker.node_id()
        ),
    ))
}

/// Validates `configs` and, unless `validate_only`, stores them as the topic's configs.
pub(crate) async fn store_topic_configs(
    broker: &Broker,
    name: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), ApiError> {
    topic_config::validate_all(&configs)
        .map_err(|m| ApiError::new(ResponseError::InvalidConfig, m))?;
    if validate_only {
        return Ok(());
    }
    broker.metastore().set_topic_configs(name, configs).await?;
    broker.replicas().sync_topic(name).await?;
    Ok(())
}

/// Stores a change to the dynamic configs of `scope` and applies it here before
/// answering (the other agents apply it when their topic watch fires). `change` edits
/// what is stored now, inside the metastore transaction, so that changes made at once
/// through different agents never undo one another; its error is INVALID_CONFIG.
async fn store_broker_configs<F>(
    broker: &Broker,
    scope: ConfigScope,
    validate_only: bool,
    change: F,
) -> Result<(), ApiError>
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
    let outcome = if validate_only {
        let node = match scope {
            ConfigScope::Broker(id) => id,
            ConfigScope::Cluster => 0,
        };
        let stored = broker.metastore().broker_configs(node).await?;
        let mut configs = match scope {
            ConfigScope::Cluster => stored.cluster,
            ConfigScope::Broker(_) => stored.broker,
        };
        validated(&mut configs)
    } else {
        broker
            .metastore()
            .alter_broker_configs(scope, validated)
            .await
            .map(drop)
    };
    match outcome {
        Err(strata_metastore::Error::Invalid(m)) => {
            return Err(ApiError::new(ResponseError::InvalidConfig, m));
        }
        other => other?,
    }
    if !validate_only {
        broker.replicas().refresh().await.map_err(|e| {
            ApiError::new(
                ResponseError::UnknownServerError,
                format!("stored, but not yet applied on this agent: {e}"),
            )
        })?;
    }
    Ok(())
}

/// The changes one IncrementalAlterConfigs resource asks for, checked for what needs no
/// current value: `(name, operation, value)`.
type Ops = Vec<(String, i8, Option<String>)>;

/// Applies incremental `ops` to `configs`. `kind` gives a config's type (an error for
/// an unknown name); `current` its effective value, which APPEND and SUBTRACT start
/// from when `configs` does not set it.
fn apply_ops(
    configs: &mut BTreeMap<String, String>,
    ops: &Ops,
    kind: &dyn Fn(&str) -> Result<Kind, String>,
    current: &dyn Fn(&str) -> String,
) -> Result<(), String> {
    let items = |v: &str| -> Vec<String> {
        v.split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect()
    };
    for (key, op, value) in ops {
        let kind = kind(key)?;
        match *op {
            OP_SET => {
                let v = value
                    .clone()
                    .ok_or_else(|| format!("Null value not supported for {key}"))?;
                configs.insert(key.clone(), v);
            }
            OP_DELETE => {
                configs.remove(key);
            }
            OP_APPEND | OP_SUBTRACT => {
                if kind != Kind::List {
                    return Err(format!(
                        "Config value append/subtract is not allowed for config key {key}"
                    ));
                }
                let now = configs.get(key).cloned().unwrap_or_else(|| current(key));
                let mut list = items(&now);
                let given = items(value.as_deref().unwrap_or_default());
                if *op == OP_APPEND {
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
            op => return Err(format!("Unknown config operation {op}")),
        }
    }
    Ok(())
}

fn unknown_topic(name: &str) -> ApiError {
    ApiError::new(
        ResponseError::UnknownTopicOrPartition,
        format!("Topic '{name}' does not exist."),
    )
}

fn unsupported(resource_type: i8) -> ApiError {
    ApiError::new(
        ResponseError::InvalidRequest,
        format!("Unsupported resource type {resource_type}"),
    )
}

pub async fn alter_configs(broker: &Broker, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut response = AlterConfigsResponse::default();
    for resource in req.resources {
        let name = resource.resource_name.to_string();
        // AlterConfigs replaces the whole set; a null value leaves the key out.
        let configs: BTreeMap<String, String> = resource
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.to_string(), v.to_string()))
            })
            .collect();
        let outcome = match resource.resource_type {
            RESOURCE_TOPIC if broker.replicas().topic(&name).is_none() => Err(unknown_topic(&name)),
            RESOURCE_TOPIC => store_topic_configs(broker, &name, configs, req.validate_only).await,
            RESOURCE_BROKER => match broker_scope(broker, &name) {
                Ok(scope) => {
                    store_broker_configs(broker, scope, req.validate_only, move |stored| {
                        stored.clone_from(&configs);
                        Ok(())
                    })
                    .await
                }
                Err(e) => Err(e),
            },
            RESOURCE_BROKER_LOGGER => Err(ApiError::new(
                ResponseError::InvalidRequest,
                "AlterConfigs does not support BROKER_LOGGER resources: use IncrementalAlterConfigs",
            )),
            other => Err(unsupported(other)),
        };
        let mut r = alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = resource.resource_type;
        r.resource_name = resource.resource_name;
        if let Err(e) = outcome {
            r.error_code = e.code();
            r.error_message = Some(s(e.message));
        }
        response.responses.push(r);
    }
    response
}

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

pub async fn incremental_alter_configs(
    broker: &Broker,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut response = IncrementalAlterConfigsResponse::default();
    for resource in req.resources {
        let name = resource.resource_name.to_string();
        let ops: Ops = resource
            .configs
            .iter()
            .map(|c| {
                let value = c.value.as_ref().map(|v| v.to_string());
                (c.name.to_string(), c.config_operation, value)
            })
            .collect();
        let outcome = match ops
            .iter()
            .find(|(_, op, _)| !(OP_SET..=OP_SUBTRACT).contains(op))
        {
            Some((_, op, _)) => Err(ApiError::new(
                ResponseError::InvalidRequest,
                format!("Unknown config operation {op}"),
            )),
            None => {
                incremental(
                    broker,
                    resource.resource_type,
                    &name,
                    ops,
                    req.validate_only,
                )
                .await
            }
        };
        let mut r = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = resource.resource_type;
        r.resource_name = resource.resource_name;
        if let Err(e) = outcome {
            r.error_code = e.code();
            r.error_message = Some(s(e.message));
        }
        response.responses.push(r);
    }
    response
}

/// One resource of an IncrementalAlterConfigs.
async fn incremental(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    ops: Ops,
    validate_only: bool,
) -> Result<(), ApiError> {
    let invalid = |m: String| ApiError::new(ResponseError::InvalidConfig, m);
    match resource_type {
        // The metastore's record, not this agent's last view of it: a change made
        // through another agent a moment ago is built on, not undone.
        RESOURCE_TOPIC => match broker.replicas().sync_topic(name).await.ok().flatten() {
            None => Err(unknown_topic(name)),
            Some(topic) => {
                let mut configs = topic.record.configs.clone();
                let kind = |key: &str| {
                    topic_config::lookup(key)
                        .map(|d| d.kind)
                        .ok_or_else(|| format!("Unknown topic config name: {key}"))
                };
                let current = |key: &str| topic.config.get(key).unwrap_or_default().to_string();
                apply_ops(&mut configs, &ops, &kind, &current).map_err(invalid)?;
                store_topic_configs(broker, name, configs, validate_only).await
            }
        },
        RESOURCE_BROKER => {
            let scope = broker_scope(broker, name)?;
            let config = std::sync::Arc::clone(broker.replicas().broker_config());
            store_broker_configs(broker, scope, validate_only, move |stored| {
                let kind = |key: &str| {
                    broker_config::validate_name(key)?;
                    Ok(config.kind(key))
                };
                let current = |key: &str| config.value(key).unwrap_or_default();
                apply_ops(stored, &ops, &kind, &current)
            })
            .await
        }
        RESOURCE_BROKER_LOGGER => {
            this_broker(broker, name)?;
            let changes: Vec<(String, Option<String>)> = ops
                .into_iter()
                .map(|(logger, op, level)| match op {
                    OP_SET => Ok((logger, Some(level.unwrap_or_default()))),
                    OP_DELETE => Ok((logger, None)),
                    _ => Err(ApiError::new(
                        ResponseError::InvalidRequest,
                        format!("APPEND and SUBTRACT are not supported for logger {logger}"),
                    )),
                })
                .collect::<Result<_, _>>()?;
            log_level::alter(&changes, validate_only).map_err(invalid)
        }
        other => Err(unsupported(other)),
    }
}
