//! The transaction APIs, wire side: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//! TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions, ListTransactions and
//! DescribeProducers. The transaction service answers them and decides who may
//! ([`crate::service::transactions`]: the coordinator's rules, [`crate::txn`], and the
//! group coordinator's); InitProducerId is in `producer.rs`.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeProducersRequest, DescribeProducersResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse,
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_log::txn::{ControlRecord, Marker};

use crate::broker::Broker;
use crate::caller::Caller;
use crate::clock::now_ms;
use crate::error::Error;
use crate::error_map::ApiError;
use crate::service::groups::{CommittedOffset, Member, TopicPartition};
use crate::service::transactions::{Markers, Outcomes, Producer, TxnRecord};
use crate::txn::TxnError;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// Kafka's code for `e`; before KIP-588 (older versions of each API), a fenced producer
/// was told INVALID_PRODUCER_EPOCH.
fn code(e: &Error, legacy: bool) -> i16 {
    if legacy && matches!(e, Error::Transaction(TxnError::ProducerFenced)) {
        return ResponseError::InvalidProducerEpoch.code();
    }
    ApiError::from(e).code()
}

fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| (t.name.0.to_string(), p)))
        .collect()
}

fn topic_results(outcomes: Outcomes, legacy: bool) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut out: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for ((topic, partition), outcome) in outcomes {
        let mut r = AddPartitionsToTxnPartitionResult::default();
        r.partition_index = partition;
        r.partition_error_code = outcome.err().map_or(0, |e| code(&e, legacy));
        match out.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.results_by_partition.push(r),
            None => {
                let mut t = AddPartitionsToTxnTopicResult::default();
                t.name = TopicName(s(topic));
                t.results_by_partition.push(r);
                out.push(t);
            }
        }
    }
    out
}

pub async fn add_partitions_to_txn(
    broker: &Broker,
    who: &Caller,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let mut response = AddPartitionsToTxnResponse::default();
    let transacting = broker.transacting();
    if version <= 3 {
        let producer = Producer {
            transactional_id: req.v3_and_below_transactional_id.0.as_str(),
            producer_id: req.v3_and_below_producer_id.0,
            producer_epoch: req.v3_and_below_producer_epoch,
        };
        let partitions = partitions_of(&req.v3_and_below_topics);
        let outcomes = transacting.add_partitions(who, &producer, partitions).await;
        response.results_by_topic_v3_and_below = topic_results(outcomes, version < 2);
        return response;
    }
    let transactions = req
        .transactions
        .iter()
        .map(|t| {
            let producer = Producer {
                transactional_id: t.transactional_id.0.as_str(),
                producer_id: t.producer_id.0,
                producer_epoch: t.producer_epoch,
            };
            (producer, partitions_of(&t.topics), t.verify_only)
        })
        .collect();
    match transacting.verify_partitions(who, transactions).await {
        Ok(all) => {
            for (t, outcomes) in req.transactions.iter().zip(all) {
                let mut r = AddPartitionsToTxnResult::default();
                r.transactional_id = t.transactional_id.clone();
                r.topic_results = topic_results(outcomes, false);
                response.results_by_transaction.push(r);
            }
        }
        Err(e) => response.error_code = ApiError::from(&e).code(),
    }
    response
}

pub async fn add_offsets_to_txn(
    broker: &Broker,
    who: &Caller,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let mut response = AddOffsetsToTxnResponse::default();
    let producer = Producer {
        transactional_id: req.transactional_id.0.as_str(),
        producer_id: req.producer_id.0,
        producer_epoch: req.producer_epoch,
    };
    let added = broker
        .transacting()
        .add_offsets(who, &producer, req.group_id.0.as_str())
        .await;
    response.error_code = added.err().map_or(0, |e| code(&e, version < 2));
    response
}

pub async fn end_txn(
    broker: &Broker,
    who: &Caller,
    req: EndTxnRequest,
    version: i16,
) -> EndTxnResponse {
    let mut response = EndTxnResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    let producer = Producer {
        transactional_id: req.transactional_id.0.as_str(),
        producer_id: req.producer_id.0,
        producer_epoch: req.producer_epoch,
    };
    let ended = broker
        .transacting()
        .end(who, &producer, req.committed, version >= 5)
        .await;
    match ended {
        Ok(e) => {
            response.producer_id = ProducerId(e.producer_id);
            response.producer_epoch = e.producer_epoch;
        }
        Err(e) => response.error_code = code(&e, version < 2),
    }
    response
}

