//! Produce: the wire side. Each partition's batches go to the produce service
//! ([`crate::service::produce`]) before [`produce`] returns, so pipelined requests
//! append in arrival order; the reply then waits, for acks=all, until each partition's
//! write is committed, with one deadline (the request's `timeout_ms`) for all of them.
//! The service decides, per topic, whether the caller may write it
//! ([`Producing::permit`](crate::service::produce::Producing::permit)); a topic it
//! refuses is answered with the refusal for each of its partitions, and the rest
//! proceed.

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::Reply;
use crate::broker::Broker;
use crate::caller::Caller;
use crate::clock::now_ms;
use crate::context::ProduceRefusals;
use crate::error::Error;
use crate::error_map::ApiError;
use crate::service::produce::{Acks, Commit, Permit};

/// A partition's answer so far, and the commit to wait for when acks=all.
struct Appended {
    response: PartitionProduceResponse,
    commit: Option<Commit>,
}

/// The answer of a partition nothing was written to, because of `e`.
pub(crate) fn failed(index: i32, e: ApiError, version: i16) -> PartitionProduceResponse {
    let mut r = PartitionProduceResponse::default();
    r.index = index;
    r.base_offset = -1;
    r.log_append_time_ms = -1;
    r.log_start_offset = -1;
    set_error(&mut r, e, version);
    r
}

fn set_error(r: &mut PartitionProduceResponse, e: ApiError, version: i16) {
    r.error_code = e.code();
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
}

/// Refusals of a batch, nothing appended, that a client answers by sending the batch
/// again (after it looked the leader up again, or waited): the batches after it in the
/// same pipeline are held to them ([`ProduceRefusals`]).
const RESENT: [ResponseError; 4] = [
    ResponseError::NotLeaderOrFollower,
    ResponseError::NotEnoughReplicas,
    ResponseError::UnknownTopicOrPartition,
    ResponseError::LeaderNotAvailable,
];

/// The refusal held against a batch of `topic`-`partition` that skips sequence numbers
/// (`e`), when an earlier batch of that partition on this connection was refused and
/// not yet sent again: it is refused the same way, not judged out of order, so that the
/// client sends both again, in order.
fn held_against(
    refusals: &ProduceRefusals,
    topic: &str,
    partition: i32,
    e: &Error,
) -> Option<ApiError> {
    use crate::partition::PartitionError as P;
    let Error::Partition(P::Log(strata_log::Error::OutOfOrderSequence { expected, got, .. })) = e
    else {
        return None;
    };
    // Ahead of what was expected (sequence numbers wrap).
    if got.wrapping_sub(*expected) <= 0 {
        return None;
    }
    let code = refusals.held(topic, partition)?;
    Some(ApiError::new(
        code,
        format!(
            "{e}: an earlier batch of {topic}-{partition} on this connection was refused ({}); send it first",
            crate::metrics::kafka_error_name(code.code())
        ),
    ))
}

/// Refusals that are routine for clients (they refresh metadata and retry).
/// Refused writes are logged at most once a second (a client can send them at any rate).
static REFUSALS: crate::throttle::Throttle = crate::throttle::Throttle::per_second();

fn routine(e: &Error) -> bool {
    use crate::partition::PartitionError as P;
    matches!(
        e,
        Error::UnknownTopicOrPartition { .. }
            | Error::NotLeader { .. }
            | Error::LeaseLapsed
            | Error::Partition(P::NotLeader(_) | P::NotEnoughReplicas { .. })
    )
}

/// KIP-890 verification of the transactional partitions that need it: for each, the
/// producer id and partition token to append with, or why the write is refused.
type Verified = HashMap<(usize, usize), Result<(i64, u64), ApiError>>;

/// Asks the coordinator's record, for each partition whose first write in the
/// producer's transaction this is, whether the partition is in the transaction (v2
/// producers, Produce v12+: adds it). Awaited before anything is appended, so the
/// connection's next request waits too and pipelined writes keep their order.
async fn verify(
    broker: &Broker,
    req: &ProduceRequest,
    permits: &[Result<Permit, Error>],
    version: i16,
) -> Verified {
    let mut verified = Verified::new();
    let transactional_id = req.transactional_id.as_ref().map(|t| t.as_str());
    for (ti, (t, permit)) in req.topic_data.iter().zip(permits).enumerate() {
        let Ok(permit) = permit else { continue };
        for (pi, p) in t.partition_data.iter().enumerate() {
            let topic = t.name.0.as_str();
            let records = p.records.as_deref();
            let transactional = records
                .and_then(|r| strata_log::batch::BatchIter::new(r).next())
                .is_some_and(|(h, _)| h.is_transactional());
            if !transactional {
                continue;
            }
            let Some(transactional_id) = transactional_id.filter(|id| !id.is_empty()) else {
                verified.insert(
                    (ti, pi),
                    Err(ApiError::new(
                        ResponseError::InvalidRecord,
                        "transactional records need the producer's transactional id",
                    )),
                );
                continue;
            };
            let Some((producer_id, producer_epoch, replica)) = broker
                .producing()
                .needs_verification(permit, p.index, records)
            else {
                continue;
            };
            let token = replica.start_verification(producer_id);
            let checked = broker
                .transactions()
                .verify_partition(
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    (topic.to_string(), p.index),
                    version >= 12,
                )
                .await;
            verified.insert(
                (ti, pi),
                checked
                    .map(|()| (producer_id, token))
                    .map_err(produce_error),
            );
        }
    }
    verified
}

