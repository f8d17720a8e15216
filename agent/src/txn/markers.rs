//! Writing a transaction's markers to its partitions (Kafka's WriteTxnMarkers, sent to
//! each partition's leader; a leader on this agent is written directly). A marker is
//! written with the record's producer epoch and coordinator epoch, and counts once it
//! is committed, as an acks=all write does. Failures are retried (a new leader, a
//! follower catching up) until the marker is in, the topic is gone, or another
//! coordinator has taken the transaction over.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use strata_log::txn::{ControlRecord, Marker};
use strata_metastore::{Metastore, TopicPartition, TxnRecord, TxnState};

use crate::commit::Commit;
use crate::error::Error;
use crate::membership::Membership;
use crate::peer::Peer;
use crate::replicas::ReplicaManager;

/// Pause between rounds of retries.
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// How long the markers of one transaction are tried before the completion gives up
/// (the coordinator's next pass starts it again).
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
/// Responses to WriteTxnMarkers are small.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// What became of one partition's marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Written,
    /// Try again later.
    Retry,
    /// Another coordinator has taken the transaction over: stop.
    Fenced,
}

/// The same, for a marker written here.
fn outcome_of(e: &Error) -> Outcome {
    use crate::partition::PartitionError as P;
    match e {
        Error::Partition(P::Log(strata_log::Error::InvalidProducerEpoch { .. })) => {
            Outcome::Written
        }
        Error::Partition(P::Log(strata_log::Error::CoordinatorFenced { .. })) => Outcome::Fenced,
        _ => Outcome::Retry,
    }
}

fn classify(code: i16) -> Outcome {
    match ResponseError::try_from_code(code) {
        None => Outcome::Written,
        // A newer epoch already ended the producer's transaction here.
        Some(ResponseError::InvalidProducerEpoch) => Outcome::Written,
        Some(ResponseError::TransactionCoordinatorFenced) => Outcome::Fenced,
        Some(_) => Outcome::Retry,
    }
}

/// The failpoint `STRATA_FAILPOINT_LOSE_MARKER=<topic>:<partition>`: that partition's
/// marker is never written, yet counted as written (a hanging transaction, for the
/// drill in `docs/transactions.md`).
fn lost_by_failpoint(tp: &TopicPartition) -> bool {
    std::env::var("STRATA_FAILPOINT_LOSE_MARKER").is_ok_and(|v| v == format!("{}:{}", tp.0, tp.1))
}

fn control(record: &TxnRecord) -> ControlRecord {
    ControlRecord {
        marker: if record.state == TxnState::PrepareCommit {
            Marker::Commit
        } else {
            Marker::Abort
        },
        coordinator_epoch: record.coordinator_epoch,
    }
}

/// Writes every marker of `record` (a prepared transaction). `false` if it gave up
/// (fenced, or out of time); the transaction then stays prepared for the next try.
pub async fn write_all(
    replicas: &std::sync::Arc<ReplicaManager>,
    membership: &Membership,
    metastore: &Metastore,
    record: &TxnRecord,
) -> bool {
    let control = control(record);
    let mut pending: Vec<TopicPartition> = record
        .partitions
        .iter()
        .filter(|tp| {
            let lost = lost_by_failpoint(tp);
            if lost {
                tracing::warn!(topic = %tp.0, partition = tp.1, "failpoint: this partition's transaction marker is lost");
            }
            !lost
        })
        .cloned()
        .collect();
    let started = membership.clock().monotonic();
    while !pending.is_empty() {
        let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        let mut retry = Vec::new();
        for tp in pending {
            match replicas.topic(&tp.0) {
                Some(topic) => match topic.record.partitions.get(tp.1 as usize) {
                    Some(p) if p.leader >= 0 => by_leader.entry(p.leader).or_default().push(tp),
                    Some(_) => retry.push(tp),
                    // The partition is gone (the topic was recreated smaller).
                    None => {}
                },
                None => {
                    // Deleted, or not known here yet: ask the metastore which.
                    match metastore.topic(&tp.0).await {
                        Ok(None) => {}
                        _ => retry.push(tp),
                    }
                }
            }
        }
        let local = by_leader.remove(&membership.node_id()).unwrap_or_default();
        let remote = by_leader
            .into_iter()
            .map(|(leader, partitions)| async move {
                let outcomes = write_remote(membership, leader, &partitions, record, control).await;
                (partitions, outcomes)
            });
        let local = async {
            let outcomes = write_local_all(replicas, &local, record, control).await;
            (local.clone(), outcomes)
        };
        let (local, remote) = futures::join!(local, futures::future::join_all(remote));
        for (partitions, outcomes) in std::iter::once(local).chain(remote) {
            for (tp, outcome) in partitions.into_iter().zip(outcomes) {
                match outcome {
                    Outcome::Written => {}
                    Outcome::Retry => retry.push(tp),
                    Outcome::Fenced => return false,
                }
            }
        }
        pending = retry;
        if pending.is_empty() {
            break;
        }
        if membership.clock().monotonic().saturating_sub(started) > GIVE_UP_AFTER {
            tracing::warn!(
                producer_id = record.producer_id,
                partitions = pending.len(),
                "transaction markers not written in time; the coordinator tries again later"
            );
            return false;
        }
        membership.clock().sleep(RETRY_AFTER).await;
    }
    true
}

