//! Transactions in the metastore: the coordinator's record of each transactional id,
//! and the offsets a transaction has sent for a group and not yet committed.
//!
//! | key                                                        | value           | written by |
//! |------------------------------------------------------------|-----------------|------------|
//! | (prefix, "txn", transactional id)                          | TxnRecord       | the transaction coordinator; a partition leader adding itself (KIP-890) |
//! | (prefix, "txnoffset", group, producer id, topic, partition) | CommittedOffset | the group coordinator (TxnOffsetCommit) |
//!
//! The record is the coordinator's whole state, so a new coordinator resumes any
//! transaction where the old one left it. Every change is one metastore transaction
//! that reads the record and derives the new one from it, so concurrent changes (the
//! coordinator ending a transaction while a leader adds a partition to it) serialize.
//! Ending a transaction moves or drops its pending offsets in the same metastore
//! transaction that records the decision: a commit's offsets are the group's the moment
//! the commit is decided, and an abort's are never seen.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::groups::{CommittedOffset, GroupRecord, TopicPartition};
use crate::keys::Key;
use crate::kv::prefix_end;
use crate::topics::{Metastore, decode, encode};

/// Kafka's transaction states (`TransactionState`), by their names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    /// The name Kafka's tools print (DescribeTransactions, ListTransactions).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// Whether markers are being written (the decision is made, not yet complete).
    pub fn is_prepared(self) -> bool {
        matches!(
            self,
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence
        )
    }
}

/// The coordinator's record of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecord {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The producer id and epoch before the last bump (KIP-890: a retried EndTxn from
    /// the epoch just ended is recognised); -1 if none.
    pub last_producer_id: i64,
    pub last_producer_epoch: i16,
    pub state: TxnState,
    /// The partitions written in the current (or last) transaction.
    pub partitions: BTreeSet<TopicPartition>,
    /// The groups whose offsets the transaction carries (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    pub timeout_ms: i64,
    /// When the current transaction began (its first partition), -1 if none.
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// Bumped by each coordinator that takes the record over to write markers, so that
    /// partitions refuse a deposed coordinator's late markers.
    pub coordinator_epoch: i32,
    /// The transaction protocol version the producer speaks (1, or 2 for KIP-890's).
    pub version: i16,
}

/// What a change to a transaction record does besides writing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    Nothing,
    /// Commit the producer's pending offsets in the record's groups.
    CommitOffsets,
    /// Drop them.
    DropOffsets,
}

/// The outcome of a change function: the record to write (`None`: leave it as it was),
/// what to do with the pending offsets, and the answer for the caller.
#[derive(Debug, Clone)]
pub struct Change<T> {
    pub record: Option<TxnRecord>,
    pub settle: Settle,
    pub answer: T,
}

impl<T> Change<T> {
    /// Leaves everything as it is and answers `answer`.
    pub fn answer(answer: T) -> Change<T> {
        Change {
            record: None,
            settle: Settle::Nothing,
            answer,
        }
    }

    pub fn write(record: TxnRecord, answer: T) -> Change<T> {
        Change {
            record: Some(record),
            settle: Settle::Nothing,
            answer,
        }
    }
}

impl Metastore {
    fn txn_key(&self, transactional_id: &str) -> Key {
        self.key().str("txn").str(transactional_id)
    }

    fn txn_offset_prefix(&self, group: &str) -> Key {
        self.key().str("txnoffset").str(group)
    }

    /// The record of `transactional_id`, if it has one.
    pub async fn transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>> {
        let key = self.txn_key(transactional_id).into_bytes();
        self.transact(move |txn| {
            let key = key.clone();
            async move {
                match txn.get(&key).await? {
                    Some(v) => Ok(Some(decode(&key, &v)?)),
                    None => Ok(None),
                }
            }
            .boxed()
        })
        .await
    }

