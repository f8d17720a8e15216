//! The controller's rules, each applied to a partition record in one metastore
//! transaction: elections, preferred-leader elections and reassignments (KIP-455).

use strata_core::{LiveAgents, PartitionRecord};

/// The controller's election for a partition whose leader is not live, or no longer
/// holds its log (its agent came back on another data directory): the first replica (in
/// preference order, agents being drained last) that is in the ISR and
/// [`LiveAgents::holds`] its log; with none such, the first eligible leader replica
/// (KIP-966) that holds its log, alone in the ISR; with `unclean` and none such, the
/// first live replica, alone in the ISR (one that holds a log before one on a new
/// directory). The ISR loses the replicas that do not hold their log, and the eligible
/// leader replicas follow [`settle_elr`] for `min_insync`. With no candidate the
/// partition has no leader (-1) and keeps its ISR, so that an in-sync replica that comes
/// back can lead again. Every change bumps the leader epoch, which fences the old
/// leader. `None`: nothing to change.
pub fn elect(
    record: &PartitionRecord,
    agents: &LiveAgents,
    unclean: bool,
    min_insync: usize,
) -> Option<PartitionRecord> {
    if record.leader >= 0 && agents.holds(record, record.leader) {
        return None;
    }
    let mut next = PartitionRecord {
        leader_epoch: record.leader_epoch + 1,
        ..record.clone()
    };
    let in_isr = first_choice(record, agents, |r| {
        record.isr.contains(&r) && agents.holds(record, r)
    });
    let eligible = || {
        first_choice(record, agents, |r| {
            record.elr.contains(&r) && agents.holds(record, r)
        })
    };
    if let Some(leader) = in_isr {
        next.leader = leader;
        next.isr.retain(|r| agents.holds(record, *r));
    } else if let Some(leader) = eligible() {
        next.leader = leader;
        next.isr = vec![leader];
    } else {
        let unclean_leader = first_choice(record, agents, |r| agents.holds(record, r))
            .or_else(|| first_choice(record, agents, |r| agents.is_live(r)));
        match unclean_leader {
            Some(leader) if unclean => {
                next.leader = leader;
                next.isr = vec![leader];
                // Nobody else is known to have what it has, or it what they had.
                next.elr.clear();
                // Its log, whatever it holds, is the partition's log from now on.
                if let Some(agent) = agents.get(leader) {
                    next.directories.insert(leader, agent.directory.clone());
                }
                return Some(next);
            }
            _ if record.leader == -1 => return None,
            _ => next.leader = -1,
        }
    }
    // Replicas whose agent came back on another disk, out of the ISR: from this epoch on
    // the record knows their new, empty log (which copies before it counts).
    for &r in &record.replicas {
        if !next.isr.contains(&r)
            && agents.lost_log(record, r)
            && let Some(agent) = agents.get(r)
        {
            next.directories.insert(r, agent.directory.clone());
        }
    }
    Some(settle_elr(record, next, min_insync, agents))
}

/// The eligible leader replicas (KIP-966) of `next`, a change of `old`: while the ISR is
/// smaller than `min_insync` the high watermark does not move, so every replica that
/// left the ISR since still has every record below it and may lead, unless its agent is
/// known to have lost that log (live on another directory); once the ISR is back at
/// `min_insync`, none are kept.
pub fn settle_elr(
    old: &PartitionRecord,
    mut next: PartitionRecord,
    min_insync: usize,
    agents: &LiveAgents,
) -> PartitionRecord {
    if next.isr.len() >= min_insync.max(1) {
        next.elr.clear();
        return next;
    }
    // A replica whose recorded directory changed holds a new log, not the one that was
    // in sync.
    let new_log = |r: i32| {
        old.directories
            .get(&r)
            .is_some_and(|d| !d.is_empty() && Some(d) != next.directories.get(&r))
    };
    let mut elr: Vec<i32> = Vec::new();
    for &r in old.elr.iter().chain(&old.isr) {
        if !elr.contains(&r)
            && !next.isr.contains(&r)
            && next.replicas.contains(&r)
            && !new_log(r)
            && !agents.lost_log(&next, r)
            && !agents.lost_log(old, r)
        {
            elr.push(r);
        }
    }
    next.elr = elr;
    next
}

/// The first replica of `record` (in preference order) that passes `ok` and is not
/// being drained, else the first that passes `ok`.
fn first_choice(
    record: &PartitionRecord,
    agents: &LiveAgents,
    ok: impl Fn(i32) -> bool,
) -> Option<i32> {
    let mut draining = None;
    for &r in &record.replicas {
        if !ok(r) {
            continue;
        }
        if !agents.is_draining(r) {
            return Some(r);
        }
        draining.get_or_insert(r);
    }
    draining
}

