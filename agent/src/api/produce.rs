//! Produce: validation and append happen before [`produce`] returns (so pipelined
//! requests append in arrival order); the reply then waits, for acks=all, until the
//! high watermark covers each partition's batches (every in-sync replica has them).
//!
//! acks=all needs `min.insync.replicas` in the ISR: with fewer, nothing is appended
//! (NOT_ENOUGH_REPLICAS); if the ISR falls below it while the write waits, the write is
//! kept but answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, as in Kafka. An agent that cannot
//! renew its membership lease takes no writes (NOT_LEADER_OR_FOLLOWER): another may be
//! about to be elected in its place.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use super::Reply;
use super::errors::ApiError;
use crate::broker::{Broker, TopicState};
use crate::clock::now_ms;
use crate::partition::Partition;

/// What an acks=all write waits for.
struct Wait {
    partition: Arc<Partition>,
    end_offset: i64,
    epoch: i32,
    min_insync: usize,
}

/// A partition's result, and the append to wait for when acks=all.
struct Appended {
    response: PartitionProduceResponse,
    wait: Option<Wait>,
}

fn failed(index: i32, e: ApiError, version: i16) -> Appended {
    let mut r = PartitionProduceResponse::default();
    r.index = index;
    r.error_code = e.code();
    r.base_offset = -1;
    r.log_append_time_ms = -1;
    r.log_start_offset = -1;
    if version >= 8 {
        r.record_errors = e
            .record_errors
            .into_iter()
            .map(|(index, why)| {
                let mut b = BatchIndexAndErrorMessage::default();
                b.batch_index = index;
                b.batch_index_error_message = Some(StrBytes::from_string(why));
                b
            })
            .collect();
        r.error_message = Some(StrBytes::from_string(e.message));
    }
    Appended {
        response: r,
        wait: None,
    }
}

pub fn produce(broker: &Arc<Broker>, req: ProduceRequest, version: i16) -> Reply {
    let acks = req.acks;
    let now = now_ms();
    let mut topics: Vec<(kafka_protocol::messages::TopicName, Vec<Appended>)> = Vec::new();
    for t in req.topic_data {
        let topic = broker.topic(t.name.0.as_str());
        let mut results = Vec::with_capacity(t.partition_data.len());
        for p in t.partition_data {
            let partition = TopicState::served_in(topic.as_ref(), p.index);
            let outcome = if !matches!(acks, -1..=1) {
                Err(ApiError::new(
                    ResponseError::InvalidRequiredAcks,
                    format!("acks must be -1, 0 or 1, not {acks}"),
                ))
            } else if req.transactional_id.is_some() {
                Err(ApiError::new(
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "transactions are not supported yet",
                ))
            } else {
                match (partition, p.records.as_deref()) {
                    (Err(code), _) => Err(ApiError::new(
                        code,
                        "This server does not lead this topic-partition.",
                    )),
                    (Ok(_), _) if !broker.membership.holds_lease() => Err(ApiError::new(
                        ResponseError::NotLeaderOrFollower,
                        "This agent could not renew its cluster lease and takes no writes until it does.",
                    )),
                    (Ok(_), None | Some([])) => Err(ApiError::new(
                        ResponseError::InvalidRecord,
                        "produce request holds no record batch",
                    )),
                    (Ok(partition), Some(records)) => {
                        let min_insync =
                            topic.as_ref().map_or(1, |t| t.config.min_insync_replicas());
                        partition
                            .append(records, now, (acks == -1).then_some(min_insync))
                            .map(|(out, epoch)| (Arc::clone(partition), out, epoch, min_insync))
                            .map_err(ApiError::from)
                    }
                }
            };
            results.push(match outcome {
                Ok((partition, out, epoch, min_insync)) => {
                    let mut r = PartitionProduceResponse::default();
                    r.index = p.index;
                    r.base_offset = out.base_offset;
                    r.log_append_time_ms = out.log_append_time_ms;
                    if version >= 5 {
                        r.log_start_offset = partition.log_start_offset();
                    }
                    let wait = (acks == -1).then_some(Wait {
                        partition,
                        end_offset: out.last_offset + 1,
                        epoch,
                        min_insync,
                    });
                    Appended { response: r, wait }
                }
                Err(e) => {
                    if !matches!(
                        e.code,
                        ResponseError::UnknownTopicOrPartition
                            | ResponseError::NotLeaderOrFollower
                            | ResponseError::NotEnoughReplicas
                    ) {
                        tracing::debug!(topic = %t.name.0.as_str(), partition = p.index, error = %e.message, "produce refused");
                    }
                    failed(p.index, e, version)
                }
            });
        }
        topics.push((t.name, results));
    }
    if acks == 0 {
        return async { None }.boxed();
    }
    // One deadline for the whole request, however many partitions it waits for.
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(req.timeout_ms.max(0) as u64);
    async move {
        let mut response = ProduceResponse::default();
        for (name, results) in topics {
            let mut t = TopicProduceResponse::default();
            t.name = name;
            for mut appended in results {
                if let Some(w) = appended.wait.take() {
                    let committed =
                        w.partition
                            .wait_committed(w.end_offset, w.epoch, w.min_insync);
                    let outcome = tokio::time::timeout_at(deadline, committed).await;
                    let error = match outcome {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(ApiError::from(e)),
                        Err(_) => Some(ApiError::new(
                            ResponseError::RequestTimedOut,
                            "the write did not reach every in-sync replica within the request timeout",
                        )),
                    };
                    if let Some(e) = error {
                        appended.response.error_code = e.code();
                        if version >= 8 {
                            appended.response.error_message =
                                Some(StrBytes::from_string(e.message));
                        }
                    }
                }
                t.partition_responses.push(appended.response);
            }
            response.responses.push(t);
        }
        Some(response.into())
    }
    .boxed()
}
