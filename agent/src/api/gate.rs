//! Authorization of the Kafka API: every request is checked here, from its context,
//! before its handler runs, with the operations Kafka's own broker requires of each API
//! (`KafkaApis`), and answered with the same codes.
//!
//! A request is either refused whole (JoinGroup without READ on its group: the handler
//! never runs), or narrowed: the resources the principal may not touch are taken out
//! before the handler sees the request (so nothing happens to them) and put back into
//! the answer with their error, TOPIC_AUTHORIZATION_FAILED and the like. Reads that
//! change nothing (Metadata, OffsetFetch, DescribeGroups, ...) are answered by their
//! handler and then filtered: what the principal may not describe is hidden (a listing)
//! or replaced by its error (a resource it named). KIP-430's authorized-operation
//! fields get the principal's real set.
//!
//! Produce, Fetch, ListOffsets and OffsetForLeaderEpoch (the produce, fetch and offsets
//! services' permits), Metadata and DescribeCluster (the topic service), the security APIs
//! (ACLs, SCRAM users, client quotas), the topic APIs (CreateTopics,
//! DeleteTopics, CreatePartitions, and Metadata's auto-creation), the config APIs
//! (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs) and the group APIs
//! (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
//! DescribeGroups, DeleteGroups, OffsetDelete) and the placement APIs
//! (AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders) and
//! DeleteRecords are not checked here: their services decide (`service/produce.rs`,
//! `fetch.rs`, `offsets.rs`, `security.rs`, `admin.rs`, `configs.rs`, `groups.rs`, `placement.rs`,
//! `lifecycle.rs`), for both edges; the other APIs are to follow.
//!
//! With no authorizer configured nothing here runs.

use std::net::IpAddr;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::authz::{Authorizer, CLUSTER_NAME, Caller, Operation, ResourceType};
use crate::broker::Broker;
use crate::context::{Principal, RequestContext};

use Operation as Op;
use ResourceType as R;

/// What completes a narrowed request's answer.
pub type Fixup = Box<dyn FnOnce(&mut ResponseKind) + Send>;

/// The gate's verdict on one request.
pub enum Gate {
    /// Refused whole: this is the answer, and the handler does not run.
    Refused(ResponseKind),
    /// Handle this (perhaps narrowed) request, then complete the answer with the fixup.
    Proceed(RequestKind, Option<Fixup>),
}

fn proceed(
    request: impl Into<RequestKind>,
    fixup: impl FnOnce(&mut ResponseKind) + Send + 'static,
) -> Gate {
    Gate::Proceed(request.into(), Some(Box::new(fixup)))
}

const TOPIC_DENIED: i16 = 29; // TOPIC_AUTHORIZATION_FAILED
const GROUP_DENIED: i16 = 30; // GROUP_AUTHORIZATION_FAILED
const CLUSTER_DENIED: i16 = 31; // CLUSTER_AUTHORIZATION_FAILED
const TXN_DENIED: i16 = 53; // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
const NOT_ATTEMPTED: i16 = 55; // OPERATION_NOT_ATTEMPTED

fn msg(code: i16) -> Option<StrBytes> {
    let text = ResponseError::try_from_code(code)
        .map(|e| e.to_string())
        .unwrap_or_default();
    Some(StrBytes::from_string(text))
}

/// The checks of one request, for its caller; owned, so that a fixup can take it
/// along to the answer.
#[derive(Clone)]
struct Check {
    az: Arc<Authorizer>,
    principal: Principal,
    host: IpAddr,
}

impl Check {
    fn who(&self) -> Caller<'_> {
        Caller {
            principal: &self.principal,
            host: self.host,
        }
    }

    fn may(&self, op: Operation, kind: ResourceType, name: &str) -> bool {
        self.az.allows(self.who(), op, kind, name)
    }

    /// Without logging or counting a denial: for what is only filtered.
    fn sees(&self, op: Operation, kind: ResourceType, name: &str) -> bool {
        self.az.decide(self.who(), op, kind, name)
    }

    fn on_cluster(&self, op: Operation) -> bool {
        self.may(op, R::Cluster, CLUSTER_NAME)
    }
}

