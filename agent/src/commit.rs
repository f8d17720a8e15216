//! An acks=all write (or a transaction marker) appended as leader, waiting until the
//! high watermark covers it: every in-sync replica has it. The produce service hands one
//! back for each acks=all append; the transaction coordinator for each marker.

use std::sync::Arc;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::partition::Partition;

/// An acks=all write waiting to be committed.
#[derive(Debug)]
pub struct Commit {
    partition: Arc<Partition>,
    end_offset: i64,
    epoch: i32,
    min_insync: usize,
}

impl Commit {
    /// The write that ends before `end_offset`, appended in leader `epoch` as an
    /// acks=all write (`min_insync` in-sync replicas must have it).
    pub fn new(
        partition: Arc<Partition>,
        end_offset: i64,
        epoch: i32,
        min_insync: usize,
    ) -> Commit {
        Commit {
            partition,
            end_offset,
            epoch,
            min_insync,
        }
    }

    /// Waits until the write is committed, or fails: the leadership moved on, the ISR
    /// fell below `min.insync.replicas`, or `deadline` passed.
    pub async fn wait(self, deadline: Instant) -> Result<()> {
        let committed = self
            .partition
            .wait_committed(self.end_offset, self.epoch, self.min_insync);
        match tokio::time::timeout_at(deadline, committed).await {
            Ok(outcome) => outcome.map_err(Error::from),
            Err(_) => Err(Error::NotReplicatedInTime),
        }
    }
}