/// Hands the leadership of `record` away from agent `from` (being drained, or stopping)
/// to the first other in-sync replica that holds its log, in a new epoch. `None`: `from`
/// does not lead, or no other replica could.
pub fn move_leadership(
    record: &PartitionRecord,
    from: i32,
    agents: &LiveAgents,
) -> Option<PartitionRecord> {
    if record.leader != from {
        return None;
    }
    let leader = first_choice(record, agents, |r| {
        r != from && record.isr.contains(&r) && agents.holds(record, r)
    })?;
    Some(PartitionRecord {
        leader,
        leader_epoch: record.leader_epoch + 1,
        ..record.clone()
    })
}

/// Why a reassignment request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReassignError {
    /// Every in-sync replica would leave the replica list (they are all added replicas
    /// the request drops): no copy known to be complete would remain.
    NoInSyncReplicaLeft,
}

/// Starts moving a partition to `target` replicas (KIP-455): the replica list becomes
/// the target followed by the replicas to remove, which stay until the new ones are in
/// sync. Replacing a reassignment in progress starts from the original replicas; the
/// added replicas it drops leave at once, and then the leader epoch is bumped, so that
/// no ISR change the leader proposed before it can bring them back.
pub fn reassign(
    record: &PartitionRecord,
    target: &[i32],
) -> Result<PartitionRecord, ReassignError> {
    let original = original_replicas(record);
    let removing: Vec<i32> = original
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|r| !original.contains(r))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    change_replicas(
        record,
        PartitionRecord {
            replicas,
            adding,
            removing,
            ..record.clone()
        },
    )
}

/// Cancels a reassignment in progress: back to the original replicas, in a new epoch.
pub fn cancel_reassignment(record: &PartitionRecord) -> Result<PartitionRecord, ReassignError> {
    change_replicas(
        record,
        PartitionRecord {
            replicas: original_replicas(record),
            adding: Vec::new(),
            removing: Vec::new(),
            leader_epoch: record.leader_epoch + 1,
            ..record.clone()
        },
    )
}

/// The replicas before the reassignment in progress (all of them if none is).
fn original_replicas(record: &PartitionRecord) -> Vec<i32> {
    record
        .replicas
        .iter()
        .copied()
        .filter(|r| !record.adding.contains(r))
        .collect()
}

/// The common part of starting, replacing and cancelling: the ISR keeps only listed
/// replicas (and may not become empty); dropping any replica bumps the epoch; a leader
/// that is no longer listed hands over to the first in-sync replica left.
fn change_replicas(
    old: &PartitionRecord,
    mut next: PartitionRecord,
) -> Result<PartitionRecord, ReassignError> {
    next.isr = old
        .isr
        .iter()
        .copied()
        .filter(|r| next.replicas.contains(r))
        .collect();
    if next.isr.is_empty() && !old.isr.is_empty() {
        return Err(ReassignError::NoInSyncReplicaLeft);
    }
    next.elr.retain(|r| next.replicas.contains(r));
    // Listed replicas keep their directory; new ones have not opened theirs yet.
    next.directories = next
        .replicas
        .iter()
        .filter_map(|&r| match old.directories.get(&r) {
            Some(d) => Some((r, d.clone())),
            None if !old.replicas.contains(&r) => Some((r, String::new())),
            None => None,
        })
        .collect();
    let dropped = old.replicas.iter().any(|r| !next.replicas.contains(r));
    if dropped && next.leader_epoch == old.leader_epoch {
        next.leader_epoch += 1;
    }
    if next.leader >= 0 && !next.replicas.contains(&next.leader) {
        next.leader = next
            .replicas
            .iter()
            .copied()
            .find(|r| next.isr.contains(r))
            .unwrap_or(-1);
        if next.leader_epoch == old.leader_epoch {
            next.leader_epoch += 1;
        }
    }
    Ok(next)
}

/// Completes a reassignment once every added replica is in sync: the removed replicas
/// go, and if the leader was one of them, the first in-sync target replica that holds its
/// log leads. The epoch is bumped so the removed replicas are fenced. `None`: not yet (or
/// none in progress), or no target replica could lead.
pub fn finish_reassignment(
    record: &PartitionRecord,
    agents: &LiveAgents,
) -> Option<PartitionRecord> {
    if record.adding.is_empty() && record.removing.is_empty() {
        return None;
    }
    // Without a leader the ISR may be only replicas being removed: wait for an election.
    if record.leader < 0 {
        return None;
    }
    if !record.adding.iter().all(|r| record.isr.contains(r)) {
        return None;
    }
    let keep = |r: &i32| !record.removing.contains(r);
    let replicas: Vec<i32> = record.replicas.iter().copied().filter(keep).collect();
    let isr: Vec<i32> = record.isr.iter().copied().filter(keep).collect();
    if isr.is_empty() {
        return None;
    }
    let leader = if keep(&record.leader) {
        record.leader
    } else {
        let kept = PartitionRecord {
            replicas: replicas.clone(),
            ..record.clone()
        };
        first_choice(&kept, agents, |r| {
            isr.contains(&r) && agents.holds(record, r)
        })?
    };
    let mut directories = record.directories.clone();
    directories.retain(|r, _| replicas.contains(r));
    let mut elr = record.elr.clone();
    elr.retain(|r| replicas.contains(r));
    Some(PartitionRecord {
        replicas,
        isr,
        leader,
        leader_epoch: record.leader_epoch + 1,
        adding: Vec::new(),
        removing: Vec::new(),
        directories,
        elr,
        ..record.clone()
    })
}

