//! The transaction APIs, wire side: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//! TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions, ListTransactions and
//! DescribeProducers. The rules are the coordinator's ([`crate::txn`]) and the group
//! coordinator's; InitProducerId is in `producer.rs`.

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
use strata_metastore::{CommittedOffset, TopicPartition, TxnRecord};

use super::errors::ApiError;
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::txn::TxnError;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// Kafka's code for `e`; before KIP-588 (older versions of each API), a fenced producer
/// was told INVALID_PRODUCER_EPOCH.
fn code(e: &TxnError, legacy: bool) -> i16 {
    if legacy && *e == TxnError::ProducerFenced {
        return ResponseError::InvalidProducerEpoch.code();
    }
    ApiError::from(e).code()
}

/// The partitions of `topics`, with UNKNOWN_TOPIC_OR_PARTITION for those that do not
/// exist.
fn known_partitions(
    broker: &Broker,
    topics: &[AddPartitionsToTxnTopic],
) -> (Vec<TopicPartition>, Vec<(TopicPartition, i16)>) {
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    for t in topics {
        let state = broker.replicas().topic(t.name.0.as_str());
        for &p in &t.partitions {
            let tp = (t.name.0.to_string(), p);
            if state.as_ref().is_some_and(|s| s.has_partition(p)) {
                known.push(tp);
            } else {
                unknown.push((tp, ResponseError::UnknownTopicOrPartition.code()));
            }
        }
    }
    (known, unknown)
}

