//! DeleteRecords: moves the log start of partitions this agent leads (the lifecycle
//! service does it, deciding who may and auditing; see `service/lifecycle.rs`). The low
//! watermark answered is the log start afterwards, as the metastore has it.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;

pub async fn delete_records(
    broker: &Broker,
    who: &Caller,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut response = DeleteRecordsResponse::default();
    for t in req.topics {
        let mut out = DeleteRecordsTopicResult::default();
        out.name = t.name.clone();
        for p in t.partitions {
            let mut r = DeleteRecordsPartitionResult::default();
            r.partition_index = p.partition_index;
            match broker
                .records()
                .delete_records(who, t.name.0.as_str(), p.partition_index, p.offset)
                .await
            {
                Ok(low_watermark) => r.low_watermark = low_watermark,
                Err(e) => {
                    r.low_watermark = -1;
                    r.error_code = ApiError::from(&e).code();
                }
            }
            out.partitions.push(r);
        }
        response.topics.push(out);
    }
    response
}
