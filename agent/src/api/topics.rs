//! CreateTopics, DeleteTopics and CreatePartitions: requests to [`crate::service::admin`]
//! calls and back. The service authorizes and audits each topic.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;
use crate::service::admin::NewTopicSpec;

pub async fn create_topics(
    broker: &Broker,
    who: &Caller,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut response = CreateTopicsResponse::default();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut result = CreatableTopicResult::default();
        result.name = t.name.clone();
        let mut configs = BTreeMap::new();
        let mut duplicate = None;
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    if configs.insert(c.name.to_string(), v.to_string()).is_some() {
                        duplicate = Some(c.name.to_string());
                    }
                }
                None => {
                    duplicate.get_or_insert_with(|| format!("{} has a null value", c.name));
                }
            }
        }
        let spec = NewTopicSpec {
            name,
            num_partitions: t.num_partitions,
            replication_factor: t.replication_factor,
            assignments: t
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
            configs,
        };
        let outcome = match duplicate {
            Some(d) => Err(ApiError::new(
                ResponseError::InvalidConfig,
                format!("Invalid config: {d}"),
            )),
            None => broker
                .admin()
                .create_topic(who, spec, req.validate_only)
                .await
                .map_err(ApiError::from),
        };
        match outcome {
            Ok(created) => {
                if version >= 5 {
                    result.num_partitions = created.num_partitions;
                    result.replication_factor = created.replication_factor;
                }
                if let Some(state) = created.state.as_ref().filter(|_| version >= 7) {
                    result.topic_id = Uuid::from_bytes(state.record.id);
                }
                match created.config.filter(|_| version >= 5) {
                    // Shown only to who may DESCRIBE_CONFIGS the topic.
                    None if version >= 5 => {
                        result.topic_config_error_code =
                            ResponseError::TopicAuthorizationFailed.code();
                    }
                    None => {}
                    Some(config) => {
                        result.configs = Some(
                            config
                                .entries()
                                .map(|(name, value, source)| {
                                    let mut c = CreatableTopicConfigs::default();
                                    c.name = StrBytes::from_static_str(name);
                                    c.value = Some(StrBytes::from_string(value.to_string()));
                                    c.config_source = source as i8;
                                    c
                                })
                                .collect(),
                        );
                    }
                }
            }
            Err(e) => {
                // Clients create topics that may exist as a matter of course.
                if e.code == ResponseError::TopicAlreadyExists {
                    tracing::debug!(topic = %result.name.0.as_str(), error = %e.code, "topic exists");
                } else {
                    tracing::info!(topic = %result.name.0.as_str(), error = %e.code, reason = %e.message, "topic creation refused");
                }
                result.error_code = e.code();
                result.error_message = Some(StrBytes::from_string(e.message));
            }
        }
        response.topics.push(result);
    }
    response
}

pub async fn delete_topics(
    broker: &Broker,
    who: &Caller,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let wanted: Vec<(Option<String>, Uuid)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let mut response = DeleteTopicsResponse::default();
    for (name, id) in wanted {
        let mut result = DeletableTopicResult::default();
        result.name = name.clone().map(|n| TopicName(StrBytes::from_string(n)));
        result.topic_id = id;
        let outcome = broker
            .admin()
            .delete_topic(who, name.as_deref(), id.as_bytes())
            .await
            .map(|(name, topic_id)| {
                result.name = Some(TopicName(StrBytes::from_string(name)));
                if version >= 6 {
                    result.topic_id = Uuid::from_bytes(topic_id);
                }
            })
            .map_err(ApiError::from);
        if let Err(e) = outcome {
            tracing::info!(topic = ?name, error = %e.code, reason = %e.message, "topic deletion refused");
            result.error_code = e.code();
            if version >= 5 {
                result.error_message = Some(StrBytes::from_string(e.message));
            }
        }
        response.responses.push(result);
    }
    response
}

pub async fn create_partitions(
    broker: &Broker,
    who: &Caller,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut response = CreatePartitionsResponse::default();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut result = CreatePartitionsTopicResult::default();
        result.name = t.name.clone();
        let assignments: Option<Vec<Vec<i32>>> = t.assignments.as_ref().map(|a| {
            a.iter()
                .map(|x| x.broker_ids.iter().map(|b| b.0).collect())
                .collect()
        });
        let outcome = broker
            .admin()
            .create_partitions(who, &name, t.count, assignments, req.validate_only)
            .await
            .map_err(ApiError::from);
        if let Err(e) = outcome {
            tracing::info!(topic = %name, count = t.count, error = %e.code, reason = %e.message, "partition creation refused");
            result.error_code = e.code();
            result.error_message = Some(StrBytes::from_string(e.message));
        }
        response.results.push(result);
    }
    response
}
