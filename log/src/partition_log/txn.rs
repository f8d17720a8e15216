//! The log's side of transactions: appending markers, and the last stable offset and
//! aborted transactions of what it holds (the rules are in [`crate::txn`]).

use super::PartitionLog;
use crate::batch::{self, TimestampType};
use crate::error::Result;

impl PartitionLog {
    /// Appends, as leader, the marker that ends `producer_id`'s transaction here (a
    /// control batch; see [`crate::txn`]). Refused from an older producer epoch or an
    /// older coordinator ([`ProducerState::check_marker`]). Returns its offset.
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        control: crate::txn::ControlRecord,
        now_ms: i64,
    ) -> Result<i64> {
        self.producers
            .check_marker(producer_id, producer_epoch, control.coordinator_epoch)?;
        let mut bytes = crate::txn::marker_batch(producer_id, producer_epoch, control, now_ms);
        let summary = batch::assign(
            &mut bytes,
            self.log_end_offset(),
            self.leader_epoch,
            TimestampType::CreateTime,
            now_ms,
        );
        self.maybe_roll(bytes.len() as u64, now_ms)?;
        self.segments
            .values_mut()
            .next_back()
            .expect("active segment")
            .append(&bytes)?;
        let header = batch::BatchHeader::parse(&bytes).expect("assigned");
        self.producers.record_marker(&header, control);
        self.epochs.note(self.leader_epoch, summary.base_offset);
        Ok(summary.base_offset)
    }

    /// The last stable offset under `high_watermark` (see
    /// [`crate::txn::Transactions::last_stable_offset`]).
    pub fn last_stable_offset(&mut self, high_watermark: i64) -> i64 {
        self.producers
            .transactions_mut()
            .last_stable_offset(high_watermark)
    }

    /// The aborted transactions with records in `[from, upto)`.
    pub fn aborted_between(&self, from: i64, upto: i64) -> Vec<crate::txn::AbortedTxn> {
        self.producers.transactions().aborted_between(from, upto)
    }
}
