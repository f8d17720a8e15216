//! InitProducerId for idempotent producers. Transactions are not supported yet: a
//! request with a transactional id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
//! which clients report at once instead of retrying.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::broker::Broker;

pub async fn init_producer_id(
    broker: &Broker,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let mut response = InitProducerIdResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    if req
        .transactional_id
        .as_ref()
        .is_some_and(|t| !t.0.is_empty())
    {
        response.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
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
