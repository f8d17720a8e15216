//! Transactions for a caller: the transaction coordinator's calls ([`crate::txn`]),
//! producer ids, and the group coordinator's staging of transactional offsets, behind
//! the checks Kafka's broker makes of each transaction API (`KafkaApis`). The Kafka
//! handlers (`api/producer.rs`, `api/transactions.rs`, FindCoordinator in
//! `api/groups.rs`) translate their requests to these calls and the errors to Kafka
//! codes; no edge checks ACLs for them.
//!
//! | call | needs |
//! | --- | --- |
//! | [`Transacting::init_producer_id`] | WRITE on the transactional id; without one IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679) |
//! | [`Transacting::add_partitions`] | WRITE on the transactional id, then on every topic (if one is refused, none is added) |
//! | [`Transacting::verify_partitions`] | CLUSTER_ACTION (a broker's batched AddPartitionsToTxn, v4+) |
//! | [`Transacting::add_offsets`], [`Transacting::commit_offsets`] | WRITE on the transactional id, READ on the group (and on each topic committed to) |
//! | [`Transacting::end`] | WRITE on the transactional id |
//! | [`Transacting::write_markers`] | CLUSTER_ACTION |
//! | [`Transacting::describe`], [`Transacting::list`], [`Transacting::find_coordinator`] | DESCRIBE on the transactional id (a listing leaves the others out) |
//! | [`Transacting::producers`] | READ on the topic |
//! | [`Transacting::abort_on_partition`] (an operator's, over HTTP; audited) | ALTER on the cluster |

use std::collections::BTreeSet;
use std::sync::Arc;

use strata_log::txn::ControlRecord;
/// A transaction as the metastore keeps it: what `describe` and `list` answer.
pub use strata_metastore::TxnRecord;
use strata_metastore::{AgentRecord, CommittedOffset, TopicPartition};

use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::group::{Coordinator, GroupError};
use crate::membership::Membership;
use crate::producer_ids::ProducerIds;
use crate::replicas::{ReplicaManager, TopicState};
use crate::service::groups::Member;
use crate::txn::state::Ended;
use crate::txn::{Transactions, TxnError};

/// A producer in a transaction, as the transaction APIs name it.
#[derive(Debug, Clone, Copy)]
pub struct Producer<'a> {
    pub transactional_id: &'a str,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// One producer's markers, as WriteTxnMarkers asks them.
#[derive(Debug)]
pub struct Markers {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub control: ControlRecord,
    pub partitions: Vec<TopicPartition>,
}

/// What each partition's outcome is, in the order asked.
pub type Outcomes = Vec<(TopicPartition, Result<()>)>;

/// A producer of a partition as its leader knows it: id, epoch, last sequence, last
/// timestamp, coordinator epoch and the first offset of its open transaction (-1: none).
pub type ProducerRow = (i64, i16, i32, i64, i32, i64);

/// Why staging transactional offsets failed (told to each of their partitions).
#[derive(Debug)]
enum StagingError {
    Txn(TxnError),
    Group(GroupError),
}

/// The transaction service, on what it borrows from the broker (`Broker::transacting`).
pub struct Transacting<'a> {
    pub(crate) coordinator: &'a Arc<Transactions>,
    pub(crate) groups: &'a Arc<Coordinator>,
    pub(crate) producer_ids: &'a Arc<ProducerIds>,
    pub(crate) replicas: &'a Arc<ReplicaManager>,
    pub(crate) membership: &'a Arc<Membership>,
    pub(crate) authorizer: &'a Authorizer,
    pub(crate) audit: &'a crate::audit::Audit,
}

/// Why an operator's abort ([`Transacting::abort_on_partition`]) wrote no marker.
#[derive(Debug, thiserror::Error)]
pub enum AbortError {
    /// No replica of the partition here, or no transaction of the producer open on it.
    #[error("{0}")]
    NotFound(String),
    /// The transaction is live: its coordinator will end it.
    #[error("{0}")]
    NotHanging(String),
    #[error(transparent)]
    Refused(#[from] Error),
}

impl Transacting<'_> {
    /// May `who` do `operation` on the resource? A refusal is logged and counted by the
    /// authorizer.
    fn check(
        &self,
        who: &Caller,
        operation: Operation,
        resource: ResourceType,
        name: &str,
    ) -> Result<()> {
        if self
            .authorizer
            .allows(who.authz(), operation, resource, name)
        {
            return Ok(());
        }
        Err(Error::denied(who, operation, resource, name))
    }

