//! Reading a partition, for consumers and for followers.
//!
//! A consumer reads committed records (below the high watermark), from the archive
//! when the offset lies below the local log. A follower (a replica id of 0 or more)
//! reads the local log up to its end, and its fetch offset tells the leader how far the
//! follower's copy reaches, which may move the watermark; that bookkeeping happens here,
//! before the read. A `current_leader_epoch` (-1: not given) is checked against the
//! replica's (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, KIP-320).

use std::sync::Arc;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::partition::{Bound, Offsets, Partition, ReadOutcome};
use crate::replicas::{ReplicaManager, TopicState};

/// Who reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    Consumer,
    /// The follower on agent `node_id`.
    Follower(i32),
}

/// A read that failed, with what the reader should still be told of the partition.
#[derive(Debug)]
pub struct Failed {
    pub error: Error,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

/// The fetch service.
#[derive(Debug)]
pub struct Fetching {
    replicas: Arc<ReplicaManager>,
}

impl Fetching {
    pub fn new(replicas: Arc<ReplicaManager>) -> Fetching {
        Fetching { replicas }
    }

    /// How many partitions `topic` has, as this agent knows it; `None` if it knows no
    /// such topic.
    pub fn partitions(&self, topic: &str) -> Option<i32> {
        self.replicas
            .topic(topic)
            .map(|t| t.record.partitions.len() as i32)
    }

    /// The replica to read `partition` of `topic` from (this agent must lead it), and a
    /// receiver, subscribed before any read, that changes when its offsets do (for long
    /// polls: no append between a read and the wait is missed).
    pub fn subscribe(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(Arc<Partition>, watch::Receiver<Offsets>)> {
        let state = self.replicas.topic(topic);
        let replica = TopicState::served_in(state.as_ref(), topic, partition)?;
        let mut rx = replica.watch();
        rx.borrow_and_update();
        Ok((Arc::clone(replica), rx))
    }

    /// Reads from `offset`, at most `max_bytes` (unless the first batch alone is larger);
    /// a consumer with `read_committed` up to the last stable offset only.
    pub async fn read(
        &self,
        replica: &Partition,
        reader: Reader,
        current_leader_epoch: i32,
        offset: i64,
        max_bytes: usize,
        read_committed: bool,
    ) -> Result<ReadOutcome, Failed> {
        let checked = match reader {
            Reader::Follower(id) => replica.on_replica_fetch(
                id,
                current_leader_epoch,
                offset,
                self.replicas.membership().clock().wall_ms(),
            ),
            Reader::Consumer => replica.check_epoch(current_leader_epoch),
        };
        let read = match checked {
            Err(e) => {
                return Err(Failed {
                    error: e.into(),
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                });
            }
            Ok(()) => match reader {
                Reader::Follower(_) => replica.read(offset, max_bytes, Bound::LogEnd),
                Reader::Consumer => {
                    let bound = if read_committed {
                        Bound::LastStable
                    } else {
                        Bound::HighWatermark
                    };
                    self.replicas.read(replica, offset, max_bytes, bound).await
                }
            },
        };
        match read {
            Ok(out) => Ok(out),
            Err(e) => Err(Failed {
                error: e.into(),
                high_watermark: replica.high_watermark(),
                last_stable_offset: replica.last_stable_offset(),
                log_start_offset: match reader {
                    Reader::Follower(_) => replica.log_start_offset(),
                    Reader::Consumer => self.replicas.log_start_offset(replica).await,
                },
            }),
        }
    }
}
