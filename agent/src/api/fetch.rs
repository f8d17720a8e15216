//! Fetch with long polling: the request waits until `min_bytes` are available, an error
//! occurs, or `max_wait_ms` passes, waking whenever the high watermark of a fetched
//! partition moves. Size limits follow KIP-74: `partition_max_bytes` per partition and
//! `max_bytes` overall, except that the first batch returned is never withheld for its
//! size, so a consumer can always make progress.
//!
//! strata does not create incremental fetch sessions (KIP-227): every response has
//! session id 0, which tells clients to keep sending full fetch requests.

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
use crate::partition::Durable;

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
    watches: &mut Vec<watch::Receiver<Durable>>,
) -> (FetchResponse, usize, bool) {
    let mut remaining = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    let mut total = 0usize;
    let mut errors = false;
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
            let limit = (p.partition_max_bytes.max(0) as usize).min(remaining);
            let read = if limit == 0 && total > 0 {
                broker
                    .read(partition, p.fetch_offset, 0)
                    .await
                    .map(|mut r| {
                        r.records.clear();
                        r
                    })
            } else {
                broker.read(partition, p.fetch_offset, limit).await
            };
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
                        data.log_start_offset = broker.log_start_offset(partition).await;
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
