//! The transaction APIs' cases of `every_api_answers_at_every_advertised_version`: each
//! version runs a small transaction of its own (its own transactional id), so the
//! versions do not depend on each other.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, DescribeProducersRequest,
    DescribeTransactionsRequest, EndTxnRequest, GroupId, InitProducerIdRequest,
    ListTransactionsRequest, ProducerId, TransactionalId, TxnOffsetCommitRequest,
    WriteTxnMarkersRequest, add_partitions_to_txn_request, describe_producers_request,
    txn_offset_commit_request, write_txn_markers_request,
};
use kafka_protocol::protocol::StrBytes;
use strata_tests::{Client, name};

/// Whether `api` is one of these.
pub fn handles(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::AddPartitionsToTxn
            | ApiKey::AddOffsetsToTxn
            | ApiKey::EndTxn
            | ApiKey::TxnOffsetCommit
            | ApiKey::WriteTxnMarkers
            | ApiKey::DescribeTransactions
            | ApiKey::ListTransactions
            | ApiKey::DescribeProducers
    )
}

fn id(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

/// InitProducerId for `transactional_id`: its producer id and epoch.
async fn init(c: &mut Client, transactional_id: &str) -> (i64, i16) {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = Some(id(transactional_id));
    req.transaction_timeout_ms = 60_000;
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    let r = c.send(4, &req).await.expect("init producer id");
    assert_eq!(r.error_code, 0, "init {transactional_id}");
    (r.producer_id.0, r.producer_epoch)
}

fn topics(partition: i32) -> Vec<add_partitions_to_txn_request::AddPartitionsToTxnTopic> {
    let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
    t.name = name("t");
    t.partitions = vec![partition];
    vec![t]
}

/// AddPartitionsToTxn of partition 0 of `t`, in the form of version `v`; the codes.
async fn add_partition(
    c: &mut Client,
    v: i16,
    transactional_id: &str,
    (pid, epoch): (i64, i16),
    verify_only: bool,
) -> Vec<i16> {
    let mut req = AddPartitionsToTxnRequest::default();
    if v <= 3 {
        req.v3_and_below_transactional_id = id(transactional_id);
        req.v3_and_below_producer_id = ProducerId(pid);
        req.v3_and_below_producer_epoch = epoch;
        req.v3_and_below_topics = topics(0);
    } else {
        let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default();
        t.transactional_id = id(transactional_id);
        t.producer_id = ProducerId(pid);
        t.producer_epoch = epoch;
        t.verify_only = verify_only;
        t.topics = topics(0);
        req.transactions = vec![t];
    }
    let r = c.send(v, &req).await.expect("add partitions");
    let results = if v <= 3 {
        r.results_by_topic_v3_and_below
    } else {
        r.results_by_transaction
            .into_iter()
            .flat_map(|t| t.topic_results)
            .collect()
    };
    results
        .iter()
        .flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
        })
        .collect()
}

