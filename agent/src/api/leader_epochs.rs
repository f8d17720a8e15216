//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ends in this leader's
//! log. Followers ask it before copying from a new leader, to find the suffix they must
//! cut off; consumers ask it after a leader change, to check that the offset they hold
//! was not cut off (log truncation detection).

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::errors::ApiError;
use crate::broker::Broker;
use crate::replicas::TopicState;

pub fn offset_for_leader_epoch(
    broker: &Broker,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut response = OffsetForLeaderEpochResponse::default();
    for t in req.topics {
        let topic = broker.replicas().topic(t.topic.0.as_str());
        let mut out = OffsetForLeaderTopicResult::default();
        out.topic = t.topic;
        for p in t.partitions {
            let mut r = EpochEndOffset::default();
            r.partition = p.partition;
            r.leader_epoch = -1;
            r.end_offset = -1;
            let answer = TopicState::served_in(topic.as_ref(), out.topic.0.as_str(), p.partition)
                .map_err(|e| ApiError::from(&e))
                .and_then(|partition| {
                    partition
                        .check_epoch(p.current_leader_epoch)
                        .map_err(ApiError::from)?;
                    Ok(partition.epoch_end_offset(p.leader_epoch))
                });
            match answer {
                Ok(Some((epoch, end))) => {
                    r.leader_epoch = epoch;
                    r.end_offset = end;
                }
                // No epoch this old here: UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
                Ok(None) => {}
                Err(e) => r.error_code = e.code(),
            }
            out.partitions.push(r);
        }
        response.topics.push(out);
    }
    response
}