    /// Without logging: for what is only filtered out of an answer.
    fn sees(&self, who: &Caller, resource: ResourceType, name: &str) -> bool {
        self.authorizer
            .decide(who.authz(), Operation::Describe, resource, name)
    }

    fn writes(&self, who: &Caller, producer: &Producer) -> Result<()> {
        self.check(
            who,
            Operation::Write,
            ResourceType::TransactionalId,
            producer.transactional_id,
        )
    }

    /// A producer id and epoch: with a `transactional_id`, the coordinator's (which
    /// fences every older producer of the id); without, the next epoch of the id a
    /// producer already has (KIP-360) or a new id.
    pub async fn init_producer_id(
        &self,
        who: &Caller,
        transactional_id: Option<&str>,
        timeout_ms: i64,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(i64, i16)> {
        if let Some(id) = transactional_id.filter(|id| !id.is_empty()) {
            self.check(who, Operation::Write, ResourceType::TransactionalId, id)?;
            return Ok(self
                .coordinator
                .init_producer_id(id, timeout_ms, producer_id, producer_epoch)
                .await?);
        }
        let idempotent =
            self.authorizer.decide(
                who.authz(),
                Operation::IdempotentWrite,
                ResourceType::Cluster,
                CLUSTER_NAME,
            ) || self
                .authorizer
                .allows_some(who.authz(), Operation::Write, ResourceType::Topic);
        if !idempotent {
            self.check(
                who,
                Operation::IdempotentWrite,
                ResourceType::Cluster,
                CLUSTER_NAME,
            )?;
        }
        // KIP-360: a producer that knows its id asks for the next epoch.
        if producer_id >= 0 && (0..i16::MAX - 1).contains(&producer_epoch) {
            return Ok((producer_id, producer_epoch + 1));
        }
        match self.producer_ids.next().await {
            Ok(id) => Ok((id, 0)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot reserve producer ids");
                Err(
                    TxnError::CoordinatorNotAvailable(format!("cannot reserve producer ids: {e}"))
                        .into(),
                )
            }
        }
    }

    /// The partitions of `partitions` that exist; when some do not, the outcomes to
    /// answer instead (those UNKNOWN_TOPIC_OR_PARTITION, the rest not attempted).
    fn known(
        &self,
        partitions: Vec<TopicPartition>,
    ) -> std::result::Result<Vec<TopicPartition>, Outcomes> {
        let exists = |(topic, p): &TopicPartition| {
            self.replicas
                .topic(topic)
                .is_some_and(|s| s.has_partition(*p))
        };
        if partitions.iter().all(exists) {
            return Ok(partitions);
        }
        Err(partitions
            .into_iter()
            .map(|tp| {
                let outcome = if exists(&tp) {
                    Err(Error::NotAttempted)
                } else {
                    Err(Error::UnknownTopicOrPartition {
                        topic: tp.0.clone(),
                        partition: tp.1,
                    })
                };
                (tp, outcome)
            })
            .collect())
    }

    /// AddPartitionsToTxn from a producer (v0–3): WRITE on the transactional id, then
    /// on every topic; if any is refused or unknown, none is added and the others are
    /// answered as not attempted, as Kafka answers.
    pub async fn add_partitions(
        &self,
        who: &Caller,
        producer: &Producer<'_>,
        partitions: Vec<TopicPartition>,
    ) -> Outcomes {
        let id = producer.transactional_id;
        if self.writes(who, producer).is_err() {
            let refused = |tp| {
                (
                    tp,
                    Err(Error::denied(
                        who,
                        Operation::Write,
                        ResourceType::TransactionalId,
                        id,
                    )),
                )
            };
            return partitions.into_iter().map(refused).collect();
        }
        let topics: BTreeSet<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
        let refused: BTreeSet<String> = topics
            .into_iter()
            .filter(|t| {
                self.check(who, Operation::Write, ResourceType::Topic, t)
                    .is_err()
            })
            .map(str::to_string)
            .collect();
        if !refused.is_empty() {
            return partitions
                .into_iter()
                .map(|tp| {
                    let outcome = if refused.contains(&tp.0) {
                        Err(Error::denied(
                            who,
                            Operation::Write,
                            ResourceType::Topic,
                            &tp.0,
                        ))
                    } else {
                        Err(Error::NotAttempted)
                    };
                    (tp, outcome)
                })
                .collect();
        }
        let known = match self.known(partitions) {
            Ok(known) => known,
            Err(outcomes) => return outcomes,
        };
        self.add(producer, known).await
    }

    /// Adds `known` (existing partitions) to the producer's transaction: every one
    /// gets the same outcome.
    async fn add(&self, producer: &Producer<'_>, known: Vec<TopicPartition>) -> Outcomes {
        let added = self
            .coordinator
            .add_partitions(
                producer.transactional_id,
                producer.producer_id,
                producer.producer_epoch,
                known.clone(),
                1,
                true,
            )
            .await;
        known
            .into_iter()
            .map(|tp| (tp, added.clone().map_err(Error::from)))
            .collect()
    }

    /// AddPartitionsToTxn from a broker (v4+, KIP-890), for several transactions: with
    /// `verify_only`, whether each partition is already in its transaction; else adds
    /// them. Needs CLUSTER_ACTION, for the whole request.
    pub async fn verify_partitions(
        &self,
        who: &Caller,
        transactions: Vec<(Producer<'_>, Vec<TopicPartition>, bool)>,
    ) -> Result<Vec<Outcomes>> {
        self.check(
            who,
            Operation::ClusterAction,
            ResourceType::Cluster,
            CLUSTER_NAME,
        )?;
        let mut out = Vec::with_capacity(transactions.len());
        for (producer, partitions, verify_only) in transactions {
            let known = match self.known(partitions) {
                Ok(known) => known,
                Err(outcomes) => {
                    out.push(outcomes);
                    continue;
                }
            };
            if !verify_only {
                out.push(self.add(&producer, known).await);
                continue;
            }
            let mut outcomes = Vec::with_capacity(known.len());
            for tp in known {
                let checked = self
                    .coordinator
                    .verify_partition(
                        producer.transactional_id,
                        producer.producer_id,
                        producer.producer_epoch,
                        tp.clone(),
                        false,
                    )
                    .await;
                outcomes.push((tp, checked.map_err(Error::from)));
            }
            out.push(outcomes);
        }
        Ok(out)
    }

    /// AddOffsetsToTxn: puts `group`'s offsets in the producer's transaction.
    pub async fn add_offsets(
        &self,
        who: &Caller,
        producer: &Producer<'_>,
        group: &str,
    ) -> Result<()> {
        self.writes(who, producer)?;
        self.check(who, Operation::Read, ResourceType::Group, group)?;
        if group.is_empty() {
            return Err(GroupError::InvalidGroupId.into());
        }
        Ok(self
            .coordinator
            .add_group(
                producer.transactional_id,
                producer.producer_id,
                producer.producer_epoch,
                group,
                1,
                true,
            )
            .await?)
    }

    /// EndTxn: commits or aborts the producer's transaction. `v5`: the producer bumps
    /// its epoch with each transaction (KIP-890).
    pub async fn end(
        &self,
        who: &Caller,
        producer: &Producer<'_>,
        commit: bool,
        v5: bool,
    ) -> Result<Ended> {
        self.writes(who, producer)?;
        Ok(self
            .coordinator
            .end(
                producer.transactional_id,
                producer.producer_id,
                producer.producer_epoch,
                commit,
                v5,
            )
            .await?)
    }

    /// TxnOffsetCommit: stages `offsets` for `group` in the producer's transaction,
    /// committed when it commits. WRITE on the transactional id and READ on the group
    /// decide for all; READ on each topic for its partitions. `adds_group` (v5+): the
    /// group is added to the transaction here, else it must be in it already.
    pub async fn commit_offsets(
        &self,
        who: &Caller,
        producer: &Producer<'_>,
        group: &str,
        member: &Member<'_>,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        adds_group: bool,
    ) -> Outcomes {
        let whole = if self.writes(who, producer).is_err() {
            Some((
                Operation::Write,
                ResourceType::TransactionalId,
                producer.transactional_id,
            ))
        } else if self
            .check(who, Operation::Read, ResourceType::Group, group)
            .is_err()
        {
            Some((Operation::Read, ResourceType::Group, group))
        } else {
            None
        };
        if let Some((operation, resource, name)) = whole {
            return offsets
                .into_iter()
                .map(|(tp, _)| (tp, Err(Error::denied(who, operation, resource, name))))
                .collect();
        }
        let mut outcomes: Outcomes = Vec::new();
        let mut allowed_topics: std::collections::HashMap<String, bool> =
            std::collections::HashMap::new();
        let mut staged = Vec::new();
        for (tp, offset) in offsets {
            let allowed = match allowed_topics.get(&tp.0) {
                Some(ok) => *ok,
                None => {
                    let ok = self
                        .check(who, Operation::Read, ResourceType::Topic, &tp.0)
                        .is_ok();
                    allowed_topics.insert(tp.0.clone(), ok);
                    ok
                }
            };
            if !allowed {
                let refused = Error::denied(who, Operation::Read, ResourceType::Topic, &tp.0);
                outcomes.push((tp, Err(refused)));
            } else if !self
                .replicas
                .topic(&tp.0)
                .is_some_and(|s| s.has_partition(tp.1))
            {
                let unknown = Error::UnknownTopicOrPartition {
                    topic: tp.0.clone(),
                    partition: tp.1,
                };
                outcomes.push((tp, Err(unknown)));
            } else {
                staged.push((tp, offset));
            }
        }
        if staged.is_empty() {
            return outcomes;
        }
        let done = self
            .stage(producer, group, member, &staged, adds_group)
            .await;
        outcomes.extend(staged.into_iter().map(|(tp, _)| {
            let outcome = match &done {
                Ok(()) => Ok(()),
                Err(StagingError::Txn(e)) => Err(Error::Transaction(e.clone())),
                Err(StagingError::Group(e)) => Err(Error::Group(*e)),
            };
            (tp, outcome)
        }));
        outcomes
    }

    async fn stage(
        &self,
        producer: &Producer<'_>,
        group: &str,
        member: &Member<'_>,
        offsets: &[(TopicPartition, CommittedOffset)],
        adds_group: bool,
    ) -> std::result::Result<(), StagingError> {
        if group.is_empty() {
            return Err(StagingError::Group(GroupError::InvalidGroupId));
        }
        let (id, pid, epoch) = (
            producer.transactional_id,
            producer.producer_id,
            producer.producer_epoch,
        );
        let in_transaction = if adds_group {
            self.coordinator
                .add_group(id, pid, epoch, group, 2, false)
                .await
        } else {
            self.coordinator.verify_group(id, pid, epoch, group).await
        };
        in_transaction.map_err(StagingError::Txn)?;
        self.groups
            .stage_txn_commit(
                group,
                member.member_id,
                member.group_instance_id,
                member.generation_id,
                pid,
                offsets.to_vec(),
            )
            .await
            .map_err(StagingError::Group)
    }

    /// WriteTxnMarkers (another agent's coordinator, or an operator's AbortTransaction,
    /// KIP-664): each marker committed before its outcome. Needs CLUSTER_ACTION, for the
    /// whole request.
    pub async fn write_markers(
        &self,
        who: &Caller,
        markers: Vec<Markers>,
    ) -> Result<Vec<Outcomes>> {
        self.check(
            who,
            Operation::ClusterAction,
            ResourceType::Cluster,
            CLUSTER_NAME,
        )?;
        let mut out = Vec::with_capacity(markers.len());
        for m in markers {
            let mut outcomes = Vec::with_capacity(m.partitions.len());
            for tp in m.partitions {
                let written = crate::txn::write_marker(
                    self.replicas,
                    &tp.0,
                    tp.1,
                    m.producer_id,
                    m.producer_epoch,
                    m.control,
                )
                .await;
                outcomes.push((tp, written.map(|_| ())));
            }
            out.push(outcomes);
        }
        Ok(out)
    }

    /// DescribeTransactions: each id's transaction, for a caller with DESCRIBE on it;
    /// the partitions of topics it may not describe are left out, as Kafka does.
    pub async fn describe(&self, who: &Caller, transactional_id: &str) -> Result<TxnRecord> {
        self.check(
            who,
            Operation::Describe,
            ResourceType::TransactionalId,
            transactional_id,
        )?;
        let mut record = self.coordinator.describe(transactional_id, true).await?;
        record
            .partitions
            .retain(|(topic, _)| self.sees(who, ResourceType::Topic, topic));
        Ok(record)
    }

    /// ListTransactions: the transactions this agent coordinates whose ids the caller
    /// may describe.
    pub async fn list(&self, who: &Caller) -> Result<Vec<(String, TxnRecord)>> {
        let mut all = self.coordinator.list(true).await?;
        all.retain(|(id, _)| self.sees(who, ResourceType::TransactionalId, id));
        Ok(all)
    }

    /// The agent that coordinates `transactional_id`, for a caller with DESCRIBE on it.
    pub fn find_coordinator(&self, who: &Caller, transactional_id: &str) -> Result<AgentRecord> {
        self.check(
            who,
            Operation::Describe,
            ResourceType::TransactionalId,
            transactional_id,
        )?;
        Ok(self.membership.coordinator_of(transactional_id))
    }

    /// DescribeProducers (KIP-664): each partition's producers as its leader knows them,
    /// for a caller with READ on the topic (`Err` for the whole topic otherwise).
    pub fn producers(
        &self,
        who: &Caller,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<(i32, Result<Vec<ProducerRow>>)>> {
        self.check(who, Operation::Read, ResourceType::Topic, topic)?;
        let state = self.replicas.topic(topic);
        Ok(partitions
            .iter()
            .map(|&p| {
                let rows = TopicState::served_in(state.as_ref(), topic, p)
                    .map(|partition| partition.producers());
                (p, rows)
            })
            .collect())
    }

    /// Ends a transaction open on `partition` of `topic`, led here, with an abort marker
    /// (KIP-664's AbortTransaction, as an operator asks it over HTTP): only an open
    /// transaction of `producer_id`, and unless `force` only a hanging one (its
    /// coordinator does not count the partition in it, so no marker will come):
    /// aborting a live one would tear it, its later writes committing without these.
    /// `coordinator_epoch`: the partition's last one when not given. For a caller with
    /// ALTER on the cluster. Audited (`transaction.abort`), refusals included. The
    /// marker's offset.
    #[allow(clippy::too_many_arguments)]
    pub async fn abort_on_partition(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: Option<i32>,
        force: bool,
    ) -> std::result::Result<i64, AbortError> {
        let outcome = self
            .abort_checked(
                who,
                topic,
                partition,
                (producer_id, producer_epoch),
                coordinator_epoch,
                force,
            )
            .await;
        let request = serde_json::json!({
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "coordinator_epoch": coordinator_epoch,
            "force": force,
        });
        let recorded = match &outcome {
            Ok(offset) => Ok(serde_json::json!({ "marker_offset": offset })),
            Err(e) => Err(e.to_string()),
        };
        let resource = format!("partition:{topic}-{partition}");
        self.audit
            .record(who, "transaction.abort", &resource, request, recorded);
        outcome
    }

    async fn abort_checked(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
        (producer_id, producer_epoch): (i64, i16),
        coordinator_epoch: Option<i32>,
        force: bool,
    ) -> std::result::Result<i64, AbortError> {
        self.check(who, Operation::Alter, ResourceType::Cluster, CLUSTER_NAME)?;
        let state = self.replicas.topic(topic);
        let Some(replica) = state.as_ref().and_then(|t| t.replica(partition)) else {
            return Err(AbortError::NotFound(format!(
                "no partition {topic}-{partition} has a replica on this agent"
            )));
        };
        let open = self
            .coordinator
            .open_on_partitions()
            .await
            .into_iter()
            .find(|o| {
                o.topic == topic && o.partition == partition && o.open.producer_id == producer_id
            });
        match open {
            None if !force => {
                return Err(AbortError::NotFound(format!(
                    "producer {producer_id} has no transaction open on {topic}-{partition} here"
                )));
            }
            Some(o) if !o.hanging && !force => {
                return Err(AbortError::NotHanging(format!(
                    "producer {producer_id}'s transaction on {topic}-{partition} is not hanging: its coordinator will end it (add \"force\": true to abort it anyway, which tears it)"
                )));
            }
            _ => {}
        }
        let coordinator_epoch = coordinator_epoch.unwrap_or_else(|| {
            replica
                .producers()
                .into_iter()
                .find(|p| p.0 == producer_id)
                .map_or(0, |p| p.4.max(0))
        });
        Ok(self
            .coordinator
            .abort_on_partition(
                topic,
                partition,
                producer_id,
                producer_epoch,
                coordinator_epoch,
            )
            .await?)
    }
}
