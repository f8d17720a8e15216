//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: requests to
//! [`crate::service::configs`] calls and back, resource by resource. The service
//! authorizes each resource and audits each change.

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

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;
use crate::service::configs::{Op, Resource};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// The resource a request names, or INVALID_REQUEST for a type strata has no configs
/// of.
fn resource(resource_type: i8, name: &StrBytes) -> Result<Resource, ApiError> {
    let name = name.to_string();
    match resource_type {
        RESOURCE_TOPIC => Ok(Resource::Topic(name)),
        RESOURCE_BROKER => Ok(Resource::Broker(name)),
        RESOURCE_BROKER_LOGGER => Ok(Resource::BrokerLogger(name)),
        other => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("Unsupported resource type {other}"),
        )),
    }
}

pub fn describe_configs(
    broker: &Broker,
    who: &Caller,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let mut response = DescribeConfigsResponse::default();
    for asked in req.resources {
        let mut result = DescribeConfigsResult::default();
        result.resource_type = asked.resource_type;
        result.resource_name = asked.resource_name.clone();
        // Null or empty: every config (as Kafka does).
        let keys: Option<Vec<String>> = asked
            .configuration_keys
            .as_ref()
            .filter(|k| !k.is_empty())
            .map(|k| k.iter().map(|k| k.to_string()).collect());
        let described = resource(asked.resource_type, &asked.resource_name).and_then(|r| {
            broker
                .configs()
                .describe(who, &r, keys.as_deref())
                .map_err(ApiError::from)
        });
        match described {
            Ok(entries) => {
                result.configs = entries
                    .into_iter()
                    .map(|e| {
                        let mut c = DescribeConfigsResourceResult::default();
                        c.value = Some(s(e.value));
                        c.read_only = e.read_only;
                        c.config_source = e.source as i8;
                        if version >= 3 {
                            c.config_type = e.kind as i8;
                            if req.include_documentation && !e.doc.is_empty() {
                                c.documentation = Some(StrBytes::from_static_str(e.doc));
                            }
                        }
                        if req.include_synonyms {
                            c.synonyms = e
                                .synonyms
                                .into_iter()
                                .map(|(name, value, source)| {
                                    let mut syn = DescribeConfigsSynonym::default();
                                    syn.name = s(name);
                                    syn.value = Some(s(value));
                                    syn.source = source as i8;
                                    syn
                                })
                                .collect();
                        }
                        c.name = s(e.name);
                        c
                    })
                    .collect();
            }
            Err(e) => {
                result.error_code = e.code();
                result.error_message = Some(s(e.message));
            }
        }
        response.results.push(result);
    }
    response
}

pub async fn alter_configs(
    broker: &Broker,
    who: &Caller,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let mut response = AlterConfigsResponse::default();
    for asked in req.resources {
        // AlterConfigs replaces the whole set; a null value leaves the key out.
        let configs: BTreeMap<String, String> = asked
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.to_string(), v.to_string()))
            })
            .collect();
        let outcome = match resource(asked.resource_type, &asked.resource_name) {
            Ok(r) => broker
                .configs()
                .replace(who, &r, configs, req.validate_only)
                .await
                .map_err(ApiError::from),
            Err(e) => Err(e),
        };
        let mut r = alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = asked.resource_type;
        r.resource_name = asked.resource_name;
        if let Err(e) = outcome {
            r.error_code = e.code();
            r.error_message = Some(s(e.message));
        }
        response.responses.push(r);
    }
    response
}

/// One resource's changes in the service's terms; an unknown operation is
/// INVALID_REQUEST, a SET without a value INVALID_CONFIG (as Kafka answers them).
fn ops(
    configs: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
) -> Result<Vec<(String, Op)>, ApiError> {
    if let Some(c) = configs
        .iter()
        .find(|c| !(OP_SET..=OP_SUBTRACT).contains(&c.config_operation))
    {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("Unknown config operation {}", c.config_operation),
        ));
    }
    configs
        .iter()
        .map(|c| {
            let name = c.name.to_string();
            let value = c.value.as_ref().map(|v| v.to_string());
            let op = match (c.config_operation, value) {
                (OP_SET, Some(v)) => Op::Set(v),
                (OP_SET, None) => {
                    return Err(ApiError::new(
                        ResponseError::InvalidConfig,
                        format!("Null value not supported for {name}"),
                    ));
                }
                (OP_DELETE, _) => Op::Delete,
                (OP_APPEND, v) => Op::Append(v.unwrap_or_default()),
                (_, v) => Op::Subtract(v.unwrap_or_default()),
            };
            Ok((name, op))
        })
        .collect()
}

pub async fn incremental_alter_configs(
    broker: &Broker,
    who: &Caller,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut response = IncrementalAlterConfigsResponse::default();
    for asked in req.resources {
        let outcome = match resource(asked.resource_type, &asked.resource_name)
            .and_then(|r| Ok((r, ops(&asked.configs)?)))
        {
            Ok((r, ops)) => broker
                .configs()
                .alter(who, &r, ops, req.validate_only)
                .await
                .map(drop)
                .map_err(ApiError::from),
            Err(e) => Err(e),
        };
        let mut r = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = asked.resource_type;
        r.resource_name = asked.resource_name;
        if let Err(e) = outcome {
            r.error_code = e.code();
            r.error_message = Some(s(e.message));
        }
        response.responses.push(r);
    }
    response
}