    /// Every transaction record, by transactional id.
    pub async fn transactions(&self) -> Result<Vec<(String, TxnRecord)>> {
        let begin = self.key().str("txn").into_bytes();
        self.transact(move |txn| {
            let begin = begin.clone();
            async move {
                let mut out = Vec::new();
                for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    let (id, _) =
                        crate::groups::decode_str(&k[begin.len()..]).ok_or_else(|| {
                            Error::Corrupt {
                                key: String::from_utf8_lossy(&k).into_owned(),
                                reason: "transaction key does not end in a string".to_string(),
                            }
                        })?;
                    out.push((id, decode(&k, &v)?));
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    /// Changes the record of `transactional_id` as `change` decides from what is there
    /// now, in one metastore transaction (`change` may run more than once, on retries).
    /// A `Settle` other than `Nothing` commits or drops the pending offsets of the
    /// producer the record had, in the groups it had, in the same transaction.
    pub async fn change_transaction<T, F>(&self, transactional_id: &str, change: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(Option<&TxnRecord>) -> Result<Change<T>> + Send + Sync + 'static,
    {
        let this = self.clone();
        let key = self.txn_key(transactional_id).into_bytes();
        let change = Arc::new(change);
        self.transact(move |txn| {
            let (this, key, change) = (this.clone(), key.clone(), Arc::clone(&change));
            async move {
                let current: Option<TxnRecord> = match txn.get(&key).await? {
                    Some(v) => Some(decode(&key, &v)?),
                    None => None,
                };
                let Change {
                    record,
                    settle,
                    answer,
                } = change(current.as_ref())?;
                if settle != Settle::Nothing
                    && let Some(before) = &current
                {
                    for group in &before.groups {
                        let prefix = this
                            .txn_offset_prefix(group)
                            .u64(before.producer_id as u64)
                            .into_bytes();
                        let end = prefix_end(&prefix);
                        if settle == Settle::CommitOffsets {
                            let pending = txn.get_range(&prefix, &end, 0, false).await?;
                            if !pending.is_empty() {
                                let gk = this.key().str("group").str(group).into_bytes();
                                if txn.get(&gk).await?.is_none() {
                                    txn.set(
                                        &gk,
                                        &encode(&GroupRecord {
                                            protocol_type: "consumer".to_string(),
                                        }),
                                    );
                                }
                            }
                            for (k, v) in pending {
                                let offset_key = this
                                    .key()
                                    .str("offset")
                                    .str(group)
                                    .into_bytes()
                                    .into_iter()
                                    .chain(k[prefix.len()..].iter().copied())
                                    .collect::<Vec<u8>>();
                                txn.set(&offset_key, &v);
                            }
                        }
                        txn.clear_range(&prefix, &end);
                    }
                }
                if let Some(record) = &record {
                    txn.set(&key, &encode(record));
                }
                Ok(answer)
            }
            .boxed()
        })
        .await
    }

    /// Deletes the record of `transactional_id` (an expired id).
    pub async fn delete_transaction(&self, transactional_id: &str) -> Result<()> {
        let key = self.txn_key(transactional_id).into_bytes();
        self.transact(move |txn| {
            let key = key.clone();
            async move {
                txn.clear(&key);
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Stages offsets `producer_id` sent for `group` in its transaction (TxnOffsetCommit):
    /// the group sees them only once the transaction commits.
    pub async fn stage_txn_offsets(
        &self,
        group: &str,
        producer_id: i64,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
    ) -> Result<()> {
        let prefix = self.txn_offset_prefix(group).u64(producer_id as u64);
        self.transact(move |txn| {
            let (prefix, offsets) = (prefix.clone(), offsets.clone());
            async move {
                for ((topic, partition), committed) in &offsets {
                    let k = prefix
                        .clone()
                        .str(topic)
                        .u32(*partition as u32)
                        .into_bytes();
                    txn.set(&k, &encode(committed));
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// The partitions of `group` with offsets staged by an open transaction, and by
    /// which producers (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT
    /// for them, KIP-447).
    pub async fn pending_txn_offsets(
        &self,
        group: &str,
    ) -> Result<BTreeMap<TopicPartition, BTreeSet<i64>>> {
        let begin = self.txn_offset_prefix(group).into_bytes();
        self.transact(move |txn| {
            let begin = begin.clone();
            async move {
                let mut out: BTreeMap<TopicPartition, BTreeSet<i64>> = BTreeMap::new();
                for (k, _) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    let rest = &k[begin.len()..];
                    let parsed = rest
                        .strip_prefix(&[0x19])
                        .and_then(|r| Some((r.get(..8)?, r.get(8..)?)))
                        .and_then(|(pid, tp)| {
                            let pid = i64::from_be_bytes(pid.try_into().ok()?);
                            Some((pid, crate::groups::decode_topic_partition(tp)?))
                        });
                    let (pid, tp) = parsed.ok_or_else(|| Error::Corrupt {
                        key: String::from_utf8_lossy(&k).into_owned(),
                        reason: "pending offset key does not end in (producer, topic, partition)"
                            .to_string(),
                    })?;
                    out.entry(tp).or_default().insert(pid);
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: i64, state: TxnState, groups: &[&str]) -> TxnRecord {
        TxnRecord {
            producer_id: pid,
            producer_epoch: 0,
            last_producer_id: -1,
            last_producer_epoch: -1,
            state,
            partitions: BTreeSet::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            timeout_ms: 60_000,
            start_ms: 1,
            last_update_ms: 1,
            coordinator_epoch: 0,
            version: 1,
        }
    }

    fn offset(n: i64) -> CommittedOffset {
        CommittedOffset {
            offset: n,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp_ms: 5,
        }
    }

    #[tokio::test]
    async fn records_and_offsets_settle_with_the_decision() {
        for (_, m, _dir) in crate::test_metastores() {
            records_and_offsets_settle_on(m).await;
        }
    }

    async fn records_and_offsets_settle_on(m: Metastore) {
        for (id, pid) in [("commits", 7), ("aborts", 8)] {
            m.change_transaction(id, move |_| {
                Ok(Change::write(record(pid, TxnState::Ongoing, &["g"]), ()))
            })
            .await
            .expect("create");
            m.stage_txn_offsets("g", pid, vec![(("t".to_string(), pid as i32), offset(pid))])
                .await
                .expect("stage");
        }
        let pending = m.pending_txn_offsets("g").await.expect("pending");
        assert_eq!(pending.len(), 2);
        assert_eq!(pending[&("t".to_string(), 7)], BTreeSet::from([7]));
        for (id, settle, state) in [
            ("commits", Settle::CommitOffsets, TxnState::PrepareCommit),
            ("aborts", Settle::DropOffsets, TxnState::PrepareAbort),
        ] {
            m.change_transaction(id, move |r| {
                let mut r = r.cloned().expect("record");
                r.state = state;
                Ok(Change {
                    record: Some(r),
                    settle,
                    answer: (),
                })
            })
            .await
            .expect("end");
        }
        assert!(
            m.pending_txn_offsets("g")
                .await
                .expect("pending")
                .is_empty()
        );
        let committed = m.group_offsets("g").await.expect("offsets");
        assert_eq!(
            committed.keys().cloned().collect::<Vec<_>>(),
            [("t".to_string(), 7)],
            "the commit's offsets are the group's; the abort's are gone"
        );
        let all = m.transactions().await.expect("list");
        assert_eq!(
            all.iter()
                .map(|(id, r)| (id.as_str(), r.state))
                .collect::<Vec<_>>(),
            [
                ("aborts", TxnState::PrepareAbort),
                ("commits", TxnState::PrepareCommit)
            ]
        );
        m.delete_transaction("aborts").await.expect("delete");
        assert_eq!(m.transaction("aborts").await.expect("get"), None);
    }
}
