//! What strata's crates share without sharing a runtime or a store: the records the
//! metastore keeps and the replication rules decide on.
//!
//! `strata-replication` (pure state machines) depends on this and nothing with I/O, so
//! its seeded schedules build and run without SQLite, tokio or the agent.

use serde::{Deserialize, Serialize};

/// One partition's placement and leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub index: u32,
    /// Every replica, the preferred leader first. During a reassignment: the target
    /// replicas, then those being removed.
    pub replicas: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
    /// A reassignment in progress: replicas being added (copying, not yet in sync) and
    /// replicas to remove once they are (Kafka's adding/removing replicas, KIP-455).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<i32>,
}

pub mod clock;
