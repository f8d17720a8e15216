//! The follower's side of replication: copying batches from the leader.
//!
//! Transport (`docs/decisions/0003-replication.md`): a follower pulls from its leader
//! with ordinary Kafka requests on the leader's Kafka listener, as Kafka's own followers
//! do. Before it copies anything in a new leader epoch it asks OffsetForLeaderEpoch for
//! its newest epoch and cuts off any suffix the leader does not have (KIP-279); then it
//! sends Fetch with its node id as `replica_id`, the leader epoch as
//! `current_leader_epoch`, and its log end as the fetch offset, which tells the leader
//! how far its copy reaches. A leader of another epoch answers FENCED_LEADER_EPOCH or
//! UNKNOWN_LEADER_EPOCH, so no message crosses an epoch boundary unnoticed.
//!
//! One fetcher task per followed partition, each with its own connection: simple, and
//! enough for the partition counts one agent leads today (Kafka groups partitions per
//! leader into shared fetch sessions; that is a later optimisation).
//!
//! A replica not in the ISR (new, on a disk that came back empty, or far behind) copies
//! what the archive holds from object storage first and only the rest from its leader,
//! at most `replica_rebuild_max_bytes_per_second` per agent (`rebuild.rs`).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::membership::Membership;
use crate::partition::{Partition, PartitionError};
use crate::peer::Peer;
use crate::rebuild::{ArchiveStep, Rebuilds};
use crate::tasks::Stopped;
use strata_replication::{FetchAnswer, Follower, Request as CycleRequest, Step};

/// How long a follower's fetch waits at the leader for new batches.
const FETCH_MAX_WAIT_MS: i32 = 500;
/// Bytes per fetch.
const FETCH_MAX_BYTES: i32 = 8 * 1024 * 1024;
/// Pause before trying again after an error or a refusal.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// Why a fetcher stopped copying for a while.
enum Pause {
    /// Our role changed: the task ends.
    Stopped,
    /// Try again (reconnecting, and truncating anew).
    Retry(String),
}

/// Copies `partition` from `leader` in `epoch` until `stop` (a new epoch, shutdown).
/// `max_record_bytes` bounds what one response may carry (the largest batch allowed).
/// The cycle (truncate, fetch, start over) is [`Follower`]'s; this task carries its
/// requests to the leader and its decisions to the log.
pub async fn follow(
    membership: Arc<Membership>,
    partition: Arc<Partition>,
    (leader, epoch): (i32, i32),
    max_record_bytes: usize,
    rebuilds: Arc<Rebuilds>,
    stop: CancellationToken,
) -> Stopped {
    tracing::info!(partition = %partition.name(), leader, epoch, "following");
    let mut cycle = Follower::new(leader, epoch);
    let mut rebuild = RebuildState::default();
    loop {
        let outcome = tokio::select! {
            o = follow_once(&membership, &partition, &mut cycle, max_record_bytes, &rebuilds, &mut rebuild) => o,
            _ = stop.cancelled() => return Stopped::Done("no longer following this leader"),
        };
        match outcome {
            Pause::Stopped => return Stopped::Done("no longer following this leader"),
            Pause::Retry(why) => {
                cycle.restart();
                tracing::debug!(partition = %partition.name(), leader, epoch, reason = %why, "fetcher retrying");
            }
        }
        tokio::select! {
            _ = crate::clock::pause(RETRY_AFTER) => {}
            _ = stop.cancelled() => return Stopped::Done("no longer following this leader"),
        }
    }
}

/// What a fetcher knows for copying from the archive while not in sync.
#[derive(Default)]
struct RebuildState {
    /// The leader's local log start, as its last fetch answer said.
    leader_log_start: Option<i64>,
    /// When the partition's manifest was last read.
    manifest_read: Option<tokio::time::Instant>,
    /// The archive failed: fetch from the leader until the connection starts over.
    archive_failed: bool,
}

/// Followers failing to authenticate are reported at most once a second.
static AUTHENTICATION_FAILURES: crate::throttle::Throttle = crate::throttle::Throttle::per_second();

