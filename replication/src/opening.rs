//! What an agent does when it opens its replica of a partition, before the replica
//! serves anything: the disk-identity rules (Kafka's directory ids, KIP-858, and the
//! eligible-leader idea of KIP-966).
//!
//! Each agent's data directory has an id, made when the directory was first used; the
//! partition record names, per replica, the directory that holds its log
//! ([`PartitionRecord::directories`]). An agent that opens a replica compares: if its
//! directory is the recorded one and the log is there, it serves it; if the record
//! names none yet, it claims the entry; otherwise the log the record knows of is gone (a
//! wiped or replaced disk, a deleted partition directory, an older disk put back) and
//! the replica is a *new* one: in one metastore transaction it leaves the ISR and any
//! leadership, and records its directory, in a new epoch: so no ISR change of the
//! leader's in flight can bring it back, and the leader forgets what the replica's
//! previous incarnation fetched (which said nothing of the log it has now). It then follows and copies like a replica being
//! added, and joins the ISR only once it has caught up. An acknowledged record is on
//! `min.insync.replicas` logs of the ISR; no election picks a replica whose log is not
//! one of them ([`crate::elect`] takes only replicas that hold their recorded log), so
//! none can be skipped. See `docs/decisions/0006-disk-identity.md`.

use strata_core::{LiveAgents, PartitionRecord};

/// What an agent opening its replica does before it serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// The directory holds the log the record knows of: serve it.
    Serve,
    /// The record names no directory for this replica yet (never opened, or a record
    /// from before directories were recorded while the log is here): record this one.
    Claim,
    /// The log the record knows of is not here: a new replica, out of the ISR.
    Rejoin,
}

/// What replica `node_id` of `record` does when it opens on data directory `directory`;
/// `had_log`: the partition's log was in that directory before this open.
pub fn opening(record: &PartitionRecord, node_id: i32, directory: &str, had_log: bool) -> Opening {
    match record.directories.get(&node_id) {
        // Assigned, never opened: nothing anyone depends on is missing.
        Some(d) if d.is_empty() => Opening::Claim,
        Some(d) if d == directory && had_log => Opening::Serve,
        // The recorded directory lost this log, or the log here is an older copy.
        Some(_) => Opening::Rejoin,
        // A record from before directories were recorded: the log here is the one it
        // knows of; an empty directory is not.
        None if had_log => Opening::Claim,
        None => Opening::Rejoin,
    }
}