/// Checks `request` for the caller of `ctx`.
pub fn check(broker: &Broker, ctx: &RequestContext, request: RequestKind) -> Gate {
    let az = broker.authorizer();
    if !az.is_enabled() {
        return Gate::Proceed(request, None);
    }
    let c = Check {
        az: Arc::clone(az),
        principal: ctx.principal().clone(),
        host: ctx.peer().ip(),
    };
    let version = ctx.api_version;
    match request {
        RequestKind::FindCoordinator(r) => find_coordinator(&c, r, version),
        RequestKind::InitProducerId(r) => init_producer_id(&c, r),
        RequestKind::AddPartitionsToTxn(r) => add_partitions_to_txn(&c, r, version),
        RequestKind::AddOffsetsToTxn(r) => {
            let code = if !c.may(Op::Write, R::TransactionalId, &r.transactional_id) {
                TXN_DENIED
            } else if !c.may(Op::Read, R::Group, &r.group_id) {
                GROUP_DENIED
            } else {
                return Gate::Proceed(r.into(), None);
            };
            let mut resp = AddOffsetsToTxnResponse::default();
            resp.error_code = code;
            Gate::Refused(resp.into())
        }
        RequestKind::EndTxn(r) => {
            if c.may(Op::Write, R::TransactionalId, &r.transactional_id) {
                return Gate::Proceed(r.into(), None);
            }
            let mut resp = EndTxnResponse::default();
            resp.error_code = TXN_DENIED;
            resp.producer_id = ProducerId(-1);
            resp.producer_epoch = -1;
            Gate::Refused(resp.into())
        }
        RequestKind::TxnOffsetCommit(r) => txn_offset_commit(&c, r),
        RequestKind::WriteTxnMarkers(r) => {
            if c.on_cluster(Op::ClusterAction) {
                return Gate::Proceed(r.into(), None);
            }
            let mut resp = WriteTxnMarkersResponse::default();
            resp.markers = r
                .markers
                .iter()
                .map(|m| {
                    let mut out = write_txn_markers_response::WritableTxnMarkerResult::default();
                    out.producer_id = m.producer_id;
                    out.topics = m
                        .topics
                        .iter()
                        .map(|t| {
                            let mut tr =
                                write_txn_markers_response::WritableTxnMarkerTopicResult::default();
                            tr.name = t.name.clone();
                            tr.partitions = t
                                .partition_indexes
                                .iter()
                                .map(|p| {
                                    let mut pr = write_txn_markers_response::WritableTxnMarkerPartitionResult::default();
                                    pr.partition_index = *p;
                                    pr.error_code = CLUSTER_DENIED;
                                    pr
                                })
                                .collect();
                            tr
                        })
                        .collect();
                    out
                })
                .collect();
            Gate::Refused(resp.into())
        }
        RequestKind::DescribeTransactions(r) => describe_transactions(&c, r),
        RequestKind::ListTransactions(r) => list_transactions(&c, r),
        RequestKind::DescribeProducers(r) => describe_producers(&c, r),
        // ACLs, SCRAM users and client quotas: the security service decides
        // (`service/security.rs`, asked in `api/mod.rs`).
        // ApiVersions and the SASL exchange need no authorization; any other API has
        // no handler and closes the connection.
        other => Gate::Proceed(other, None),
    }
}

fn find_coordinator(c: &Check, mut r: FindCoordinatorRequest, version: i16) -> Gate {
    // Key type 0: a group (DESCRIBE on it); 1: a transactional id (DESCRIBE on it).
    let denied_code = |key: &str| match r.key_type {
        0 if !c.may(Op::Describe, R::Group, key) => Some(GROUP_DENIED),
        1 if !c.may(Op::Describe, R::TransactionalId, key) => Some(TXN_DENIED),
        _ => None,
    };
    if version < 4 {
        let Some(code) = denied_code(&r.key) else {
            return Gate::Proceed(r.into(), None);
        };
        let mut resp = FindCoordinatorResponse::default();
        resp.error_code = code;
        if version >= 1 {
            resp.error_message = msg(code);
        }
        resp.node_id = BrokerId(-1);
        resp.port = -1;
        return Gate::Refused(resp.into());
    }
    let mut denied: Vec<(StrBytes, i16)> = Vec::new();
    let keys = std::mem::take(&mut r.coordinator_keys);
    for key in keys {
        match denied_code(&key) {
            Some(code) => denied.push((key, code)),
            None => r.coordinator_keys.push(key),
        }
    }
    if denied.is_empty() {
        return Gate::Proceed(r.into(), None);
    }
    proceed(r, move |resp| {
        if let ResponseKind::FindCoordinator(resp) = resp {
            for (key, code) in denied {
                let mut co = find_coordinator_response::Coordinator::default();
                co.key = key;
                co.node_id = BrokerId(-1);
                co.port = -1;
                co.error_code = code;
                co.error_message = msg(code);
                resp.coordinators.push(co);
            }
        }
    })
}

fn init_producer_id(c: &Check, r: InitProducerIdRequest) -> Gate {
    // A transactional producer needs WRITE on its transactional id; an idempotent one
    // IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
    let code = match r.transactional_id.as_ref().filter(|id| !id.is_empty()) {
        Some(id) if !c.may(Op::Write, R::TransactionalId, id) => TXN_DENIED,
        Some(_) => return Gate::Proceed(r.into(), None),
        None if c.sees(Op::IdempotentWrite, R::Cluster, CLUSTER_NAME)
            || c.az.allows_some(c.who(), Op::Write, R::Topic) =>
        {
            return Gate::Proceed(r.into(), None);
        }
        None => {
            c.on_cluster(Op::IdempotentWrite);
            CLUSTER_DENIED
        }
    };
    let mut resp = InitProducerIdResponse::default();
    resp.error_code = code;
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    Gate::Refused(resp.into())
}