fn topic_results(codes: Vec<(TopicPartition, i16)>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut out: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for ((topic, partition), code) in codes {
        let mut r = AddPartitionsToTxnPartitionResult::default();
        r.partition_index = partition;
        r.partition_error_code = code;
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

/// One transaction's AddPartitionsToTxn: every partition gets the same code, except
/// unknown ones; when some are unknown, the rest get OPERATION_NOT_ATTEMPTED (Kafka's
/// answer).
async fn add_one(
    broker: &Broker,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    topics: &[AddPartitionsToTxnTopic],
    verify_only: bool,
    legacy: bool,
) -> Vec<(TopicPartition, i16)> {
    let (known, mut codes) = known_partitions(broker, topics);
    if !codes.is_empty() {
        codes.extend(
            known
                .into_iter()
                .map(|tp| (tp, ResponseError::OperationNotAttempted.code())),
        );
        return codes;
    }
    let transactions = broker.transactions();
    if verify_only {
        for tp in known {
            let checked = transactions
                .verify_partition(
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    tp.clone(),
                    false,
                )
                .await;
            codes.push((tp, checked.err().map_or(0, |e| code(&e, legacy))));
        }
        return codes;
    }
    let added = transactions
        .add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            known.clone(),
            1,
            true,
        )
        .await;
    let c = added.err().map_or(0, |e| code(&e, legacy));
    known.into_iter().map(|tp| (tp, c)).collect()
}

pub async fn add_partitions_to_txn(
    broker: &Broker,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let mut response = AddPartitionsToTxnResponse::default();
    if version <= 3 {
        let codes = add_one(
            broker,
            req.v3_and_below_transactional_id.0.as_str(),
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
            &req.v3_and_below_topics,
            false,
            version < 2,
        )
        .await;
        response.results_by_topic_v3_and_below = topic_results(codes);
        return response;
    }
    for t in req.transactions {
        let codes = add_one(
            broker,
            t.transactional_id.0.as_str(),
            t.producer_id.0,
            t.producer_epoch,
            &t.topics,
            t.verify_only,
            false,
        )
        .await;
        let mut r = AddPartitionsToTxnResult::default();
        r.transactional_id = t.transactional_id;
        r.topic_results = topic_results(codes);
        response.results_by_transaction.push(r);
    }
    response
}

pub async fn add_offsets_to_txn(
    broker: &Broker,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let mut response = AddOffsetsToTxnResponse::default();
    if req.group_id.0.is_empty() {
        response.error_code = ResponseError::InvalidGroupId.code();
        return response;
    }
    let added = broker
        .transactions()
        .add_group(
            req.transactional_id.0.as_str(),
            req.producer_id.0,
            req.producer_epoch,
            req.group_id.0.as_str(),
            1,
            true,
        )
        .await;
    response.error_code = added.err().map_or(0, |e| code(&e, version < 2));
    response
}

pub async fn end_txn(broker: &Broker, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    let mut response = EndTxnResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    let ended = broker
        .transactions()
        .end(
            req.transactional_id.0.as_str(),
            req.producer_id.0,
            req.producer_epoch,
            req.committed,
            version >= 5,
        )
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
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let group = req.group_id.0.as_str();
    let now = now_ms();
    let mut failed: Option<i16> = None;
    let mut per_partition: Vec<(TopicPartition, i16)> = Vec::new();
    let mut offsets = Vec::new();
    for t in &req.topics {
        let state = broker.replicas().topic(t.name.0.as_str());
        for p in &t.partitions {
            let tp = (t.name.0.to_string(), p.partition_index);
            if !state
                .as_ref()
                .is_some_and(|s| s.has_partition(p.partition_index))
            {
                per_partition.push((tp, ResponseError::UnknownTopicOrPartition.code()));
                continue;
            }
            offsets.push((
                tp,
                CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                    commit_timestamp_ms: now,
                },
            ));
        }
    }
    if group.is_empty() {
        failed = Some(ResponseError::InvalidGroupId.code());
    }
    if failed.is_none() && !offsets.is_empty() {
        let transactions = broker.transactions();
        let in_txn = if version >= 5 {
            transactions
                .add_group(
                    req.transactional_id.0.as_str(),
                    req.producer_id.0,
                    req.producer_epoch,
                    group,
                    2,
                    false,
                )
                .await
        } else {
            transactions
                .verify_group(
                    req.transactional_id.0.as_str(),
                    req.producer_id.0,
                    req.producer_epoch,
                    group,
                )
                .await
        };
        if let Err(e) = in_txn {
            failed = Some(code(&e, version < 3));
        }
    }
    if failed.is_none() && !offsets.is_empty() {
        let staged = broker
            .groups()
            .coordinator()
            .stage_txn_commit(
                group,
                req.member_id.as_str(),
                req.group_instance_id.as_ref().map(|i| i.as_str()),
                req.generation_id,
                req.producer_id.0,
                offsets.clone(),
            )
            .await;
        if let Err(e) = staged {
            failed = Some(ApiError::from(e).code());
        }
    }
    per_partition.extend(offsets.into_iter().map(|(tp, _)| (tp, failed.unwrap_or(0))));
    let mut response = TxnOffsetCommitResponse::default();
    for ((topic, partition), code) in per_partition {
        let mut r = TxnOffsetCommitResponsePartition::default();
        r.partition_index = partition;
        r.error_code = code;
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
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let mut response = WriteTxnMarkersResponse::default();
    for m in req.markers {
        let control = ControlRecord {
            marker: if m.transaction_result {
                Marker::Commit
            } else {
                Marker::Abort
            },
            coordinator_epoch: m.coordinator_epoch,
        };
        let mut result = WritableTxnMarkerResult::default();
        result.producer_id = m.producer_id;
        for t in m.topics {
            let mut topic = WritableTxnMarkerTopicResult::default();
            topic.name = t.name.clone();
            for p in t.partition_indexes {
                let written = crate::txn::write_marker(
                    broker.replicas(),
                    t.name.0.as_str(),
                    p,
                    m.producer_id.0,
                    m.producer_epoch,
                    control,
                )
                .await;
                let mut r = WritableTxnMarkerPartitionResult::default();
                r.partition_index = p;
                r.error_code = written.err().map_or(0, |e| ApiError::from(&e).code());
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
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut response = DescribeTransactionsResponse::default();
    for id in req.transactional_ids {
        let mut t = match broker.transactions().describe(id.0.as_str(), true).await {
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
    match broker.transactions().list(true).await {
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
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let mut response = DescribeProducersResponse::default();
    for t in req.topics {
        let mut topic = TopicResponse::default();
        topic.name = t.name.clone();
        for p in t.partition_indexes {
            let mut r = PartitionResponse::default();
            r.partition_index = p;
            let state = broker.replicas().topic(t.name.0.as_str());
            match crate::replicas::TopicState::served_in(state.as_ref(), t.name.0.as_str(), p) {
                Ok(partition) => {
                    r.active_producers = partition
                        .producers()
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
                }
                Err(e) => {
                    let e = ApiError::from(&e);
                    r.error_code = e.code();
                    r.error_message = Some(s(e.message));
                }
            }
            topic.partitions.push(r);
        }
        response.topics.push(topic);
    }
    response
}