/// How a failed verification is told to a producer, in the errors Produce answers (as
/// Kafka does): fenced is INVALID_PRODUCER_EPOCH, and a coordinator that is busy or
/// moving is NOT_ENOUGH_REPLICAS, which producers retry.
fn produce_error(e: crate::txn::TxnError) -> ApiError {
    use crate::txn::TxnError as T;
    let code = match &e {
        T::ProducerFenced => ResponseError::InvalidProducerEpoch,
        T::ConcurrentTransactions | T::NotCoordinator | T::CoordinatorNotAvailable(_) => {
            ResponseError::NotEnoughReplicas
        }
        _ => return ApiError::from(&e),
    };
    ApiError::new(code, e.to_string())
}

/// `deadline`: when the request's `timeout_ms` runs out.
pub async fn produce(
    broker: &Arc<Broker>,
    who: &Caller,
    refusals: &ProduceRefusals,
    req: ProduceRequest,
    version: i16,
    deadline: tokio::time::Instant,
) -> Reply {
    let acks = Acks::from_kafka(req.acks);
    let transactional_id = req.transactional_id.as_ref().map(|t| t.as_str());
    let permits: Vec<Result<Permit, Error>> = req
        .topic_data
        .iter()
        .map(|t| {
            broker
                .producing()
                .permit(who, transactional_id, t.name.0.as_str())
        })
        .collect();
    let mut verified = verify(broker, &req, &permits, version).await;
    let now = now_ms();
    let mut topics: Vec<(TopicName, Uuid, Vec<Appended>)> = Vec::new();
    for (ti, (t, permit)) in req.topic_data.iter().zip(&permits).enumerate() {
        let mut results = Vec::with_capacity(t.partition_data.len());
        for (pi, p) in t.partition_data.iter().enumerate() {
            let guard = match verified.remove(&(ti, pi)) {
                Some(Ok(guard)) => Ok(Some(guard)),
                Some(Err(e)) => Err(e),
                None => Ok(None),
            };
            let outcome = permit.as_ref().map_err(ApiError::from).and_then(|permit| {
                let acks = acks.as_ref().map_err(ApiError::from)?;
                let guard = guard?;
                broker
                    .producing()
                    .append(
                        permit,
                        p.index,
                        p.records.as_ref(),
                        *acks,
                        guard,
                        now,
                    )
                    .map_err(|e| {
                        let topic = t.name.0.as_str();
                        if let Some(held) = held_against(refusals, topic, p.index, &e) {
                            return held;
                        }
                        if !routine(&e)
                            && let Some(left_out) = REFUSALS.allow()
                        {
                            tracing::info!(topic, partition = p.index, error = %e, left_out, "produce refused");
                        }
                        let e = ApiError::from(&e);
                        if RESENT.contains(&e.code) {
                            refusals.refused(topic, p.index, e.code);
                        }
                        e
                    })
            });
            results.push(match outcome {
                Ok(out) => {
                    refusals.appended(t.name.0.as_str(), p.index);
                    let bytes = p.records.as_ref().map_or(0, |r| r.len());
                    crate::metrics::produced(t.name.0.as_str(), bytes);
                    let mut r = PartitionProduceResponse::default();
                    r.index = p.index;
                    r.base_offset = out.base_offset;
                    r.log_append_time_ms = out.log_append_time_ms;
                    if version >= 5 {
                        r.log_start_offset = out.log_start_offset;
                    }
                    Appended {
                        response: r,
                        commit: out.commit,
                    }
                }
                Err(e) => Appended {
                    response: failed(p.index, e, version),
                    commit: None,
                },
            });
        }
        // The name decoded from the request is a slice of its frame: the pending answer
        // holds a copy, or it would keep the whole frame (megabytes of records) in memory,
        // outside the request-memory bound, until the write is acknowledged.
        let name = TopicName(StrBytes::from_string(t.name.0.to_string()));
        topics.push((name, t.topic_id, results));
    }
    if matches!(acks, Ok(Acks::None)) {
        return async { None }.boxed();
    }
    async move {
        let mut response = ProduceResponse::default();
        for (name, topic_id, results) in topics {
            let mut t = TopicProduceResponse::default();
            t.name = name;
            t.topic_id = topic_id;
            for mut appended in results {
                if let Some(commit) = appended.commit.take()
                    && let Err(e) = commit.wait(deadline).await
                {
                    let e = ApiError::from(&e);
                    appended.response.error_code = e.code();
                    if version >= 8 {
                        appended.response.error_message = Some(StrBytes::from_string(e.message));
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