pub async fn check(c: &mut Client, api: ApiKey, v: i16) {
    let ctx = format!("{api:?} v{v}");
    let tid = format!("txn-{api:?}-{v}");
    match api {
        ApiKey::AddPartitionsToTxn => {
            let producer = init(c, &tid).await;
            if v >= 4 {
                let unverified = add_partition(c, v, &tid, producer, true).await;
                assert_eq!(
                    unverified,
                    [ResponseError::InvalidTxnState.code()],
                    "{ctx}: not added yet"
                );
            }
            assert_eq!(
                add_partition(c, v, &tid, producer, false).await,
                [0],
                "{ctx}"
            );
            if v >= 4 {
                assert_eq!(
                    add_partition(c, v, &tid, producer, true).await,
                    [0],
                    "{ctx}"
                );
            }
            let stale = (producer.0, producer.1 - 1);
            let fenced = if v >= 2 {
                ResponseError::ProducerFenced
            } else {
                ResponseError::InvalidProducerEpoch
            };
            assert_eq!(
                add_partition(c, v, &tid, stale, false).await,
                [fenced.code()],
                "{ctx}: an older epoch is fenced"
            );
        }
        ApiKey::AddOffsetsToTxn => {
            let (pid, epoch) = init(c, &tid).await;
            let mut req = AddOffsetsToTxnRequest::default();
            req.transactional_id = id(&tid);
            req.producer_id = ProducerId(pid);
            req.producer_epoch = epoch;
            req.group_id = GroupId(StrBytes::from_static_str("txn-group"));
            let r = c.send(v, &req).await.expect("add offsets");
            assert_eq!(r.error_code, 0, "{ctx}");
        }
        ApiKey::EndTxn => {
            let producer = init(c, &tid).await;
            assert_eq!(
                add_partition(c, 3, &tid, producer, false).await,
                [0],
                "{ctx}"
            );
            let mut req = EndTxnRequest::default();
            req.transactional_id = id(&tid);
            req.producer_id = ProducerId(producer.0);
            req.producer_epoch = producer.1;
            req.committed = true;
            let r = c.send(v, &req).await.expect("end txn");
            assert_eq!(r.error_code, 0, "{ctx}");
            if v >= 5 {
                assert_eq!(
                    (r.producer_id.0, r.producer_epoch),
                    (producer.0, producer.1 + 1),
                    "{ctx}: v2 bumps the epoch"
                );
            }
            // Nothing is open any more: a second abort is refused.
            let mut abort = req.clone();
            abort.committed = false;
            if v >= 5 {
                abort.producer_epoch = producer.1 + 1;
            }
            let r = c.send(v, &abort).await.expect("end txn");
            if v < 5 {
                assert_eq!(r.error_code, ResponseError::InvalidTxnState.code(), "{ctx}");
            }
        }
        ApiKey::TxnOffsetCommit => {
            let (pid, epoch) = init(c, &tid).await;
            let group = GroupId(StrBytes::from_string(format!("txn-group-{v}")));
            if v < 5 {
                let mut add = AddOffsetsToTxnRequest::default();
                add.transactional_id = id(&tid);
                add.producer_id = ProducerId(pid);
                add.producer_epoch = epoch;
                add.group_id = group.clone();
                assert_eq!(c.send(3, &add).await.expect("add").error_code, 0, "{ctx}");
            }
            let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
            p.partition_index = 0;
            p.committed_offset = 1;
            p.committed_leader_epoch = -1;
            let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
            t.name = name("t");
            t.partitions = vec![p];
            let mut req = TxnOffsetCommitRequest::default();
            req.transactional_id = id(&tid);
            req.group_id = group;
            req.producer_id = ProducerId(pid);
            req.producer_epoch = epoch;
            req.generation_id = -1;
            req.topics = vec![t];
            let r = c.send(v, &req).await.expect("txn offset commit");
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "{ctx}");
        }
        ApiKey::WriteTxnMarkers => {
            let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
            t.name = name("t");
            t.partition_indexes = vec![1];
            let mut m = write_txn_markers_request::WritableTxnMarker::default();
            m.producer_id = ProducerId(987_654);
            m.producer_epoch = 0;
            m.transaction_result = false;
            m.topics = vec![t];
            m.coordinator_epoch = 0;
            let mut req = WriteTxnMarkersRequest::default();
            req.markers = vec![m];
            let r = c.send(v, &req).await.expect("write markers");
            assert_eq!(r.markers[0].topics[0].partitions[0].error_code, 0, "{ctx}");
        }
        ApiKey::DescribeTransactions => {
            let (pid, _) = init(c, &tid).await;
            let mut req = DescribeTransactionsRequest::default();
            req.transactional_ids = vec![id(&tid), id("no-such-transaction")];
            let r = c.send(v, &req).await.expect("describe");
            assert_eq!(r.transaction_states[0].error_code, 0, "{ctx}");
            assert_eq!(
                r.transaction_states[0].transaction_state.as_str(),
                "Empty",
                "{ctx}"
            );
            assert_eq!(r.transaction_states[0].producer_id.0, pid, "{ctx}");
            assert_eq!(
                r.transaction_states[1].error_code,
                ResponseError::TransactionalIdNotFound.code(),
                "{ctx}"
            );
        }
        ApiKey::ListTransactions => {
            init(c, &tid).await;
            let r = c
                .send(v, &ListTransactionsRequest::default())
                .await
                .expect("list");
            assert_eq!(r.error_code, 0, "{ctx}");
            assert!(
                r.transaction_states
                    .iter()
                    .any(|t| t.transactional_id.0.as_str() == tid),
                "{ctx}"
            );
            let mut filtered = ListTransactionsRequest::default();
            filtered.state_filters = vec![StrBytes::from_static_str("NoSuchState")];
            let r = c.send(v, &filtered).await.expect("list");
            assert_eq!(r.unknown_state_filters.len(), 1, "{ctx}");
        }
        ApiKey::DescribeProducers => {
            let mut t = describe_producers_request::TopicRequest::default();
            t.name = name("t");
            t.partition_indexes = vec![0, 9];
            let mut req = DescribeProducersRequest::default();
            req.topics = vec![t];
            let r = c.send(v, &req).await.expect("describe producers");
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "{ctx}");
            assert_eq!(
                r.topics[0].partitions[1].error_code,
                ResponseError::UnknownTopicOrPartition.code(),
                "{ctx}"
            );
        }
        other => panic!("not a transaction API: {other:?}"),
    }
}
