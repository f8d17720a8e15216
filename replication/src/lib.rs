//! The replication state machines, as plain state and events: no sockets, disks, clocks
//! or tasks. The agent's `Partition` drives them; the seeded schedule tests
//! (`tests/schedules/`) drive the very same code through message delays, drops,
//! crashes and paused leaders. It is its own crate so that those tests build and run
//! without the agent.
//!
//! - [`Replica`] (`replica.rs`): one replica's role in the newest leader epoch it
//!   learned, what it admits, when a write is acknowledged, and the flush rule (how far
//!   the log is durable, and that an fsync overtaken by a cut counts for nothing).
//! - [`LeaderState`] (`leader.rs`): a leader's view of its followers (their log end
//!   offsets, when each was last caught up), the in-sync replica set, the high
//!   watermark, and when the ISR should shrink or expand.
//! - [`Follower`] (`follower.rs`): the follower's truncate, fetch and start-over cycle.
//! - [`elect`], [`prefer`] and the reassignment rules (`election.rs`): what the
//!   controller applies to a partition record in one metastore transaction.
//! - [`open_replica`] (`opening.rs`): what an agent does on opening a replica, by the
//!   data directory that holds it (a wiped disk makes a new replica, out of the ISR).
//! - [`placement::plan`]: the controller's self-healing and balancing (replacing the
//!   replicas of gone or drained agents, spreading replicas and preferred leaderships).
//!
//! Rules (Kafka's, KIP-101/279/497/841):
//! - The high watermark is the smallest log end offset over the ISR, the leader's own
//!   counted as its fsynced end. It never falls while one leader leads.
//! - The ISR the watermark is computed over is the *maximal* one: the committed ISR plus
//!   any member whose addition is on its way to the metastore. A removal counts only once
//!   the metastore has it. So every replica the metastore lists as in sync holds every
//!   offset below the watermark, which is what makes any of them a safe new leader.
//! - A follower is caught up when it fetches from the leader's log end (or from the end
//!   the leader had at its previous fetch); one not caught up for `lag_ms` leaves the ISR.
//!   One that reaches the high watermark, and the start of the leader's epoch (so it has
//!   truncated any divergent suffix), joins again.

mod election;
mod follower;
mod leader;
mod opening;
pub mod placement;
mod replica;

pub use election::{
    ReassignError, cancel_reassignment, elect, finish_reassignment, move_leadership, prefer,
    reassign, settle_elr,
};
pub use follower::{FetchAnswer, Follower, Request, Step, Truncation};
pub use leader::{FollowerProgress, IsrChange, LeaderState};
pub use opening::{Opening, open_replica, opening};
pub use replica::{Ack, FlushTicket, Flushed, Members, Refusal, Replica, Role, Transition};
pub use strata_core::{LiveAgent, LiveAgents, PartitionRecord};
pub use strata_log::epochs::{Cut, EpochHistory, divergence};

#[cfg(test)]
mod tests {
    use super::*;

    pub fn record(leader: i32, epoch: i32, replicas: &[i32], isr: &[i32]) -> PartitionRecord {
        PartitionRecord {
            index: 0,
            replicas: replicas.to_vec(),
            leader,
            leader_epoch: epoch,
            isr: isr.to_vec(),
            adding: Vec::new(),
            removing: Vec::new(),
            directories: Default::default(),
            elr: Vec::new(),
        }
    }
}
