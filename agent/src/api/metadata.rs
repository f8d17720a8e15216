//! Metadata, including Kafka's topic auto-creation. The topic service decides what the
//! caller sees (DESCRIBE on each topic: the others are left out of a listing, or
//! answered TOPIC_AUTHORIZATION_FAILED where named, and never created) and tells
//! KIP-430's operations.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;
use crate::service::admin::TopicState;

pub async fn metadata(
    broker: &Broker,
    who: &Caller,
    req: MetadataRequest,
    version: i16,
    listener: &str,
) -> MetadataResponse {
    // KIP-430: asked for in v8+ (the cluster's only up to v10; later, DescribeCluster).
    let ask_topics = version >= 8 && req.include_topic_authorized_operations;
    let ask_cluster = (8..=10).contains(&version) && req.include_cluster_authorized_operations;
    let mut response = answer(broker, who, req, version, listener).await;
    let admin = broker.admin();
    if ask_cluster {
        response.cluster_authorized_operations = admin.cluster_operations(who);
    }
    for t in &mut response.topics {
        // A described topic's operations, not an erroneous one's (as Kafka).
        if let Some(name) = &t.name
            && ask_topics
            && t.error_code == 0
        {
            t.topic_authorized_operations = admin.topic_operations(who, name.0.as_str());
        }
    }
    response
}

async fn answer(
    broker: &Broker,
    who: &Caller,
    req: MetadataRequest,
    version: i16,
    listener: &str,
) -> MetadataResponse {
    let mut response = MetadataResponse::default();
    response.cluster_authorized_operations = super::authorized::NOT_ASKED;
    if version >= 1 {
        response.controller_id = BrokerId(broker.membership().controller_id());
    }
    let agents = broker.membership().live();
    let live: Vec<i32> = agents.iter().map(|a| a.node_id).collect();
    // As Kafka: each broker at its address on the listener the request came in on; a
    // broker without that listener is left out.
    response.brokers = agents
        .iter()
        .filter_map(|a| {
            let (host, port) = a.address(listener)?;
            let mut b = MetadataResponseBroker::default();
            b.node_id = BrokerId(a.node_id);
            b.host = StrBytes::from_string(host.to_string());
            b.port = port;
            if version >= 1 {
                b.rack = a.rack.clone().map(StrBytes::from_string);
            }
            Some(b)
        })
        .collect();
    if version >= 2 {
        response.cluster_id = Some(StrBytes::from_string(broker.identity().cluster_id.clone()));
    }

    let all = match &req.topics {
        None => true,
        Some(t) => version == 0 && t.is_empty(),
    };
    let admin = broker.admin();
    if all {
        response.topics = admin
            .visible_topics(who)
            .iter()
            .map(|t| describe(&live, t, version))
            .collect();
        return response;
    }
    let auto_create =
        broker.settings().auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
    for wanted in req.topics.unwrap_or_default() {
        // As Kafka: a non-zero topic id is looked up by id, whatever the name says (the
        // Java client sends the empty string as the name of a topic it names by id).
        let by_id = version >= 10 && !wanted.topic_id.is_nil();
        let topic = match &wanted.name {
            // DESCRIBE, and for auto-creation CREATE: the service decides.
            Some(name) if !by_id => admin
                .described_topic(who, name.0.as_str(), auto_create)
                .await
                .map_err(ApiError::from),
            _ => admin
                .described_topic_by_id(who, wanted.topic_id.as_bytes())
                .map_err(ApiError::from),
        };
        response.topics.push(match topic {
            Ok(t) => describe(&live, &t, version),
            Err(e) => {
                let mut t = MetadataResponseTopic::default();
                t.error_code = e.code();
                t.name = wanted.name.clone();
                if version >= 10 {
                    t.topic_id = wanted.topic_id;
                }
                t.topic_authorized_operations = i32::MIN;
                t
            }
        });
    }
    response
}

/// `live`: the node ids of the live agents.
fn describe(live: &[i32], topic: &TopicState, version: i16) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.record.name.clone())));
    if version >= 10 {
        t.topic_id = Uuid::from_bytes(topic.record.id);
    }
    t.topic_authorized_operations = i32::MIN;
    t.partitions = topic
        .record
        .partitions
        .iter()
        .map(|p| {
            let mut m = MetadataResponsePartition::default();
            m.partition_index = p.index as i32;
            if live.contains(&p.leader) {
                m.leader_id = BrokerId(p.leader);
            } else {
                // Its leader is down (or there is none): until the controller elects
                // another, clients wait and ask again.
                m.error_code = ResponseError::LeaderNotAvailable.code();
                m.leader_id = BrokerId(-1);
            }
            if version >= 7 {
                m.leader_epoch = p.leader_epoch;
            }
            m.replica_nodes = p.replicas.iter().copied().map(BrokerId).collect();
            m.isr_nodes = p.isr.iter().copied().map(BrokerId).collect();
            m
        })
        .collect();
    t
}