/// One connection's worth of the cycle: returns when the connection or the leader
/// fails, or the role changed.
async fn follow_once(
    membership: &Membership,
    partition: &Arc<Partition>,
    cycle: &mut Follower,
    max_record_bytes: usize,
    rebuilds: &Rebuilds,
    rebuild: &mut RebuildState,
) -> Pause {
    rebuild.archive_failed = false;
    let (leader, epoch) = (cycle.leader, cycle.epoch);
    let node_id = membership.node_id();
    let Some(address) = membership.address_of(leader) else {
        return Pause::Retry(format!("leader {leader} is not live"));
    };
    let max_response = max_record_bytes.max(FETCH_MAX_BYTES as usize);
    let mut peer = match Peer::connect(&address, node_id, max_response, membership.peer_access())
        .await
    {
        Ok(p) => p,
        Err(e) if e.is::<crate::peer::AuthenticationFailed>() => {
            if let Some(left_out) = AUTHENTICATION_FAILURES.allow() {
                tracing::warn!(partition = %partition.name(), leader, error = %e, left_out, "a follower cannot authenticate to its leader; it does not replicate");
            }
            return Pause::Retry(format!("{e:#}"));
        }
        Err(e) => return Pause::Retry(format!("cannot connect to {address}: {e:#}")),
    };
    loop {
        if partition.is_offline() {
            return Pause::Retry("the local log is offline after a failed fsync".to_string());
        }
        // The epoch history is only needed until the log is cut to the leader's.
        let (latest, end) = if cycle.truncated() {
            (None, partition.log_end_offset())
        } else {
            let (history, _, end) = partition.epoch_history();
            (history.latest(), end)
        };
        match cycle.next_request(latest, end) {
            CycleRequest::EpochQuery { latest } => {
                let (history, start, end) = partition.epoch_history();
                let answer =
                    match leader_epoch_end(&mut peer, node_id, partition, epoch, latest).await {
                        Ok(answer) => answer,
                        Err(pause) => return pause,
                    };
                let cut = cycle.on_epoch_answer(&history, start, end, answer);
                if cut.to < end {
                    tracing::warn!(partition = %partition.name(), epoch, from = cut.to, to = end, "cutting off a suffix the leader does not have");
                    if let Err(e) = partition.truncate(epoch, cut.to, now_ms()).await {
                        return stopped_or_retry(e);
                    }
                }
            }
            CycleRequest::Fetch { offset } => {
                // A replica that lost its lease (paused, cut off) fetches nothing: its
                // node id may belong to another disk by now.
                if !membership.holds_lease() {
                    return Pause::Retry("this agent does not hold its lease".to_string());
                }
                let catching_up = !partition.in_isr();
                if catching_up
                    && !rebuild.archive_failed
                    && let Some(leader_log_start) = rebuild.leader_log_start
                {
                    match rebuilds
                        .from_archive(
                            partition,
                            epoch,
                            leader_log_start,
                            &mut rebuild.manifest_read,
                        )
                        .await
                    {
                        Ok(ArchiveStep::Copied { .. }) => continue,
                        Ok(ArchiveStep::Leader) => {}
                        Err(e @ PartitionError::NotLeader(_)) => return stopped_or_retry(e),
                        Err(e) => {
                            tracing::warn!(partition = %partition.name(), error = %e, "cannot copy from the archive; copying from the leader");
                            rebuild.archive_failed = true;
                        }
                    }
                }
                // Until the leader's local log start is known, a replica catching up
                // asks for one batch only: the archive may have the rest.
                let max_bytes = if catching_up && rebuild.leader_log_start.is_none() {
                    1
                } else {
                    FETCH_MAX_BYTES
                };
                let request = fetch_request(node_id, partition, epoch, offset, max_bytes);
                let response = match peer.send(12, &request).await {
                    Ok(r) => r,
                    Err(e) => return Pause::Retry(format!("fetch failed: {e:#}")),
                };
                if response.error_code != 0 {
                    return Pause::Retry(format!("fetch refused: error {}", response.error_code));
                }
                let Some(data) = response
                    .responses
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .find(|p| p.partition_index == partition.index)
                else {
                    return Pause::Retry("fetch response without our partition".to_string());
                };
                if data.log_start_offset >= 0 {
                    rebuild.leader_log_start = Some(data.log_start_offset);
                }
                let answer = match ResponseError::try_from_code(data.error_code) {
                    None => FetchAnswer::Batches {
                        high_watermark: data.high_watermark,
                    },
                    Some(ResponseError::OffsetOutOfRange) => FetchAnswer::OutOfRange {
                        log_start: data.log_start_offset,
                    },
                    Some(e) => return Pause::Retry(format!("fetch refused: {e:?}")),
                };
                let done = match cycle.on_fetch_answer(answer, offset) {
                    Step::Append { high_watermark } => {
                        let records = data.records.unwrap_or_default();
                        let appended =
                            partition.append_replicated(epoch, &records, high_watermark, now_ms());
                        if catching_up && appended.is_ok() {
                            partition.note_leader_high_watermark(high_watermark.max(offset));
                            rebuilds.charge(partition, "leader", records.len()).await;
                        }
                        appended
                    }
                    Step::ResetTo(log_start) => {
                        tracing::warn!(partition = %partition.name(), log_end = offset, leader_log_start = log_start, "behind the leader's log start; starting over there");
                        partition.reset_to(epoch, log_start, now_ms()).await
                    }
                    Step::Retry => {
                        return Pause::Retry("fetch refused: offset out of range".to_string());
                    }
                };
                if let Err(e) = done {
                    return stopped_or_retry(e);
                }
            }
        }
    }
}

