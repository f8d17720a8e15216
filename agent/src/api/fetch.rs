//! Fetch with long polling: the request waits until `min_bytes` are available, an error
//! occurs, or `max_wait_ms` passes, waking whenever the high watermark of a fetched
//! partition moves. Size limits follow KIP-74: `partition_max_bytes` per partition and
//! `max_bytes` overall, except that the first batch returned is never withheld for its
//! size, so a consumer can always make progress.
//!
//! Incremental fetch sessions (KIP-227) are [`crate::fetch_sessions`]'s: a session's
//! fetch reads every partition of the session, and the answer keeps what changed.
//! Topics named by id (v13+) arrive with their names ([`super::topic_ids`]); a session
//! partition whose topic was since deleted, or deleted and created again, is answered
//! UNKNOWN_TOPIC_ID.
//!
//! A fetch with a `replica_id` of 0 or more (v9+) comes from a follower (`fetcher.rs`);
//! what that changes, and the epoch checks, are the fetch service's
//! ([`crate::service::fetch`]); this module is the wire side and the long poll.
//!
//! The fetch service decides, per topic and once per request, whether the caller may
//! read it (session partitions included: an ACL deleted since an earlier fetch counts);
//! a refused topic's partitions are answered TOPIC_AUTHORIZATION_FAILED and do not end
//! the long poll early.

use futures::future::select_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error::Error;
use crate::error_map::ApiError;
use crate::partition::Offsets;
use crate::service::fetch::{Permit, Reader};

/// `deadline`: when the request's `max_wait_ms` runs out.
pub async fn fetch(
    broker: &Broker,
    who: &Caller,
    req: FetchRequest,
    version: i16,
    deadline: Instant,
) -> FetchResponse {
    let owner = &who.principal.to_string();
    let sessions = broker.fetch_sessions();
    let begun = match sessions.begin(&req, version, owner) {
        Ok(begun) => begun,
        Err(code) => {
            let mut response = FetchResponse::default();
            response.error_code = code;
            return response;
        }
    };
    let topics = begun.topics(&req);
    // A fetch naming a replica needs CLUSTER_ACTION, at any version (as Kafka). Followers
    // send v9+ (they must name their leader epoch); an older fetch naming a replica is
    // served as a consumer's.
    let reader = match req.replica_id.0 {
        id if id >= 0 => Reader::Follower(id),
        _ => Reader::Consumer,
    };
    let fetching = broker.fetching();
    let permits: Vec<_> = topics
        .iter()
        .map(|t| {
            let permit = fetching.permit(who, reader, t.topic.0.as_str());
            if version >= 9 {
                permit
            } else {
                permit.map(Permit::as_consumer)
            }
        })
        .collect();
    let mut response = long_poll(broker, &req, topics, &permits, version, deadline).await;
    sessions.finish(begun, &req, version, owner, &mut response);
    response
}

/// Reads `topics` until `min_bytes` are there, an error occurs or the deadline passes.
async fn long_poll(
    broker: &Broker,
    req: &FetchRequest,
    topics: &[FetchTopic],
    permits: &[Result<Permit, Error>],
    version: i16,
    deadline: Instant,
) -> FetchResponse {
    let min_bytes = req.min_bytes.max(0) as usize;
    loop {
        let mut watches = Vec::new();
        let (response, bytes, errors) =
            read_once(broker, req, topics, permits, version, &mut watches).await;
        if bytes >= min_bytes || errors || crate::clock::instant() >= deadline || watches.is_empty()
        {
            if bytes > 0 {
                let follower = version >= 9 && req.replica_id.0 >= 0;
                for t in &response.responses {
                    let topic_bytes = t.partitions.iter().filter_map(|p| p.records.as_ref());
                    let topic_bytes: usize = topic_bytes.map(|r| r.len()).sum();
                    crate::metrics::fetched(t.topic.0.as_str(), topic_bytes, follower);
                }
            }
            return response;
        }
        let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
        tokio::select! {
            _ = changed => {}
            _ = crate::clock::pause_until(deadline) => {}
            _ = broker.shutdown().cancelled() => return response,
        }
    }
}

/// A partition's answer with nothing read: `code`, and no offsets.
pub(crate) fn unread(index: i32, code: i16) -> PartitionData {
    let mut data = PartitionData::default();
    data.partition_index = index;
    data.error_code = code;
    data.preferred_read_replica = BrokerId(-1);
    data.high_watermark = -1;
    data.last_stable_offset = -1;
    data.log_start_offset = -1;
    data
}

/// One pass over the requested partitions. Subscribes to each partition's offsets
/// before reading it, so no append between the read and the wait is missed.
async fn read_once(
    broker: &Broker,
    req: &FetchRequest,
    topics: &[FetchTopic],
    permits: &[Result<Permit, Error>],
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
    let fetching = broker.fetching();
    let mut response = FetchResponse::default();
    for (t, permit) in topics.iter().zip(permits) {
        let mut out = FetchableTopicResponse::default();
        out.topic = t.topic.clone();
        out.topic_id = t.topic_id;
        let permit = match permit {
            Ok(permit) => permit,
            Err(e) => {
                let code = ApiError::from(e).code();
                out.partitions = t
                    .partitions
                    .iter()
                    .map(|p| unread(p.partition, code))
                    .collect();
                response.responses.push(out);
                continue;
            }
        };
        // At v13+ the topic must still be the one the id named.
        let replaced = version >= 13
            && broker
                .admin()
                .topic(t.topic.0.as_str())
                .is_none_or(|s| s.record.id != *t.topic_id.as_bytes());
        for p in &t.partitions {
            let mut data = unread(p.partition, 0);
            if replaced {
                data.error_code = ResponseError::UnknownTopicId.code();
                errors = true;
                out.partitions.push(data);
                continue;
            }
            let (partition, rx) = match fetching.subscribe(permit, p.partition) {
                Ok(served) => served,
                Err(e) => {
                    data.error_code = ApiError::from(&e).code();
                    errors = true;
                    out.partitions.push(data);
                    continue;
                }
            };
            watches.push(rx);
            let epoch = if version >= 9 {
                p.current_leader_epoch
            } else {
                -1
            };
            let limit = (p.partition_max_bytes.max(0) as usize).min(remaining);
            let read = fetching
                .read(
                    &partition,
                    permit,
                    epoch,
                    p.fetch_offset,
                    limit,
                    req.isolation_level == 1,
                )
                .await;
            match read {
                Ok(mut r) => {
                    if total > 0 && (limit == 0 || r.records.len() > limit) {
                        // Only the very first batch of a response may exceed the limits.
                        r.records.clear();
                    }
                    total += r.records.len();
                    remaining = remaining.saturating_sub(r.records.len());
                    data.high_watermark = r.high_watermark;
                    data.last_stable_offset = r.last_stable_offset;
                    if version >= 5 {
                        data.log_start_offset = r.log_start_offset;
                    }
                    data.aborted_transactions = Some(
                        r.aborted
                            .iter()
                            .map(|a| {
                                let mut t = AbortedTransaction::default();
                                t.producer_id = ProducerId(a.producer_id);
                                t.first_offset = a.first_offset;
                                t
                            })
                            .collect(),
                    );
                    data.records = Some(crate::buffers::reads().bytes(r.records));
                }
                Err(failed) => {
                    data.error_code = ApiError::from(&failed.error).code();
                    data.high_watermark = failed.high_watermark;
                    data.last_stable_offset = failed.last_stable_offset;
                    if version >= 5 {
                        data.log_start_offset = failed.log_start_offset;
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
