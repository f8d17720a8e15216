//! Topics named by id (KIP-516): Fetch v13+ and Produce v13 name their topics by id
//! only. Before anything else reads such a request, each id is given its topic's name,
//! so the services, quotas, metrics and handlers work on names whatever the version; the
//! answers carry both, and each version's encoding writes the one it has. A topic whose
//! id no topic has (deleted, or deleted and created again under its name) is taken out
//! of the request and answered UNKNOWN_TOPIC_ID, as Kafka does.
//!
//! Fetch v15 moved a follower's id into `replica_state`; it is copied back to
//! `replica_id` here, so the rest of the agent reads one field.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
use kafka_protocol::messages::produce_response::TopicProduceResponse;
use kafka_protocol::messages::{RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::broker::Broker;
use crate::error_map::ApiError;

/// The topics a request named by ids that no topic has, with the partitions it asked
/// for: they are answered UNKNOWN_TOPIC_ID.
pub struct Unknown(Vec<(Uuid, Vec<i32>)>);

/// Names the topics of `request` (see the module docs); the unknown ones, if any.
pub fn resolve(broker: &Broker, request: &mut RequestKind, version: i16) -> Option<Unknown> {
    let mut unknown = Vec::new();
    match request {
        RequestKind::Fetch(r) if version >= 13 => {
            if version >= 15 {
                r.replica_id = r.replica_state.replica_id;
            }
            r.topics.retain_mut(|t| match name_of(broker, t.topic_id) {
                Some(name) => {
                    t.topic = name;
                    true
                }
                None => {
                    unknown.push((
                        t.topic_id,
                        t.partitions.iter().map(|p| p.partition).collect(),
                    ));
                    false
                }
            });
            // A forgotten topic that no longer exists keeps its empty name: sessions
            // match forgotten partitions by id at these versions.
            for t in &mut r.forgotten_topics_data {
                if let Some(name) = name_of(broker, t.topic_id) {
                    t.topic = name;
                }
            }
        }
        RequestKind::Produce(r) if version >= 13 => {
            r.topic_data
                .retain_mut(|t| match name_of(broker, t.topic_id) {
                    Some(name) => {
                        t.name = name;
                        true
                    }
                    None => {
                        unknown.push((
                            t.topic_id,
                            t.partition_data.iter().map(|p| p.index).collect(),
                        ));
                        false
                    }
                });
        }
        _ => {}
    }
    (!unknown.is_empty()).then_some(Unknown(unknown))
}

/// The name of the topic whose id is `id`, if one has it now.
fn name_of(broker: &Broker, id: Uuid) -> Option<TopicName> {
    let topic = broker.admin().topic_by_id(id.as_bytes())?;
    Some(TopicName(StrBytes::from_string(topic.record.name.clone())))
}

impl Unknown {
    /// Adds the unknown topics to `response`, each partition with UNKNOWN_TOPIC_ID.
    pub fn answer(self, response: &mut ResponseKind, version: i16) {
        let code = ResponseError::UnknownTopicId.code();
        match response {
            ResponseKind::Fetch(r) => {
                for (id, partitions) in self.0 {
                    let mut t = FetchableTopicResponse::default();
                    t.topic_id = id;
                    t.partitions = partitions
                        .into_iter()
                        .map(|index| super::fetch::unread(index, code))
                        .collect();
                    r.responses.push(t);
                }
            }
            ResponseKind::Produce(r) => {
                for (id, partitions) in self.0 {
                    let mut t = TopicProduceResponse::default();
                    t.topic_id = id;
                    t.partition_responses = partitions
                        .into_iter()
                        .map(|index| {
                            let why = ApiError::new(
                                ResponseError::UnknownTopicId,
                                "no topic has this topic id",
                            );
                            super::produce::failed(index, why, version)
                        })
                        .collect();
                    r.responses.push(t);
                }
            }
            _ => {}
        }
    }
}
