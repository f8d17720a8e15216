//! AlterPartitionReassignments, ListPartitionReassignments (KIP-455) and ElectLeaders
//! (KIP-460): requests to [`crate::service::placement`] calls and back. The service
//! authorizes and audits.

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub async fn alter_partition_reassignments(
    broker: &Broker,
    who: &Caller,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut response = AlterPartitionReassignmentsResponse::default();
    for t in req.topics {
        let mut out = ReassignableTopicResponse::default();
        out.name = t.name.clone();
        for p in t.partitions {
            let target = p.replicas.map(|r| r.into_iter().map(|b| b.0).collect());
            let outcome = broker
                .placement()
                .reassign(who, t.name.0.as_str(), p.partition_index, target)
                .await;
            let mut r = ReassignablePartitionResponse::default();
            r.partition_index = p.partition_index;
            if let Err(e) = outcome {
                let e = ApiError::from(&e);
                r.error_code = e.code();
                r.error_message = Some(s(e.message));
            }
            out.partitions.push(r);
        }
        response.responses.push(out);
    }
    // As Kafka: a caller refused on the cluster is told so at the top as well.
    let denied = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .find(|p| {
            p.error_code == kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code()
        });
    if let Some(p) = denied {
        response.error_code = p.error_code;
        response.error_message = p.error_message.clone();
    }
    response
}

pub async fn list_partition_reassignments(
    broker: &Broker,
    who: &Caller,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let mut response = ListPartitionReassignmentsResponse::default();
    let wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect::<Vec<_>>();
    match broker.placement().reassignments(who, &wanted).await {
        Ok(topics) => {
            response.topics = topics
                .into_iter()
                .map(|(topic, ongoing)| {
                    let mut out = OngoingTopicReassignment::default();
                    out.name = TopicName(s(topic));
                    out.partitions = ongoing
                        .into_iter()
                        .map(|o| {
                            let mut p = OngoingPartitionReassignment::default();
                            p.partition_index = o.partition;
                            p.replicas = ids(o.replicas);
                            p.adding_replicas = ids(o.adding);
                            p.removing_replicas = ids(o.removing);
                            p
                        })
                        .collect();
                    out
                })
                .collect();
        }
        Err(e) => {
            let e = ApiError::from(&e);
            response.error_code = e.code();
            response.error_message = Some(s(e.message));
        }
    }
    response
}

pub async fn elect_leaders(
    broker: &Broker,
    who: &Caller,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    let unclean = req.election_type == 1;
    let targets: Option<Vec<(String, Vec<i32>)>> = req.topic_partitions.map(|tps| {
        tps.into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect()
    });
    let asked = targets.clone();
    let mut response = ElectLeadersResponse::default();
    let result = |topic: String, partitions: Vec<(i32, Option<ApiError>)>| {
        let mut out = ReplicaElectionResult::default();
        out.topic = TopicName(s(topic));
        out.partition_result = partitions
            .into_iter()
            .map(|(index, e)| {
                let mut r = PartitionResult::default();
                r.partition_id = index;
                if let Some(e) = e {
                    r.error_code = e.code();
                    r.error_message = Some(s(e.message));
                }
                r
            })
            .collect();
        out
    };
    match broker.placement().elect(who, unclean, targets).await {
        Ok(outcomes) => {
            response.replica_election_results = outcomes
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(i, o)| (i, o.err().map(|e| ApiError::from(&e))))
                        .collect();
                    result(topic, partitions)
                })
                .collect();
        }
        Err(e) => {
            let e = ApiError::from(&e);
            response.error_code = e.code();
            // v0 has no top-level error: each partition named carries it.
            response.replica_election_results = asked
                .unwrap_or_default()
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|i| (i, Some(e.clone())))
                        .collect();
                    result(topic, partitions)
                })
                .collect();
        }
    }
    response
}
