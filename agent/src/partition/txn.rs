//! A partition's side of transactions: the markers a coordinator writes, the last
//! stable offset, and KIP-890's verification of a producer's first transactional write.
//!
//! Verification closes a race Kafka's hanging transactions came from: a produce that
//! was verified against the coordinator (the partition is in the producer's ongoing
//! transaction) can still arrive after the coordinator aborted that transaction and
//! wrote its marker here. So the partition hands out a token when verification starts,
//! a marker for the producer withdraws it, and the append is refused unless the token
//! still stands ([`Partition::append`]'s `verified`). A marker that lands before the
//! token is taken is seen by the verification itself, which reads the coordinator's
//! record after taking it.

use std::sync::atomic::Ordering;

use strata_log::txn::ControlRecord;

use super::{Partition, PartitionError};

/// How far a read may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Consumers reading uncommitted: up to the high watermark.
    HighWatermark,
    /// Consumers reading committed: up to the last stable offset.
    LastStable,
    /// Followers: up to the log end.
    LogEnd,
}

/// A transaction open on this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTransaction {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_offset: i64,
    /// Max timestamp of the producer's last batch here.
    pub last_timestamp_ms: i64,
}

impl Partition {
    /// Appends, as leader, the marker that ends `producer_id`'s transaction here, and
    /// withdraws any verification of it in flight. Returns the marker's offset and the
    /// leader epoch it was written in; the caller waits for it to be committed.
    pub fn append_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        control: ControlRecord,
        now_ms: i64,
        min_insync: usize,
    ) -> Result<(i64, i32), PartitionError> {
        if self.offsets.borrow().failed {
            return Err(PartitionError::Offline(self.name()));
        }
        let replica = self.replica();
        let epoch = replica
            .admit(Some(min_insync))
            .map_err(|r| self.refused(r, -1))?;
        let (offset, end, ack_after_fsync) = {
            let mut log = self.log();
            let offset = log.append_marker(producer_id, producer_epoch, control, now_ms)?;
            self.verifications().remove(&producer_id);
            (offset, log.log_end_offset(), log.config().ack_after_fsync)
        };
        self.appended(replica, end, ack_after_fsync);
        Ok((offset, epoch))
    }

    /// The last stable offset: below it no transaction is open (read_committed
    /// consumers read up to it).
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark();
        self.log().last_stable_offset(hw)
    }

    /// The aborted transactions of the local log with records in `[from, upto)`.
    pub fn aborted_between(&self, from: i64, upto: i64) -> Vec<strata_log::txn::AbortedTxn> {
        self.log().aborted_between(from, upto)
    }

    /// Whether `producer_id` has a transaction open here in `producer_epoch`: if so,
    /// its next batches need no verification.
    pub fn in_transaction(&self, producer_id: i64, producer_epoch: i16) -> bool {
        let log = self.log();
        let producers = log.producers();
        producers
            .transactions()
            .open_first_offset(producer_id)
            .is_some()
            && producers
                .get(producer_id)
                .is_some_and(|e| e.epoch == producer_epoch)
    }

    /// Every transaction open here.
    pub fn open_transactions(&self) -> Vec<OpenTransaction> {
        let log = self.log();
        let producers = log.producers();
        producers
            .transactions()
            .open()
            .map(|(producer_id, first_offset)| {
                let entry = producers.get(producer_id);
                OpenTransaction {
                    producer_id,
                    producer_epoch: entry.map_or(-1, |e| e.epoch),
                    first_offset,
                    last_timestamp_ms: entry.map_or(-1, |e| e.last_timestamp_ms),
                }
            })
            .collect()
    }

    /// Every producer the partition knows, with its epoch, last sequence, last
    /// timestamp, coordinator epoch and open transaction's first offset (-1 if none):
    /// DescribeProducers' view.
    pub fn producers(&self) -> Vec<(i64, i16, i32, i64, i32, i64)> {
        let log = self.log();
        let producers = log.producers();
        producers
            .iter()
            .map(|(pid, e)| {
                (
                    pid,
                    e.epoch,
                    e.batches.back().map_or(-1, |b| b.last_sequence),
                    e.last_timestamp_ms,
                    e.coordinator_epoch,
                    producers
                        .transactions()
                        .open_first_offset(pid)
                        .unwrap_or(-1),
                )
            })
            .collect()
    }

    /// Starts verifying `producer_id`'s first transactional write: the token to append
    /// with once the coordinator confirmed it.
    pub fn start_verification(&self, producer_id: i64) -> u64 {
        let token = self.next_verification.fetch_add(1, Ordering::Relaxed);
        self.verifications().insert(producer_id, token);
        token
    }

    /// Refuses an append whose verification a marker withdrew (called under the log's
    /// lock, where markers are written).
    pub(super) fn check_verification(
        &self,
        producer_id: i64,
        token: u64,
    ) -> Result<(), PartitionError> {
        let mut verifications = self.verifications();
        if verifications.get(&producer_id) == Some(&token) {
            verifications.remove(&producer_id);
            Ok(())
        } else {
            Err(PartitionError::Log(strata_log::Error::InvalidTxnState {
                reason: format!(
                    "producer {producer_id}: its transaction ended while the write was being verified"
                ),
            }))
        }
    }

    fn verifications(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<i64, u64>> {
        self.verifications.lock().unwrap_or_else(|p| p.into_inner())
    }
}