/// Preferred-leader election: hands leadership back to the first replica when it is in
/// the ISR, holds its log, is not being drained and does not lead. `None`: nothing to
/// change.
pub fn prefer(record: &PartitionRecord, agents: &LiveAgents) -> Option<PartitionRecord> {
    let preferred = *record.replicas.first()?;
    if preferred == record.leader
        || !record.isr.contains(&preferred)
        || !agents.may_join_isr(record, preferred)
    {
        return None;
    }
    Some(PartitionRecord {
        leader: preferred,
        leader_epoch: record.leader_epoch + 1,
        ..record.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::record;

    fn live(ids: &[i32]) -> LiveAgents {
        LiveAgents::plain(ids)
    }

    #[test]
    fn elections_pick_a_live_in_sync_replica_and_bump_the_epoch() {
        let r = record(1, 4, &[1, 2, 3], &[1, 3]);
        assert_eq!(elect(&r, &live(&[1, 2, 3]), false, 1), None);
        let e = elect(&r, &live(&[2, 3]), false, 1).expect("elected");
        assert_eq!((e.leader, e.leader_epoch, e.isr.clone()), (3, 5, vec![3]));
        // Only out-of-sync replicas live: no leader, unless unclean election is on.
        let none = elect(&r, &live(&[2]), false, 1).expect("fenced");
        assert_eq!(
            (none.leader, none.leader_epoch, none.isr.clone()),
            (-1, 5, vec![1, 3])
        );
        assert_eq!(elect(&none, &live(&[2]), false, 1), None);
        let unclean = elect(&none, &live(&[2]), true, 1).expect("unclean");
        assert_eq!((unclean.leader, unclean.isr.clone()), (2, vec![2]));
        // An in-sync replica back: it leads.
        let back = elect(&none, &live(&[1, 2]), false, 1).expect("back");
        assert_eq!((back.leader, back.leader_epoch, back.isr), (1, 6, vec![1]));
    }

    /// KIP-966: under `min.insync.replicas` the replicas that leave the ISR stay
    /// eligible, and one of them leads when no in-sync replica can; one whose agent came
    /// back on another disk is not eligible.
    #[test]
    fn eligible_leader_replicas_lead_when_the_isr_cannot() {
        let r = record(1, 4, &[1, 2, 3], &[1, 2]);
        // 1 (the leader) dies: 2 leads alone, 1 stays eligible.
        let e = elect(&r, &live(&[2, 3]), false, 2).expect("elected");
        assert_eq!(
            (e.leader, e.isr.clone(), e.elr.clone()),
            (2, vec![2], vec![1])
        );
        // 2 dies too: no leader; then 1 returns with its log and leads from the ELR.
        let none = elect(&e, &live(&[3]), false, 2).expect("fenced");
        assert_eq!(
            (none.leader, none.isr.clone(), none.elr.clone()),
            (-1, vec![2], vec![1])
        );
        let back = elect(&none, &live(&[1, 3]), false, 2).expect("from the ELR");
        assert_eq!(
            (back.leader, back.isr.clone(), back.elr.clone()),
            (1, vec![1], vec![2])
        );
        // At min.insync.replicas the list empties.
        let full = settle_elr(
            &back,
            PartitionRecord {
                isr: vec![1, 3],
                ..back.clone()
            },
            2,
            &live(&[1, 3]),
        );
        assert!(full.elr.is_empty());
        // A replica back on another disk is not eligible.
        let mut dirs = back.clone();
        dirs.directories.insert(2, "dir-2".to_string());
        let agents = LiveAgents::new([(
            2,
            strata_core::LiveAgent {
                directory: "new".to_string(),
                draining: false,
            },
        )]);
        let shrunk = settle_elr(&dirs, dirs.clone(), 2, &agents);
        assert!(shrunk.elr.is_empty(), "{shrunk:?}");
    }

    #[test]
    fn reassignment_adds_first_and_removes_once_in_sync() {
        let r = record(1, 3, &[1, 2], &[1, 2]);
        let moving = reassign(&r, &[3, 2]).expect("moves");
        assert_eq!(moving.replicas, vec![3, 2, 1]);
        assert_eq!(
            (moving.adding.clone(), moving.removing.clone()),
            (vec![3], vec![1])
        );
        assert_eq!(moving.leader_epoch, 3, "starting needs no new epoch");
        assert_eq!(
            finish_reassignment(&moving, &live(&[1, 2, 3])),
            None,
            "3 not in sync"
        );
        let synced = PartitionRecord {
            isr: vec![1, 2, 3],
            ..moving.clone()
        };
        let done = finish_reassignment(&synced, &live(&[1, 2, 3])).expect("done");
        assert_eq!(done.replicas, vec![3, 2]);
        assert_eq!(done.isr, vec![2, 3]);
        assert_eq!(
            (done.leader, done.leader_epoch),
            (3, 4),
            "the leader was removed"
        );
        assert!(done.adding.is_empty() && done.removing.is_empty());
        // Replacing a reassignment starts from the original replicas; cancelling returns
        // to them.
        let again = reassign(&moving, &[1, 3]).expect("replaces");
        assert_eq!(again.replicas, vec![1, 3, 2]);
        assert_eq!(
            (again.adding.clone(), again.removing.clone()),
            (vec![3], vec![2])
        );
        let cancelled = cancel_reassignment(&again).expect("cancels");
        assert_eq!(cancelled.replicas, vec![1, 2]);
        assert!(cancelled.adding.is_empty() && cancelled.removing.is_empty());
        // An added replica that came to lead (its predecessor died) and is then dropped
        // by a cancel or a new target hands leadership to a replica that stays.
        let led_by_new = PartitionRecord {
            leader: 3,
            isr: vec![2, 3],
            ..moving.clone()
        };
        let back = cancel_reassignment(&led_by_new).expect("cancels");
        assert_eq!(
            (back.leader, back.replicas.clone(), back.isr.clone()),
            (2, vec![2, 1], vec![2])
        );
        assert!(back.leader_epoch > led_by_new.leader_epoch);
        let elsewhere = reassign(&led_by_new, &[4, 2]).expect("replaces");
        assert_eq!(
            (elsewhere.leader, elsewhere.replicas.clone()),
            (2, vec![4, 2, 1])
        );
        assert!(elsewhere.leader_epoch > led_by_new.leader_epoch);
    }

    /// Cases the seeded schedules found (seeds 83, 133, 2383 and 29099 of the model
    /// with reassignments).
    #[test]
    fn reassignment_never_empties_the_isr_or_forgets_to_fence() {
        // Every in-sync replica is an added one (the originals fell out): dropping them
        // is refused, by a new target and by a cancel.
        let r = PartitionRecord {
            replicas: vec![4, 1, 2],
            adding: vec![4],
            removing: vec![1, 2],
            isr: vec![4],
            leader: 4,
            ..record(4, 5, &[], &[])
        };
        assert_eq!(
            reassign(&r, &[1, 2]),
            Err(ReassignError::NoInSyncReplicaLeft)
        );
        assert_eq!(
            cancel_reassignment(&r),
            Err(ReassignError::NoInSyncReplicaLeft)
        );
        // No leader: a reassignment does not complete (its ISR may be only replicas
        // being removed); an election comes first.
        let leaderless = PartitionRecord {
            replicas: vec![3, 2, 4],
            adding: vec![3],
            removing: vec![4],
            isr: vec![4, 3],
            ..record(-1, 7, &[], &[])
        };
        assert_eq!(finish_reassignment(&leaderless, &live(&[2, 3])), None);
        // A new target that drops a replica (here 3, added by the first) bumps the
        // epoch, so the leader's ISR change in flight cannot bring 3 back.
        let first = reassign(&record(2, 9, &[1, 2], &[1, 2]), &[3, 2]).expect("moves");
        assert_eq!(first.leader_epoch, 9);
        let second = reassign(&first, &[4, 2]).expect("replaces");
        assert_eq!(
            (second.replicas.clone(), second.leader_epoch),
            (vec![4, 2, 1], 10)
        );
    }
    #[test]
    fn the_preferred_replica_gets_leadership_back_once_in_sync() {
        let r = record(2, 7, &[1, 2, 3], &[2, 3]);
        assert_eq!(prefer(&r, &live(&[1, 2, 3])), None, "1 is not in sync");
        let r = record(2, 7, &[1, 2, 3], &[2, 3, 1]);
        let p = prefer(&r, &live(&[1, 2, 3])).expect("moves");
        assert_eq!((p.leader, p.leader_epoch), (1, 8));
        assert_eq!(prefer(&p, &live(&[1, 2, 3])), None);
    }
}