pub async fn txn_offset_commit(
    broker: &Broker,
    who: &Caller,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let now = now_ms();
    let offsets = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    (t.name.0.to_string(), p.partition_index),
                    CommittedOffset {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        commit_timestamp_ms: now,
                    },
                )
            })
        })
        .collect();
    let producer = Producer {
        transactional_id: req.transactional_id.0.as_str(),
        producer_id: req.producer_id.0,
        producer_epoch: req.producer_epoch,
    };
    let member = Member {
        member_id: req.member_id.as_str(),
        group_instance_id: req.group_instance_id.as_ref().map(|i| i.as_str()),
        generation_id: req.generation_id,
    };
    let outcomes = broker
        .transacting()
        .commit_offsets(
            who,
            &producer,
            req.group_id.0.as_str(),
            &member,
            offsets,
            version >= 5,
        )
        .await;
    let mut response = TxnOffsetCommitResponse::default();
    for ((topic, partition), outcome) in outcomes {
        let mut r = TxnOffsetCommitResponsePartition::default();
        r.partition_index = partition;
        r.error_code = outcome.err().map_or(0, |e| code(&e, version < 3));
        match response
            .topics
            .iter_mut()
            .find(|t| t.name.0.as_str() == topic)
        {
            Some(t) => t.partitions.push(r),
            None => {
                let mut t = TxnOffsetCommitResponseTopic::default();
                t.name = TopicName(s(topic));
                t.partitions.push(r);
                response.topics.push(t);
            }
        }
    }
    response
}

/// WriteTxnMarkers: from a transaction coordinator (another agent's), or from an
/// operator's AbortTransaction (KIP-664). Each marker is committed before its answer.
pub async fn write_txn_markers(
    broker: &Broker,
    who: &Caller,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let markers = req
        .markers
        .iter()
        .map(|m| Markers {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            control: ControlRecord {
                marker: if m.transaction_result {
                    Marker::Commit
                } else {
                    Marker::Abort
                },
                coordinator_epoch: m.coordinator_epoch,
            },
            partitions: m
                .topics
                .iter()
                .flat_map(|t| {
                    t.partition_indexes
                        .iter()
                        .map(|&p| (t.name.0.to_string(), p))
                })
                .collect(),
        })
        .collect();
    let written = broker.transacting().write_markers(who, markers).await;
    // Each marker's codes, partition by partition in request order; every one refused
    // when the caller may not write markers.
    let codes: Vec<Vec<i16>> = match &written {
        Ok(all) => all
            .iter()
            .map(|outcomes| {
                outcomes
                    .iter()
                    .map(|(_, o)| o.as_ref().err().map_or(0, |e| ApiError::from(e).code()))
                    .collect()
            })
            .collect(),
        Err(e) => {
            let code = ApiError::from(e).code();
            let count =
                |m: &WritableTxnMarker| m.topics.iter().map(|t| t.partition_indexes.len()).sum();
            req.markers.iter().map(|m| vec![code; count(m)]).collect()
        }
    };
    let mut response = WriteTxnMarkersResponse::default();
    for (m, codes) in req.markers.into_iter().zip(codes) {
        let mut result = WritableTxnMarkerResult::default();
        result.producer_id = m.producer_id;
        let mut codes = codes.into_iter();
        for t in m.topics {
            let mut topic = WritableTxnMarkerTopicResult::default();
            topic.name = t.name;
            for p in t.partition_indexes {
                let mut r = WritableTxnMarkerPartitionResult::default();
                r.partition_index = p;
                r.error_code = codes.next().unwrap_or(0);
                topic.partitions.push(r);
            }
            result.topics.push(topic);
        }
        response.markers.push(result);
    }
    response
}