/// Appends the markers to the partitions led here, then waits for all of them to be
/// committed (their fsyncs and replication overlap).
async fn write_local_all(
    replicas: &std::sync::Arc<ReplicaManager>,
    partitions: &[TopicPartition],
    record: &TxnRecord,
    control: ControlRecord,
) -> Vec<Outcome> {
    let deadline = crate::clock::instant() + crate::peer::RESPONSE_TIMEOUT;
    let waits = partitions.iter().map(|tp| {
        let appended = append_marker(
            replicas,
            &tp.0,
            tp.1,
            record.producer_id,
            record.producer_epoch,
            control,
        );
        async move {
            let outcome = match appended {
                Ok((_, commit)) => commit.wait(deadline).await.map(|_| ()),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => Outcome::Written,
                Err(e) => {
                    tracing::debug!(topic = %tp.0, partition = tp.1, error = %e, "marker not written yet");
                    outcome_of(&e)
                }
            }
        }
    });
    futures::future::join_all(waits).await
}

/// Writes one marker to a partition this agent leads and waits until it is committed.
pub async fn write_local(
    replicas: &std::sync::Arc<ReplicaManager>,
    topic: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
    control: ControlRecord,
) -> Result<i64, Error> {
    let (offset, commit) = append_marker(
        replicas,
        topic,
        partition,
        producer_id,
        producer_epoch,
        control,
    )?;
    commit
        .wait(crate::clock::instant() + crate::peer::RESPONSE_TIMEOUT)
        .await?;
    Ok(offset)
}

/// Sends one WriteTxnMarkers request to `leader` for `partitions`.
async fn write_remote(
    membership: &Membership,
    leader: i32,
    partitions: &[TopicPartition],
    record: &TxnRecord,
    control: ControlRecord,
) -> Vec<Outcome> {
    let retry_all = || vec![Outcome::Retry; partitions.len()];
    let Some(address) = membership.address_of(leader) else {
        return retry_all();
    };
    let mut peer = match Peer::connect(
        &address,
        membership.node_id(),
        MAX_RESPONSE_BYTES,
        membership.peer_access(),
    )
    .await
    {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(leader, error = %e, "cannot reach a partition leader for markers");
            return retry_all();
        }
    };
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, p) in partitions {
        topics.entry(topic.as_str()).or_default().push(*p);
    }
    let mut marker = WritableTxnMarker::default();
    marker.producer_id = ProducerId(record.producer_id);
    marker.producer_epoch = record.producer_epoch;
    marker.transaction_result = control.marker == Marker::Commit;
    marker.coordinator_epoch = control.coordinator_epoch;
    marker.topics = topics
        .iter()
        .map(|(name, indexes)| {
            let mut t = WritableTxnMarkerTopic::default();
            t.name = TopicName(StrBytes::from_string(name.to_string()));
            t.partition_indexes = indexes.clone();
            t
        })
        .collect();
    let mut request = WriteTxnMarkersRequest::default();
    request.markers = vec![marker];
    let response = match peer.send(1, &request).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(leader, error = %e, "WriteTxnMarkers failed");
            return retry_all();
        }
    };
    let mut codes: BTreeMap<(String, i32), i16> = BTreeMap::new();
    for m in response.markers {
        for t in m.topics {
            for p in t.partitions {
                codes.insert((t.name.0.to_string(), p.partition_index), p.error_code);
            }
        }
    }
    partitions
        .iter()
        .map(|tp| codes.get(tp).map_or(Outcome::Retry, |&c| classify(c)))
        .collect()
}

/// Appends, as leader, a transaction marker (WriteTxnMarkers, or the coordinator's own
/// agent): its offset, and the commit to wait for (markers are written as acks=all writes
/// are). No caller is asked: only the transaction coordinator writes markers.
fn append_marker(
    replicas: &ReplicaManager,
    topic: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
    control: strata_log::txn::ControlRecord,
) -> Result<(i64, Commit), Error> {
    let state = replicas.topic(topic);
    let replica = crate::replicas::TopicState::served_in(state.as_ref(), topic, partition)?;
    if !replicas.membership().holds_lease() {
        return Err(Error::LeaseLapsed);
    }
    let min_insync = state.as_ref().map_or(1, |t| t.config.min_insync_replicas());
    let now_ms = replicas.membership().clock().wall_ms();
    let (offset, epoch) =
        replica.append_marker(producer_id, producer_epoch, control, now_ms, min_insync)?;
    Ok((
        offset,
        Commit::new(
            std::sync::Arc::clone(replica),
            offset + 1,
            epoch,
            min_insync,
        ),
    ))
}
