//! What strata's crates share without sharing a runtime or a store: the records the
//! metastore keeps and the replication rules decide on.
//!
//! `strata-replication` (pure state machines) depends on this and nothing with I/O, so
//! its seeded schedules build and run without SQLite, tokio or the agent.

use std::collections::BTreeMap;

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
    /// Which data directory holds each replica's log, by the directory's id (Kafka's
    /// directory ids, KIP-858). `""`: assigned, not opened yet, so it holds nothing
    /// anyone depends on. The agent that opens the replica claims its entry; an agent
    /// whose directory is another one (a wiped or replaced disk) holds a new, empty
    /// replica, which is out of the ISR and never elected until it has caught up
    /// ([`LiveAgents::holds`]). No entry: a record written before directories were
    /// recorded (the replica is taken to hold its log, as before).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub directories: BTreeMap<i32, String>,
    /// Eligible leader replicas (KIP-966): replicas that left the ISR while it was
    /// smaller than `min.insync.replicas`. The high watermark does not move while it is,
    /// so they still have every record below it and may lead when no in-sync replica
    /// can. Empty once the ISR is back at `min.insync.replicas`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elr: Vec<i32>,
}

impl PartitionRecord {
    /// A new partition on `replicas` (the first leads, all in sync, none opened yet).
    pub fn new(index: u32, replicas: Vec<i32>) -> PartitionRecord {
        PartitionRecord {
            index,
            leader: replicas.first().copied().unwrap_or(-1),
            leader_epoch: 0,
            isr: replicas.clone(),
            directories: unopened(&replicas),
            replicas,
            adding: Vec::new(),
            removing: Vec::new(),
            elr: Vec::new(),
        }
    }
}

/// Directory entries for replicas assigned and not yet opened.
pub fn unopened(replicas: &[i32]) -> BTreeMap<i32, String> {
    replicas.iter().map(|&r| (r, String::new())).collect()
}

/// One live agent, as elections and ISR changes see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAgent {
    /// The id of its data directory.
    pub directory: String,
    /// Being drained: it takes no new replicas or leaderships, and rejoins no ISR.
    pub draining: bool,
}

/// The live agents, by node id: what the controller, the leaders' ISR changes and an
/// agent opening a replica decide on (read in the same metastore transaction as the
/// partition record they change).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveAgents {
    agents: BTreeMap<i32, LiveAgent>,
}

impl LiveAgents {
    pub fn new(agents: impl IntoIterator<Item = (i32, LiveAgent)>) -> LiveAgents {
        LiveAgents {
            agents: agents.into_iter().collect(),
        }
    }

    /// Live agents, each with its own directory and none draining (tests, and callers
    /// that know only node ids).
    pub fn plain(ids: &[i32]) -> LiveAgents {
        LiveAgents::new(ids.iter().map(|&id| {
            (
                id,
                LiveAgent {
                    directory: format!("dir-{id}"),
                    draining: false,
                },
            )
        }))
    }

    pub fn get(&self, node_id: i32) -> Option<&LiveAgent> {
        self.agents.get(&node_id)
    }

    pub fn is_live(&self, node_id: i32) -> bool {
        self.agents.contains_key(&node_id)
    }

    pub fn ids(&self) -> impl Iterator<Item = i32> + '_ {
        self.agents.keys().copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (i32, &LiveAgent)> + '_ {
        self.agents.iter().map(|(&id, a)| (id, a))
    }

    pub fn is_draining(&self, node_id: i32) -> bool {
        self.agents.get(&node_id).is_some_and(|a| a.draining)
    }

    /// Whether replica `node_id` of `record` is live *and* still has the log the record
    /// knows of: its agent runs on the directory recorded for it (or on any, where the
    /// record names none yet, or none at all). A live agent on another directory lost
    /// that log: it is not in sync, whatever the ISR says.
    pub fn holds(&self, record: &PartitionRecord, node_id: i32) -> bool {
        let Some(agent) = self.agents.get(&node_id) else {
            return false;
        };
        match record.directories.get(&node_id) {
            None => true,
            Some(d) => d.is_empty() || *d == agent.directory,
        }
    }

    /// Whether replica `node_id` of `record` is known to have lost the log the record
    /// knows of: its agent is live on another data directory than the recorded one.
    pub fn lost_log(&self, record: &PartitionRecord, node_id: i32) -> bool {
        self.agents.get(&node_id).is_some_and(|a| {
            record
                .directories
                .get(&node_id)
                .is_some_and(|d| !d.is_empty() && *d != a.directory)
        })
    }

    /// Whether replica `node_id` may join `record`'s ISR: its agent is live on the
    /// directory the record names for it (so the replica was opened and claimed there:
    /// what it fetched is in that log; or the record predates directories) and is not
    /// being drained.
    pub fn may_join_isr(&self, record: &PartitionRecord, node_id: i32) -> bool {
        let Some(agent) = self.agents.get(&node_id) else {
            return false;
        };
        let claimed = match record.directories.get(&node_id) {
            None => true,
            Some(d) => *d == agent.directory,
        };
        claimed && !agent.draining
    }

    /// The replicas of `record` that [`LiveAgents::holds`], in replica order.
    pub fn holding(&self, record: &PartitionRecord) -> Vec<i32> {
        let all = record.replicas.iter().chain(&record.isr);
        let mut out: Vec<i32> = Vec::new();
        for &r in all {
            if !out.contains(&r) && self.holds(record, r) {
                out.push(r);
            }
        }
        out
    }

    /// The replicas of `record` that [`LiveAgents::may_join_isr`], in replica order.
    pub fn may_join(&self, record: &PartitionRecord) -> Vec<i32> {
        record
            .replicas
            .iter()
            .copied()
            .filter(|&r| self.may_join_isr(record, r))
            .collect()
    }
}

#[cfg(feature = "tokio")]
pub mod background;
pub mod clock;