fn described(id: &str, record: &TxnRecord) -> TransactionState {
    let mut t = TransactionState::default();
    t.transactional_id = TransactionalId(s(id));
    t.transaction_state = s(record.state.name());
    t.transaction_timeout_ms = record.timeout_ms.clamp(0, i64::from(i32::MAX)) as i32;
    t.transaction_start_time_ms = record.start_ms;
    t.producer_id = ProducerId(record.producer_id);
    t.producer_epoch = record.producer_epoch;
    for (topic, partition) in &record.partitions {
        match t.topics.iter_mut().find(|d| d.topic.0.as_str() == topic) {
            Some(d) => d.partitions.push(*partition),
            None => {
                let mut d = TopicData::default();
                d.topic = TopicName(s(topic.clone()));
                d.partitions.push(*partition);
                t.topics.push(d);
            }
        }
    }
    t
}

pub async fn describe_transactions(
    broker: &Broker,
    who: &Caller,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut response = DescribeTransactionsResponse::default();
    let transacting = broker.transacting();
    for id in req.transactional_ids {
        let mut t = match transacting.describe(who, id.0.as_str()).await {
            Ok(record) => described(id.0.as_str(), &record),
            Err(e) => {
                let mut t = TransactionState::default();
                t.error_code = ApiError::from(&e).code();
                t.transaction_state = s("");
                t.producer_id = ProducerId(-1);
                t.producer_epoch = -1;
                t.transaction_start_time_ms = -1;
                t
            }
        };
        t.transactional_id = id;
        response.transaction_states.push(t);
    }
    response
}

pub async fn list_transactions(
    broker: &Broker,
    who: &Caller,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    const STATES: [&str; 8] = [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ];
    let mut response = ListTransactionsResponse::default();
    let wanted_states: BTreeSet<&str> = req.state_filters.iter().map(|f| f.as_str()).collect();
    response.unknown_state_filters = req
        .state_filters
        .iter()
        .filter(|f| !STATES.contains(&f.as_str()))
        .cloned()
        .collect();
    let wanted_ids: BTreeSet<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    let now = now_ms();
    match broker.transacting().list(who).await {
        Ok(all) => {
            for (id, record) in all {
                let keep = (wanted_states.is_empty()
                    || wanted_states.contains(record.state.name()))
                    && (wanted_ids.is_empty() || wanted_ids.contains(&record.producer_id))
                    && (req.duration_filter < 0
                        || (record.start_ms >= 0 && now - record.start_ms >= req.duration_filter));
                if keep {
                    let mut t = ListedState::default();
                    t.transactional_id = TransactionalId(s(id));
                    t.producer_id = ProducerId(record.producer_id);
                    t.transaction_state = s(record.state.name());
                    response.transaction_states.push(t);
                }
            }
        }
        Err(e) => response.error_code = ApiError::from(&e).code(),
    }
    response
}

/// DescribeProducers (KIP-664): each partition's producers as its leader knows them,
/// with the first offset of any open transaction (`kafka-transactions find-hanging`).
pub fn describe_producers(
    broker: &Broker,
    who: &Caller,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let mut response = DescribeProducersResponse::default();
    let transacting = broker.transacting();
    for t in req.topics {
        let mut topic = TopicResponse::default();
        topic.name = t.name.clone();
        let failed = |index: i32, e: &Error| {
            let e = ApiError::from(e);
            let mut r = PartitionResponse::default();
            r.partition_index = index;
            r.error_code = e.code();
            r.error_message = Some(s(e.message));
            r
        };
        match transacting.producers(who, t.name.0.as_str(), &t.partition_indexes) {
            Err(e) => {
                topic.partitions = t.partition_indexes.iter().map(|&p| failed(p, &e)).collect();
            }
            Ok(partitions) => {
                for (p, rows) in partitions {
                    topic.partitions.push(match rows {
                        Err(e) => failed(p, &e),
                        Ok(rows) => {
                            let mut r = PartitionResponse::default();
                            r.partition_index = p;
                            r.active_producers = rows
                                .into_iter()
                                .map(|(pid, epoch, seq, ts, coordinator_epoch, txn_start)| {
                                    let mut s = ProducerState::default();
                                    s.producer_id = ProducerId(pid);
                                    s.producer_epoch = i32::from(epoch);
                                    s.last_sequence = seq;
                                    s.last_timestamp = ts;
                                    s.coordinator_epoch = coordinator_epoch;
                                    s.current_txn_start_offset = txn_start;
                                    s
                                })
                                .collect();
                            r
                        }
                    });
                }
            }
        }
        response.topics.push(topic);
    }
    response
}
