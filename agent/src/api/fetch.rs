//! Fetch with long polling: the request waits until `min_bytes` are available, an error
//! occurs, or `max_wait_ms` passes, waking whenever the high watermark of a fetched
//! partition moves. Size limits follow KIP-74: `partition_max_bytes` per partition and
//! `max_bytes` overall, except that the first batch returned is never withheld for its
//! size, so a consumer can always make progress.
//!
//! strata does not create incremental fetch sessions (KIP-227): every response has
//! session id 0, which tells clients to keep sending full fetch requests.
//!
//! A fetch with a `replica_id` of 0 or more comes from a follower (`replication.rs`): it
//! reads up to the log end rather than the high watermark, and its fetch offset tells
//! the leader how far the follower's copy reaches. Fetches that name a
//! `current_leader_epoch` (v9+) are checked against this replica's epoch
//! (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, KIP-320).

use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use tokio::sync::watch;
use tokio::time::Instant;

use super::errors::ApiError;
use crate::broker::{Broker, TopicState};
use crate::clock::now_ms;
use crate::partition::{Offsets, Partition, PartitionError};

pub async fn fetch(broker: &Broker, req: FetchRequest, version: i16) -> FetchResponse {
    if req.session_id != 0 {
        let mut response = FetchResponse::default();
        response.error_code = ResponseError::FetchSessionIdNotFound.code();
        return response;
    }
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let min_bytes = req.min_bytes.max(0) as usize;
    loop {
        let mut watches = Vec::new();
        let (response, bytes, errors) = read_once(broker, &req, version, &mut watches).await;
        if bytes >= min_bytes || errors || Instant::now() >= deadline || watches.is_empty() {
            return response;
        }
        let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = broker.shutdown.cancelled() => return response,
        }
    }
}

/// One pass over the requested partitions. Subscribes to each partition's high
/// watermark before reading it, so no append between the read and the wait is missed.
async fn read_once(
    broker: &Broker,
    req: &FetchRequest,
    version: i16,
    watches: &mut Vec<watch::Receiver<Offsets>>,
) -> (FetchResponse, usize, bool) {
    let mut remaining = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    let mut total = 0usize;
    let mut errors = false;
    // Followers send v9+ (they must name their leader epoch); an older fetch naming a
    // replica is served as a consumer's.
    let follower = (version >= 9 && req.replica_id.0 >= 0).then_some(req.replica_id.0);
    let mut response = FetchResponse::default();
    for t in &req.topics {
        let topic = broker.topic(t.topic.0.as_str());
        let mut out = FetchableTopicResponse::default();
        out.topic = t.topic.clone();
        out.topic_id = t.topic_id;
        for p in &t.partitions {
            let mut data = PartitionData::default();
            data.partition_index = p.partition;
            data.preferred_read_replica = BrokerId(-1);
            data.high_watermark = -1;
            data.last_stable_offset = -1;
            data.log_start_offset = -1;
            let partition = match TopicState::served_in(topic.as_ref(), p.partition) {
                Ok(partition) => partition,
                Err(code) => {
                    data.error_code = code.code();
                    errors = true;
                    out.partitions.push(data);
                    continue;
                }
            };
            let mut rx = partition.watch();
            rx.borrow_and_update();
            watches.push(rx);
            let epoch = if version >= 9 {
                p.current_leader_epoch
            } else {
                -1
            };
            let checked = match follower {
                Some(replica) => {
                    partition.on_replica_fetch(replica, epoch, p.fetch_offset, now_ms())
                }
                None => partition.check_epoch(epoch),
            };
            if let Err(e) = checked {
                data.error_code = ApiError::from(e).code();
                errors = true;
                out.partitions.push(data);
                continue;
            }
            let limit = (p.partition_max_bytes.max(0) as usize).min(remaining);
            let read = read(broker, partition, follower.is_some(), p.fetch_offset, limit)
                .await
                .map(|mut r| {
                    if limit == 0 && total > 0 {
                        r.records.clear();
                    }
                    r
                });
            match read {
                Ok(mut r) => {
                    if total > 0 && r.records.len() > limit {
                        // Only the very first batch of a response may exceed the limits.
                        r.records.clear();
                    }
                    total += r.records.len();
                    remaining = remaining.saturating_sub(r.records.len());
                    data.high_watermark = r.high_watermark;
                    data.last_stable_offset = r.high_watermark;
                    if version >= 5 {
                        data.log_start_offset = r.log_start_offset;
                    }
                    data.aborted_transactions = Some(Vec::new());
                    data.records = Some(Bytes::from(r.records));
                }
                Err(e) => {
                    let e = ApiError::from(e);
                    data.error_code = e.code();
                    data.high_watermark = partition.high_watermark();
                    data.last_stable_offset = data.high_watermark;
                    if version >= 5 {
                        data.log_start_offset = if follower.is_some() {
                            partition.log_start_offset()
                        } else {
                            broker.log_start_offset(partition).await
                        };
                    }
                    errors = true;
                }
            }
            out.partitions.push(data);
        }
        response.responses.push(out);
    }
    (response, total, errors)
}

/// A consumer reads committed records, from the archive too; a follower reads the local
/// log up to its end.
async fn read(
    broker: &Broker,
    partition: &Partition,
    follower: bool,
    offset: i64,
    limit: usize,
) -> Result<crate::partition::ReadOutcome, PartitionError> {
    if follower {
        partition.read(offset, limit, false)
    } else {
        broker.read(partition, offset, limit).await
    }
}
