//! InitProducerId: for idempotent producers, a producer id from a block reserved in the
//! metastore (or, KIP-360, the next epoch of the one the producer has); with a
//! transactional id, the transaction coordinator's answer ([`crate::txn`]), which fences
//! every older producer of that id. The transaction service answers and decides who may
//! ([`crate::service::transactions`]); this is the wire side.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error::Error;
use crate::error_map::ApiError;
use crate::txn::TxnError;

pub async fn init_producer_id(
    broker: &Broker,
    who: &Caller,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let mut response = InitProducerIdResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    let answer = broker
        .transacting()
        .init_producer_id(
            who,
            req.transactional_id.as_ref().map(|t| t.0.as_str()),
            i64::from(req.transaction_timeout_ms),
            req.producer_id.0,
            req.producer_epoch,
        )
        .await;
    match answer {
        Ok((pid, epoch)) => {
            response.producer_id = ProducerId(pid);
            response.producer_epoch = epoch;
        }
        // Before KIP-588 (v4) a fenced producer was told INVALID_PRODUCER_EPOCH.
        Err(Error::Transaction(TxnError::ProducerFenced)) if version < 4 => {
            response.error_code = ResponseError::InvalidProducerEpoch.code();
        }
        Err(e) => response.error_code = ApiError::from(&e).code(),
    }
    response
}