/// The record after replica `node_id` opened on `directory` (see [`opening`]), decided
/// on the record and the live `agents` as one metastore transaction reads them. `None`:
/// nothing to change.
///
/// A rejoining replica leaves the ISR and records its directory, in a new epoch (also
/// when it was out of the ISR: its leader must forget what the replica's previous
/// incarnation fetched); if it led, leadership goes to the first other in-sync replica that holds its log (none:
/// no leader until one returns). If it was the only in-sync replica, its log was the
/// only copy known complete and is lost: the record keeps naming it (so no other replica
/// is elected as if it were complete), without a leader, until an operator allows an
/// unclean election.
pub fn open_replica(
    record: &PartitionRecord,
    node_id: i32,
    directory: &str,
    had_log: bool,
    agents: &LiveAgents,
    min_insync: usize,
) -> Option<PartitionRecord> {
    if !record.replicas.contains(&node_id) {
        // Moved elsewhere meanwhile: the agent deletes the replica instead.
        return None;
    }
    let mut next = record.clone();
    match opening(record, node_id, directory, had_log) {
        Opening::Serve => return None,
        Opening::Claim => {
            next.directories.insert(node_id, directory.to_string());
        }
        Opening::Rejoin => {
            let in_isr = record.isr.contains(&node_id);
            let led = record.leader == node_id;
            let others: Vec<i32> = record
                .isr
                .iter()
                .copied()
                .filter(|&r| r != node_id)
                .collect();
            if in_isr && others.is_empty() {
                // The record keeps naming the lost copy, so nothing is elected as if it
                // were complete; an eligible leader replica (KIP-966) still may be.
                if led {
                    next.leader = -1;
                    next.leader_epoch += 1;
                }
                return (next != *record).then_some(next);
            }
            next.isr = others;
            next.directories.insert(node_id, directory.to_string());
            if led {
                next.leader = next
                    .replicas
                    .iter()
                    .copied()
                    .filter(|&r| next.isr.contains(&r) && agents.holds(record, r))
                    .min_by_key(|&r| agents.is_draining(r))
                    .unwrap_or(-1);
            }
            // Always a new epoch: the leader starts its followers' progress afresh, so
            // nothing a previous incarnation of this replica fetched can count for the
            // new one, and no ISR change of the leader's in flight can land.
            next.leader_epoch += 1;
            next.elr.retain(|&r| r != node_id);
            next = crate::settle_elr(record, next, min_insync, agents);
        }
    }
    (next != *record).then_some(next)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::tests::record;

    fn with_dirs(mut r: PartitionRecord, dirs: &[(i32, &str)]) -> PartitionRecord {
        r.directories = dirs.iter().map(|&(n, d)| (n, d.to_string())).collect();
        r
    }

    #[test]
    fn an_agent_serves_claims_or_rejoins_by_its_directory() {
        let r = with_dirs(
            record(1, 3, &[1, 2, 3], &[1, 2, 3]),
            &[(1, "a"), (2, ""), (3, "c")],
        );
        assert_eq!(opening(&r, 1, "a", true), Opening::Serve);
        // Its partition directory was deleted while the data directory stayed.
        assert_eq!(opening(&r, 1, "a", false), Opening::Rejoin);
        // A wiped disk: a new data directory, no log.
        assert_eq!(opening(&r, 1, "a2", false), Opening::Rejoin);
        // An older disk put back: a log, but not the one the record knows of.
        assert_eq!(opening(&r, 3, "old", true), Opening::Rejoin);
        // Assigned, never opened.
        assert_eq!(opening(&r, 2, "b", false), Opening::Claim);
        assert_eq!(opening(&r, 2, "b", true), Opening::Claim);
        // A record from before directories were recorded.
        let legacy = record(1, 3, &[1, 2, 3], &[1, 2, 3]);
        assert_eq!(opening(&legacy, 1, "a", true), Opening::Claim);
        assert_eq!(opening(&legacy, 1, "a", false), Opening::Rejoin);
    }

    #[test]
    fn a_wiped_leader_hands_over_and_leaves_the_isr_in_a_new_epoch() {
        let r = with_dirs(
            record(1, 3, &[1, 2, 3], &[1, 2, 3]),
            &[(1, "a"), (2, "b"), (3, "c")],
        );
        let agents = LiveAgents::new([(1, live("a2")), (2, live("b")), (3, live("c"))]);
        let next = open_replica(&r, 1, "a2", false, &agents, 2).expect("changes");
        assert_eq!((next.leader, next.leader_epoch), (2, 4));
        assert_eq!(next.isr, vec![2, 3]);
        assert_eq!(next.directories[&1], "a2");
        // Its partition directory now exists: opened again (a restart), it is served.
        assert_eq!(open_replica(&next, 1, "a2", true, &agents, 2), None);
        assert_eq!(opening(&next, 1, "a2", true), Opening::Serve);
        // A follower out of the ISR records its directory in a new epoch too: its leader
        // must not count what its previous incarnation fetched.
        let out = with_dirs(
            record(2, 5, &[1, 2, 3], &[2, 3]),
            &[(1, "a"), (2, "b"), (3, "c")],
        );
        let next = open_replica(&out, 1, "a2", false, &agents, 2).expect("changes");
        assert_eq!(
            (next.leader, next.leader_epoch, next.isr.clone()),
            (2, 6, vec![2, 3])
        );
        assert_eq!(next.directories[&1], "a2");
    }

    #[test]
    fn leadership_goes_only_to_a_replica_that_holds_its_log() {
        let r = with_dirs(
            record(1, 3, &[1, 2, 3], &[1, 2, 3]),
            &[(1, "a"), (2, "b"), (3, "c")],
        );
        // 2 is wiped too (live on another directory), 3 is down: nobody can lead.
        let agents = LiveAgents::new([(1, live("a2")), (2, live("b2"))]);
        let next = open_replica(&r, 1, "a2", false, &agents, 2).expect("changes");
        assert_eq!((next.leader, next.leader_epoch), (-1, 4));
        assert_eq!(next.isr, vec![2, 3]);
        // The controller then elects 3 when it returns with its directory.
        let back = LiveAgents::new([(1, live("a2")), (2, live("b2")), (3, live("c"))]);
        let e = crate::elect(&next, &back, false, 2).expect("elects");
        assert_eq!((e.leader, e.isr.clone()), (3, vec![3]));
    }

    #[test]
    fn the_only_in_sync_copy_lost_leaves_the_partition_without_a_leader() {
        let r = with_dirs(record(1, 3, &[1, 2], &[1]), &[(1, "a"), (2, "b")]);
        let agents = LiveAgents::new([(1, live("a2")), (2, live("b"))]);
        let next = open_replica(&r, 1, "a2", false, &agents, 2).expect("changes");
        assert_eq!((next.leader, next.leader_epoch), (-1, 4));
        assert_eq!(next.isr, vec![1], "still names the lost copy");
        assert_eq!(next.directories[&1], "a", "and its directory");
        assert_eq!(
            crate::elect(&next, &agents, false, 2),
            None,
            "no clean election"
        );
        let unclean = crate::elect(&next, &agents, true, 2).expect("unclean");
        assert_eq!((unclean.leader, unclean.isr.clone()), (2, vec![2]));
    }

    #[test]
    fn elections_skip_replicas_on_another_directory() {
        let r = with_dirs(
            record(1, 3, &[1, 2, 3], &[1, 2, 3]),
            &[(1, "a"), (2, "b"), (3, "c")],
        );
        // The leader came back on a new disk before it opened its replica: it no longer
        // leads, and leaves the ISR with the election.
        let agents = LiveAgents::new([(1, live("a2")), (2, live("b")), (3, live("c"))]);
        let e = crate::elect(&r, &agents, false, 2).expect("elects");
        assert_eq!(
            (e.leader, e.leader_epoch, e.isr.clone()),
            (2, 4, vec![2, 3])
        );
        assert_eq!(e.directories[&1], "a2", "its new, empty log from now on");
        // Preferred-leader election does not hand leadership to a replica on another
        // disk than the record names either.
        let back = PartitionRecord {
            isr: vec![2, 3, 1],
            directories: r.directories.clone(),
            ..e.clone()
        };
        assert_eq!(crate::prefer(&back, &agents), None);
        let mut agents = BTreeMap::new();
        agents.insert(1, live("a"));
        agents.insert(2, live("b"));
        agents.insert(
            3,
            LiveAgent {
                directory: "c".to_string(),
                draining: true,
            },
        );
        let agents = LiveAgents::new(agents);
        assert_eq!(crate::prefer(&back, &agents).map(|p| p.leader), Some(1));
    }

    use strata_core::LiveAgent;

    fn live(directory: &str) -> LiveAgent {
        LiveAgent {
            directory: directory.to_string(),
            draining: false,
        }
    }
}