fn stopped_or_retry(e: PartitionError) -> Pause {
    match e {
        PartitionError::NotLeader(_) => Pause::Stopped,
        e => Pause::Retry(e.to_string()),
    }
}

fn fetch_request(
    node_id: i32,
    partition: &Partition,
    epoch: i32,
    offset: i64,
    max_bytes: i32,
) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = partition.index;
    p.current_leader_epoch = epoch;
    p.fetch_offset = offset;
    p.log_start_offset = -1;
    p.last_fetched_epoch = -1;
    p.partition_max_bytes = max_bytes;
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(partition.topic.clone()));
    t.partitions = vec![p];
    let mut request = FetchRequest::default();
    request.replica_id = BrokerId(node_id);
    request.max_wait_ms = FETCH_MAX_WAIT_MS;
    request.min_bytes = 1;
    request.max_bytes = FETCH_MAX_BYTES;
    request.isolation_level = 0;
    request.session_id = 0;
    request.session_epoch = -1;
    request.topics = vec![t];
    request
}

/// OffsetForLeaderEpoch at the leader: the largest epoch it has at or below
/// `leader_epoch`, and where that ends in its log.
async fn leader_epoch_end(
    peer: &mut Peer,
    node_id: i32,
    partition: &Partition,
    epoch: i32,
    leader_epoch: i32,
) -> Result<Option<(i32, i64)>, Pause> {
    let mut p = OffsetForLeaderPartition::default();
    p.partition = partition.index;
    p.current_leader_epoch = epoch;
    p.leader_epoch = leader_epoch;
    let mut t = OffsetForLeaderTopic::default();
    t.topic = TopicName(StrBytes::from_string(partition.topic.clone()));
    t.partitions = vec![p];
    let mut request = OffsetForLeaderEpochRequest::default();
    request.replica_id = BrokerId(node_id);
    request.topics = vec![t];
    let response = peer
        .send(3, &request)
        .await
        .map_err(|e| Pause::Retry(format!("OffsetForLeaderEpoch failed: {e:#}")))?;
    let answer = response
        .topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition == partition.index)
        .ok_or_else(|| Pause::Retry("OffsetForLeaderEpoch without our partition".to_string()))?;
    if answer.error_code != 0 {
        return Err(Pause::Retry(format!(
            "OffsetForLeaderEpoch refused: error {}",
            answer.error_code
        )));
    }
    Ok((answer.leader_epoch >= 0 && answer.end_offset >= 0)
        .then_some((answer.leader_epoch, answer.end_offset)))
}

#[cfg(test)]
mod tests {
    use crate::peer::read_frame;

    /// A peer that declares an enormous response is refused before anything is
    /// allocated for it, however the rest of the frame goes.
    #[tokio::test]
    async fn an_oversized_response_frame_is_refused() {
        for declared in [i32::MAX, 64 * 1024 * 1024, -5] {
            let mut bytes = declared.to_be_bytes().to_vec();
            bytes.extend_from_slice(&[0u8; 16]);
            let err = read_frame(&mut bytes.as_slice(), 8 * 1024 * 1024)
                .await
                .expect_err("an oversized frame must be refused");
            assert!(
                err.to_string().contains("exceeds the limit"),
                "declared {declared}: {err:#}"
            );
        }
        let mut ok = 4i32.to_be_bytes().to_vec();
        ok.extend_from_slice(b"abcd");
        let frame = read_frame(&mut ok.as_slice(), 8)
            .await
            .expect("a frame within the limit");
        assert_eq!(&frame[..], b"abcd");
    }
}
