//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ends in this leader's
//! log. Followers ask it before copying from a new leader, to find the suffix they must
//! cut off; consumers ask it after a leader change, to check that the offset they hold
//! was not cut off (log truncation detection). The offsets service answers and decides
//! who may ask ([`crate::service::offsets`]); this is the wire side.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;
use crate::service::offsets::Asker;

pub fn offset_for_leader_epoch(
    broker: &Broker,
    who: &Caller,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let offsets = broker.offsets();
    let asker = if req.replica_id.0 >= 0 {
        Asker::Follower
    } else {
        Asker::Client
    };
    let mut response = OffsetForLeaderEpochResponse::default();
    for t in req.topics {
        let permit = offsets.permit(who, asker, t.topic.0.as_str());
        let mut out = OffsetForLeaderTopicResult::default();
        out.topic = t.topic;
        for p in t.partitions {
            let mut r = EpochEndOffset::default();
            r.partition = p.partition;
            r.leader_epoch = -1;
            r.end_offset = -1;
            let answer = permit.as_ref().map_err(ApiError::from).and_then(|permit| {
                offsets
                    .epoch_end(permit, p.partition, p.current_leader_epoch, p.leader_epoch)
                    .map_err(|e| ApiError::from(&e))
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
