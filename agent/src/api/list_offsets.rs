//! ListOffsets: earliest (-2), latest (-1: the high watermark, or for read_committed the
//! last stable offset), max timestamp (-3), and by timestamp (the first offset whose
//! record timestamp is at or after the one given). The offsets service looks them up
//! and decides who may ([`crate::service::offsets`]); this is the wire side.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;
use crate::service::offsets::{Asker, Query};

pub async fn list_offsets(
    broker: &Broker,
    who: &Caller,
    req: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let offsets = broker.offsets();
    let mut response = ListOffsetsResponse::default();
    // read_committed (v2+): the latest offset is the last stable one.
    let read_committed = version >= 2 && req.isolation_level == 1;
    for t in req.topics {
        let permit = offsets.permit(who, Asker::Client, t.name.0.as_str());
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
            let found = match &permit {
                Err(e) => Err(ApiError::from(e)),
                Ok(permit) => {
                    let query = Query::from_kafka(p.timestamp, read_committed);
                    offsets
                        .lookup(permit, p.partition_index, epoch, query)
                        .await
                        .map_err(|e| ApiError::from(&e))
                }
            };
            match found {
                Ok((offset, timestamp)) => {
                    r.offset = offset;
                    r.timestamp = timestamp;
                }
                Err(e) => r.error_code = e.code(),
            }
            out.partitions.push(r);
        }
        response.topics.push(out);
    }
    response
}
