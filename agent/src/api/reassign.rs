//! Moving replicas and leaders on request: AlterPartitionReassignments and
//! ListPartitionReassignments (KIP-455), and ElectLeaders (KIP-460).
//!
//! A reassignment is written to the partition record at once (the new replicas join the
//! replica list and start copying from the leader); the controller completes it when
//! every new replica is in sync, removing the old ones in a new leader epoch
//! (`strata_replication::{reassign, finish_reassignment}`). Nothing switches before the
//! new replicas caught up.

use kafka_protocol::error::ResponseError;
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
    ListPartitionReassignmentsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_replication::PartitionRecord;

use super::errors::ApiError;
use crate::broker::Broker;

/// What a request wants done to one partition record, checked inside the metastore
/// transaction: `Err` refuses with that error and changes nothing.
type Change = Box<dyn Fn(&PartitionRecord) -> Result<PartitionRecord, ApiError> + Send + Sync>;

/// Applies `change` to partition `index` of `topic` in one metastore transaction and
/// brings this agent in line.
async fn update(broker: &Broker, topic: &str, index: i32, change: Change) -> Result<(), ApiError> {
    let Ok(index) = u32::try_from(index) else {
        return Err(ApiError::new(
            ResponseError::UnknownTopicOrPartition,
            "no such partition",
        ));
    };
    let refusal = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = std::sync::Arc::clone(&refusal);
    let after = broker
        .metastore()
        .update_partition(topic, index, move |cur| match change(cur) {
            Ok(next) => {
                *seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Some(next)
            }
            Err(e) => {
                *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                None
            }
        })
        .await?;
    if after.is_none() {
        return Err(ApiError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("{topic}-{index} does not exist"),
        ));
    }
    if let Some(e) = refusal.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    broker.replicas().sync_topic(topic).await?;
    Ok(())
}

pub async fn alter_partition_reassignments(
    broker: &Broker,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let live = broker.membership().live_ids();
    let mut response = AlterPartitionReassignmentsResponse::default();
    for t in req.topics {
        let mut out = ReassignableTopicResponse::default();
        out.name = t.name.clone();
        for p in t.partitions {
            let target: Option<Vec<i32>> = p.replicas.map(|r| r.into_iter().map(|b| b.0).collect());
            let outcome = match target {
                Some(target) => match check_target(&target, &live) {
                    Ok(()) => {
                        let change: Change = Box::new(move |cur| {
                            if cur.replicas == target && cur.adding.is_empty() {
                                return Ok(cur.clone());
                            }
                            strata_replication::reassign(cur, &target).map_err(refused)
                        });
                        update(broker, t.name.0.as_str(), p.partition_index, change).await
                    }
                    Err(e) => Err(e),
                },
                None => {
                    let change: Change = Box::new(|cur| {
                        if cur.adding.is_empty() && cur.removing.is_empty() {
                            Err(ApiError::new(
                                ResponseError::NoReassignmentInProgress,
                                "no reassignment in progress",
                            ))
                        } else {
                            strata_replication::cancel_reassignment(cur).map_err(refused)
                        }
                    });
                    update(broker, t.name.0.as_str(), p.partition_index, change).await
                }
            };
            let mut r = ReassignablePartitionResponse::default();
            r.partition_index = p.partition_index;
            if let Err(e) = outcome {
                r.error_code = e.code();
                r.error_message = Some(StrBytes::from_string(e.message));
            } else {
                tracing::info!(topic = %t.name.0.as_str(), partition = p.partition_index, "reassignment requested");
            }
            out.partitions.push(r);
        }
        response.responses.push(out);
    }
    response
}

fn refused(e: strata_replication::ReassignError) -> ApiError {
    match e {
        strata_replication::ReassignError::NoInSyncReplicaLeft => ApiError::new(
            ResponseError::InvalidReplicaAssignment,
            "every in-sync replica would leave the replica list; wait until a replica that stays is in sync",
        ),
    }
}

fn check_target(target: &[i32], live: &[i32]) -> Result<(), ApiError> {
    let invalid = |m: String| Err(ApiError::new(ResponseError::InvalidReplicaAssignment, m));
    if target.is_empty() {
        return invalid("the target replica list is empty".to_string());
    }
    let mut distinct = target.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != target.len() {
        return invalid(format!("the target replicas {target:?} repeat a broker"));
    }
    if let Some(r) = target.iter().find(|r| !live.contains(r)) {
        return invalid(format!("broker {r} in the target replicas is not alive"));
    }
    Ok(())
}

