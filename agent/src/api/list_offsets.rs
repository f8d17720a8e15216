//! ListOffsets: earliest (-2), latest (-1: the high watermark, or for read_committed the
//! last stable offset), max timestamp (-3), and by timestamp (the
//! first offset whose record timestamp is at or after the one given). Earliest and
//! by-timestamp look in the archive too; max timestamp looks at the local log only.
//! A new leader answers OFFSET_NOT_AVAILABLE until its watermark reached the start of
//! its epoch (KIP-207), so that offsets never go backwards across a leader change.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::errors::ApiError;
use crate::broker::Broker;
use crate::partition::Partition;
use crate::replicas::TopicState;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;

pub async fn list_offsets(
    broker: &Broker,
    req: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let mut response = ListOffsetsResponse::default();
    // read_committed (v2+): the latest offset is the last stable one.
    let committed = version >= 2 && req.isolation_level == 1;
    for t in req.topics {
        let topic = broker.replicas().topic(t.name.0.as_str());
        let mut out = ListOffsetsTopicResponse::default();
        out.name = t.name.clone();
        for p in t.partitions {
            let mut r = ListOffsetsPartitionResponse::default();
            r.partition_index = p.partition_index;
            r.timestamp = -1;
            r.offset = -1;
            if version >= 4 {
                // No epoch claimed for the offset (-1): a client then learns epochs from
                // the batches it fetches, rather than validating against a guess.
                r.leader_epoch = -1;
            }
            let epoch = if version >= 4 {
                p.current_leader_epoch
            } else {
                -1
            };
            match TopicState::served_in(topic.as_ref(), t.name.0.as_str(), p.partition_index) {
                Err(e) => r.error_code = ApiError::from(&e).code(),
                Ok(partition) => match partition
                    .check_epoch(epoch)
                    .and_then(|()| partition.offsets_settled())
                {
                    Err(e) => r.error_code = ApiError::from(e).code(),
                    Ok(()) => match lookup(broker, partition, p.timestamp, committed).await {
                        Ok((offset, timestamp)) => {
                            r.offset = offset;
                            r.timestamp = timestamp;
                        }
                        Err(e) => r.error_code = e.code(),
                    },
                },
            }
            out.partitions.push(r);
        }
        response.topics.push(out);
    }
    response
}

/// `(offset, timestamp)` for one query; `(-1, -1)` when no record matches.
async fn lookup(
    broker: &Broker,
    partition: &Arc<Partition>,
    timestamp: i64,
    read_committed: bool,
) -> Result<(i64, i64), ApiError> {
    Ok(match timestamp {
        LATEST if read_committed => (partition.last_stable_offset(), -1),
        LATEST => (partition.high_watermark(), -1),
        EARLIEST => (broker.replicas().log_start_offset(partition).await, -1),
        MAX_TIMESTAMP => partition.max_timestamp_record().await?.unwrap_or((-1, -1)),
        t if t >= 0 => {
            // The archive holds the older offsets, so a match there comes first.
            let archived = if broker.replicas().log_start_offset(partition).await
                < partition.log_start_offset()
            {
                broker
                    .replicas()
                    .archive()
                    .offset_for_timestamp(&partition.topic, partition.index, t)
                    .await
                    .map_err(|e| ApiError::new(ResponseError::KafkaStorageError, e.to_string()))?
            } else {
                None
            };
            let found = match archived {
                Some(found) => Some(found),
                None => partition.offset_for_timestamp(t).await?,
            };
            // A match inside the first object or segment may lie below the log start,
            // as in Kafka: the first offset still held is the answer then.
            match found {
                Some((offset, ts)) => {
                    let start = broker.replicas().log_start_offset(partition).await;
                    (offset.max(start), ts)
                }
                None => (-1, -1),
            }
        }
        other => {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                format!("invalid timestamp {other}"),
            ));
        }
    })
}