fn add_partitions_to_txn(c: &Check, r: AddPartitionsToTxnRequest, version: i16) -> Gate {
    use add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    // v4+ is the brokers' batched verification: CLUSTER_ACTION.
    if version >= 4 {
        if c.on_cluster(Op::ClusterAction) {
            return Gate::Proceed(r.into(), None);
        }
        let mut resp = AddPartitionsToTxnResponse::default();
        resp.error_code = CLUSTER_DENIED;
        return Gate::Refused(resp.into());
    }
    // v0-3: WRITE on the transactional id, then on every topic; if any topic is
    // denied, none is added (the others OPERATION_NOT_ATTEMPTED), as Kafka.
    let txn_ok = c.may(
        Op::Write,
        R::TransactionalId,
        &r.v3_and_below_transactional_id,
    );
    let topic_ok: Vec<bool> = r
        .v3_and_below_topics
        .iter()
        .map(|t| txn_ok && c.may(Op::Write, R::Topic, &t.name))
        .collect();
    if txn_ok && topic_ok.iter().all(|ok| *ok) {
        return Gate::Proceed(r.into(), None);
    }
    let mut resp = AddPartitionsToTxnResponse::default();
    resp.results_by_topic_v3_and_below = r
        .v3_and_below_topics
        .into_iter()
        .zip(topic_ok)
        .map(|(t, ok)| {
            let code = match (txn_ok, ok) {
                (false, _) => TXN_DENIED,
                (true, false) => TOPIC_DENIED,
                (true, true) => NOT_ATTEMPTED,
            };
            let mut res = AddPartitionsToTxnTopicResult::default();
            res.name = t.name;
            res.results_by_partition = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut pr = AddPartitionsToTxnPartitionResult::default();
                    pr.partition_index = p;
                    pr.partition_error_code = code;
                    pr
                })
                .collect();
            res
        })
        .collect();
    Gate::Refused(resp.into())
}

fn txn_offset_commit(c: &Check, mut r: TxnOffsetCommitRequest) -> Gate {
    use txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };
    let answer = |topics: Vec<(TopicName, Vec<i32>)>, code: i16| {
        topics.into_iter().map(move |(name, partitions)| {
            let mut t = TxnOffsetCommitResponseTopic::default();
            t.name = name;
            t.partitions = partitions
                .into_iter()
                .map(|i| {
                    let mut p = TxnOffsetCommitResponsePartition::default();
                    p.partition_index = i;
                    p.error_code = code;
                    p
                })
                .collect();
            t
        })
    };
    let listed = |t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic| {
        (
            t.name.clone(),
            t.partitions
                .iter()
                .map(|p| p.partition_index)
                .collect::<Vec<_>>(),
        )
    };
    let whole = if !c.may(Op::Write, R::TransactionalId, &r.transactional_id) {
        Some(TXN_DENIED)
    } else if !c.may(Op::Read, R::Group, &r.group_id) {
        Some(GROUP_DENIED)
    } else {
        None
    };
    if let Some(code) = whole {
        let mut resp = TxnOffsetCommitResponse::default();
        resp.topics = answer(r.topics.iter().map(listed).collect(), code).collect();
        return Gate::Refused(resp.into());
    }
    let mut denied = Vec::new();
    r.topics.retain(|t| {
        let ok = c.may(Op::Read, R::Topic, &t.name);
        if !ok {
            denied.push(listed(t));
        }
        ok
    });
    if denied.is_empty() {
        return Gate::Proceed(r.into(), None);
    }
    proceed(r, move |resp| {
        if let ResponseKind::TxnOffsetCommit(resp) = resp {
            resp.topics.extend(answer(denied, TOPIC_DENIED));
        }
    })
}

fn describe_transactions(c: &Check, r: DescribeTransactionsRequest) -> Gate {
    let c = c.clone();
    proceed(r, move |resp| {
        if let ResponseKind::DescribeTransactions(resp) = resp {
            for t in &mut resp.transaction_states {
                if !c.may(Op::Describe, R::TransactionalId, &t.transactional_id) {
                    let id = std::mem::take(&mut t.transactional_id);
                    *t = describe_transactions_response::TransactionState::default();
                    t.transactional_id = id;
                    t.error_code = TXN_DENIED;
                    t.producer_id = ProducerId(-1);
                    t.producer_epoch = -1;
                } else {
                    // The topics of the transaction the caller may not describe are
                    // left out, as Kafka does.
                    t.topics
                        .retain(|d| c.sees(Op::Describe, R::Topic, &d.topic));
                }
            }
        }
    })
}

fn list_transactions(c: &Check, r: ListTransactionsRequest) -> Gate {
    let c = c.clone();
    proceed(r, move |resp| {
        if let ResponseKind::ListTransactions(resp) = resp {
            resp.transaction_states
                .retain(|t| c.sees(Op::Describe, R::TransactionalId, &t.transactional_id));
        }
    })
}

fn describe_producers(c: &Check, r: DescribeProducersRequest) -> Gate {
    let c = c.clone();
    proceed(r, move |resp| {
        if let ResponseKind::DescribeProducers(resp) = resp {
            for t in &mut resp.topics {
                if !c.may(Op::Read, R::Topic, &t.name) {
                    for p in &mut t.partitions {
                        p.error_code = TOPIC_DENIED;
                        p.error_message = msg(TOPIC_DENIED);
                        p.active_producers.clear();
                    }
                }
            }
        }
    })
}
