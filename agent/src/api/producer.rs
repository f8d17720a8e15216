//! InitProducerId: for idempotent producers, a producer id from a block reserved in the
//! metastore (or, KIP-360, the next epoch of the one the producer has); with a
//! transactional id, the transaction coordinator's answer ([`crate::txn`]), which fences
//! every older producer of that id.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::broker::Broker;
use crate::txn::TxnError;

pub async fn init_producer_id(
    broker: &Broker,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let mut response = InitProducerIdResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    if let Some(id) = req.transactional_id.as_ref().filter(|t| !t.0.is_empty()) {
        let answer = broker
            .transactions()
            .init_producer_id(
                id.0.as_str(),
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
            Err(TxnError::ProducerFenced) if version < 4 => {
                response.error_code = ResponseError::InvalidProducerEpoch.code();
            }
            Err(e) => response.error_code = super::errors::ApiError::from(&e).code(),
        }
        return response;
    }
    // KIP-360: a producer that knows its id asks for the next epoch.
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        response.producer_id = req.producer_id;
        response.producer_epoch = req.producer_epoch + 1;
        return response;
    }
    match broker.producer_ids().next().await {
        Ok(id) => {
            response.producer_id = ProducerId(id);
            response.producer_epoch = 0;
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot reserve producer ids");
            response.error_code = ResponseError::CoordinatorNotAvailable.code();
        }
    }
    response
}