/// Read from the metastore, not this agent's copy, so that a reassignment the
/// controller just completed is never listed as ongoing.
pub async fn list_partition_reassignments(
    broker: &Broker,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let mut response = ListPartitionReassignmentsResponse::default();
    let records = match broker.metastore().topics().await {
        Ok(records) => records,
        Err(e) => {
            let e = ApiError::from(e);
            response.error_code = e.code();
            response.error_message = Some(StrBytes::from_string(e.message));
            return response;
        }
    };
    let wanted = |topic: &str, index: i32| match &req.topics {
        None => true,
        Some(topics) => topics
            .iter()
            .any(|t| t.name.0.as_str() == topic && t.partition_indexes.contains(&index)),
    };
    let ids = |v: &[i32]| v.iter().copied().map(BrokerId).collect::<Vec<_>>();
    for record in records {
        let mut out = OngoingTopicReassignment::default();
        out.name = kafka_protocol::messages::TopicName(StrBytes::from_string(record.name.clone()));
        for p in &record.partitions {
            let ongoing = !p.adding.is_empty() || !p.removing.is_empty();
            if ongoing && wanted(&record.name, p.index as i32) {
                let mut o = OngoingPartitionReassignment::default();
                o.partition_index = p.index as i32;
                o.replicas = ids(&p.replicas);
                o.adding_replicas = ids(&p.adding);
                o.removing_replicas = ids(&p.removing);
                out.partitions.push(o);
            }
        }
        if !out.partitions.is_empty() {
            response.topics.push(out);
        }
    }
    response
}

/// ElectLeaders: type 0 hands leadership to the preferred replica, type 1 elects any
/// live replica for a partition without a live in-sync one (unclean).
pub async fn elect_leaders(broker: &Broker, req: ElectLeadersRequest) -> ElectLeadersResponse {
    let live = broker.membership().live_agents();
    let unclean = req.election_type == 1;
    let targets: Vec<(String, Vec<i32>)> = match req.topic_partitions {
        Some(tps) => tps
            .into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect(),
        None => broker
            .replicas()
            .topics()
            .iter()
            .map(|t| {
                let all = t.record.partitions.iter().map(|p| p.index as i32).collect();
                (t.record.name.clone(), all)
            })
            .collect(),
    };
    let mut response = ElectLeadersResponse::default();
    for (topic, partitions) in targets {
        let min_insync = broker
            .replicas()
            .topic(&topic)
            .map_or(1, |t| t.config.min_insync_replicas());
        let mut out = ReplicaElectionResult::default();
        out.topic = kafka_protocol::messages::TopicName(StrBytes::from_string(topic.clone()));
        for index in partitions {
            let live = live.clone();
            let change: Change = Box::new(move |cur| {
                let elected = if unclean {
                    strata_replication::elect(cur, &live, true, min_insync)
                } else {
                    strata_replication::prefer(cur, &live)
                };
                match elected {
                    Some(next) => Ok(next),
                    None if !unclean && cur.replicas.first() == Some(&cur.leader) => {
                        Err(ApiError::new(
                            ResponseError::ElectionNotNeeded,
                            "the preferred replica leads",
                        ))
                    }
                    None if unclean && live.holds(cur, cur.leader) => Err(ApiError::new(
                        ResponseError::ElectionNotNeeded,
                        "the partition has a live leader",
                    )),
                    None if unclean => Err(ApiError::new(
                        ResponseError::EligibleLeadersNotAvailable,
                        "no replica is live",
                    )),
                    None => Err(ApiError::new(
                        ResponseError::PreferredLeaderNotAvailable,
                        "the preferred replica is not live and in sync",
                    )),
                }
            });
            let mut r = PartitionResult::default();
            r.partition_id = index;
            if let Err(e) = update(broker, &topic, index, change).await {
                r.error_code = e.code();
                r.error_message = Some(StrBytes::from_string(e.message));
            }
            out.partition_result.push(r);
        }
        response.replica_election_results.push(out);
    }
    response
}
