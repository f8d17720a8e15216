//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and a read-only
//! view of the broker's settings).

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
use crate::topic_config::{self, Kind, Source};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

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
                            c.synonyms = synonyms(broker, &topic.record.configs, name, def.default);
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
            RESOURCE_BROKER => {
                let name = resource.resource_name.as_str();
                if !name.is_empty() && name != broker.node_id().to_string() {
                    result.error_code = ResponseError::InvalidRequest.code();
                    result.error_message = Some(s(format!(
                        "Unexpected broker id, expected {} but received {name}",
                        broker.node_id()
                    )));
                } else {
                    for (name, value, kind) in
                        broker_configs(broker).into_iter().filter(|e| wanted(&e.0))
                    {
                        let mut c = DescribeConfigsResourceResult::default();
                        c.name = s(name);
                        c.value = Some(s(value));
                        c.read_only = true;
                        c.config_source = Source::StaticBroker as i8;
                        if version >= 3 {
                            c.config_type = kind as i8;
                        }
                        result.configs.push(c);
                    }
                }
            }
            other => {
                result.error_code = ResponseError::InvalidRequest.code();
                result.error_message = Some(s(format!("Unsupported resource type {other}")));
            }
        }
        response.results.push(result);
    }
    response
}

fn synonyms(
    broker: &Broker,
    topic: &BTreeMap<String, String>,
    name: &str,
    default: &str,
) -> Vec<DescribeConfigsSynonym> {
    let mut out = Vec::new();
    let mut push = |value: &str, source: Source| {
        let mut syn = DescribeConfigsSynonym::default();
        syn.name = s(name);
        syn.value = Some(s(value));
        syn.source = source as i8;
        out.push(syn);
    };
    if let Some(v) = topic.get(name) {
        push(v, Source::Topic);
    }
    if let Some(v) = broker.settings().topic_defaults.configs.get(name) {
        push(v, Source::StaticBroker);
    }
    push(default, Source::Default);
    out
}

fn broker_configs(broker: &Broker) -> Vec<(String, String, Kind)> {
    let s = &broker.settings();
    vec![
        (
            "advertised.listeners".into(),
            format!(
                "PLAINTEXT://{}:{}",
                broker.identity().advertised_host,
                broker.identity().advertised_port
            ),
            Kind::String,
        ),
        (
            "auto.create.topics.enable".into(),
            s.auto_create_topics.to_string(),
            Kind::Boolean,
        ),
        ("broker.id".into(), broker.node_id().to_string(), Kind::Int),
        (
            "default.replication.factor".into(),
            s.topic_defaults.replication_factor.to_string(),
            Kind::Int,
        ),
        (
            "log.dirs".into(),
            s.data_dir.join("logs").display().to_string(),
            Kind::String,
        ),
        (
            "num.partitions".into(),
            s.topic_defaults.num_partitions.to_string(),
            Kind::Int,
        ),
        (
            "socket.request.max.bytes".into(),
            s.max_request_bytes.to_string(),
            Kind::Int,
        ),
    ]
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

fn static_broker_error() -> ApiError {
    ApiError::new(
        ResponseError::InvalidRequest,
        "strata broker settings are static: set them in the agent's settings file or flags",
    )
}

fn unknown_topic(name: &str) -> ApiError {
    ApiError::new(
        ResponseError::UnknownTopicOrPartition,
        format!("Topic '{name}' does not exist."),
    )
}

pub async fn alter_configs(broker: &Broker, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut response = AlterConfigsResponse::default();
    for resource in req.resources {
        let name = resource.resource_name.to_string();
        let outcome = match resource.resource_type {
            RESOURCE_TOPIC if broker.replicas().topic(&name).is_none() => Err(unknown_topic(&name)),
            RESOURCE_TOPIC => {
                // AlterConfigs replaces the whole set; a null value leaves the key out.
                let configs = resource
                    .configs
                    .iter()
                    .filter_map(|c| {
                        c.value
                            .as_ref()
                            .map(|v| (c.name.to_string(), v.to_string()))
                    })
                    .collect();
                store_topic_configs(broker, &name, configs, req.validate_only).await
            }
            RESOURCE_BROKER => Err(static_broker_error()),
            other => Err(ApiError::new(
                ResponseError::InvalidRequest,
                format!("Unsupported resource type {other}"),
            )),
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
        let outcome = match resource.resource_type {
            // The metastore's record, not this agent's last view of it: a change made
            // through another agent a moment ago is built on, not undone.
            RESOURCE_TOPIC => match broker.replicas().sync_topic(&name).await.ok().flatten() {
                None => Err(unknown_topic(&name)),
                Some(topic) => {
                    let effective = topic.config.clone();
                    let mut configs = topic.record.configs.clone();
                    let applied: Result<(), ApiError> = resource.configs.iter().try_for_each(|c| {
                        let key = c.name.to_string();
                        let value = c.value.as_ref().map(|v| v.to_string());
                        let def = topic_config::lookup(&key).ok_or_else(|| {
                            ApiError::new(ResponseError::InvalidConfig, format!("Unknown topic config name: {key}"))
                        })?;
                        let list_op = |f: &dyn Fn(&mut Vec<String>, Vec<String>)| -> Result<String, ApiError> {
                            if def.kind != Kind::List {
                                return Err(ApiError::new(
                                    ResponseError::InvalidConfig,
                                    format!("Config value append/subtract is not allowed for config key {key}"),
                                ));
                            }
                            let current = effective.get(&key).unwrap_or(def.default);
                            let mut items: Vec<String> =
                                current.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect();
                            let given = value.clone().unwrap_or_default();
                            f(&mut items, given.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect());
                            Ok(items.join(","))
                        };
                        match c.config_operation {
                            OP_SET => {
                                let v = value.clone().ok_or_else(|| {
                                    ApiError::new(ResponseError::InvalidConfig, format!("Null value not supported for {key}"))
                                })?;
                                configs.insert(key, v);
                            }
                            OP_DELETE => {
                                configs.remove(&key);
                            }
                            OP_APPEND => {
                                let v = list_op(&|items, add| {
                                    for a in add {
                                        if !items.contains(&a) {
                                            items.push(a);
                                        }
                                    }
                                })?;
                                configs.insert(key, v);
                            }
                            OP_SUBTRACT => {
                                let v = list_op(&|items, remove| items.retain(|i| !remove.contains(i)))?;
                                configs.insert(key, v);
                            }
                            op => {
                                return Err(ApiError::new(ResponseError::InvalidRequest, format!("Unknown config operation {op}")));
                            }
                        }
                        Ok(())
                    });
                    match applied {
                        Ok(()) => {
                            store_topic_configs(broker, &name, configs, req.validate_only).await
                        }
                        Err(e) => Err(e),
                    }
                }
            },
            RESOURCE_BROKER => Err(static_broker_error()),
            other => Err(ApiError::new(
                ResponseError::InvalidRequest,
                format!("Unsupported resource type {other}"),
            )),
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
