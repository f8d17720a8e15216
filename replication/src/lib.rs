//! The replication state machines, as plain state and events: no sockets, disks, clocks
//! or tasks. The agent's `Partition` drives them; the seeded schedule tests
//! (`tests/schedules.rs`) drive the very same code through message delays, drops,
//! crashes and paused leaders. It is its own crate so that those tests build and run
//! without the agent.
//!
//! - [`LeaderState`]: a leader's view of its followers (their log end offsets, when each
//!   was last caught up), the in-sync replica set, the high watermark, and when the ISR
//!   should shrink or expand.
//! - [`elect`] and [`prefer`]: the election rules the controller applies to a
//!   partition record in one metastore transaction.
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

use std::collections::BTreeMap;

pub use strata_core::PartitionRecord;
pub use strata_log::epochs::{Cut, EpochHistory, divergence};

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The offset the follower last fetched from: everything below is in its log.
    /// `None` until its first fetch in this epoch.
    pub log_end_offset: Option<i64>,
    /// The last time it was caught up with the leader.
    pub last_caught_up_ms: i64,
    /// The leader's log end at the follower's previous fetch, and when that was.
    last_fetch_leader_end: i64,
    last_fetch_ms: i64,
}

/// A change of the ISR the leader wants written to the metastore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub isr: Vec<i32>,
    /// Why, for the log.
    pub reason: &'static str,
}

/// A leader's replication state for one partition in one epoch.
#[derive(Debug, Clone)]
pub struct LeaderState {
    pub node_id: i32,
    pub epoch: i32,
    pub replicas: Vec<i32>,
    /// The ISR as the metastore has it.
    pub isr: Vec<i32>,
    /// An ISR change sent to the metastore and not answered yet.
    pub pending: Option<IsrChange>,
    pub followers: BTreeMap<i32, FollowerProgress>,
    /// The leader's log end when this epoch began: a follower below it may still hold a
    /// suffix of an older epoch that it has to cut off.
    pub epoch_start_offset: i64,
    pub high_watermark: i64,
    /// The leader's own fsynced log end.
    pub durable_end: i64,
}

impl LeaderState {
    /// Leadership of `record` (which names this node as leader) begins at `now_ms`, with
    /// the leader's log ending at `log_end` and the high watermark known so far. Every
    /// follower counts as caught up now, so none leaves the ISR before it had
    /// `lag_ms` to fetch.
    pub fn new(
        node_id: i32,
        record: &PartitionRecord,
        log_end: i64,
        high_watermark: i64,
        now_ms: i64,
    ) -> LeaderState {
        let followers = record
            .replicas
            .iter()
            .filter(|&&r| r != node_id)
            .map(|&r| {
                (
                    r,
                    FollowerProgress {
                        log_end_offset: None,
                        last_caught_up_ms: now_ms,
                        last_fetch_leader_end: log_end,
                        last_fetch_ms: now_ms,
                    },
                )
            })
            .collect();
        LeaderState {
            node_id,
            epoch: record.leader_epoch,
            replicas: record.replicas.clone(),
            isr: record.isr.clone(),
            pending: None,
            followers,
            epoch_start_offset: log_end,
            high_watermark: high_watermark.min(log_end),
            durable_end: high_watermark.min(log_end),
        }
    }

    /// The committed ISR plus a pending addition: what the watermark waits for.
    pub fn maximal_isr(&self) -> Vec<i32> {
        let mut isr = self.isr.clone();
        if let Some(p) = &self.pending {
            for r in &p.isr {
                if !isr.contains(r) {
                    isr.push(*r);
                }
            }
        }
        isr
    }

    /// Recomputes the high watermark; returns whether it rose.
    fn advance(&mut self) -> bool {
        let mut candidate = self.durable_end;
        for r in self.maximal_isr() {
            if r == self.node_id {
                continue;
            }
            match self.followers.get(&r).and_then(|f| f.log_end_offset) {
                Some(end) => candidate = candidate.min(end),
                None => return false,
            }
        }
        if candidate > self.high_watermark {
            self.high_watermark = candidate;
            true
        } else {
            false
        }
    }

    /// The leader fsynced its log up to `end`. Returns whether the watermark rose.
    pub fn on_durable(&mut self, end: i64) -> bool {
        self.durable_end = self.durable_end.max(end);
        self.advance()
    }

    /// Follower `replica` fetched from `offset` at `now_ms`, while the leader's log ended
    /// at `leader_end`. Returns whether the watermark rose; `false` too for a node that
    /// is not a follower here.
    pub fn on_fetch(&mut self, replica: i32, offset: i64, leader_end: i64, now_ms: i64) -> bool {
        let Some(f) = self.followers.get_mut(&replica) else {
            return false;
        };
        // A fetch from below an earlier one (a restarted follower that lost its page
        // cache) lowers what we know; the watermark itself never falls.
        f.log_end_offset = Some(offset.min(leader_end));
        if offset >= leader_end {
            f.last_caught_up_ms = now_ms;
        } else if offset >= f.last_fetch_leader_end {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.last_fetch_leader_end = leader_end;
        f.last_fetch_ms = now_ms;
        self.advance()
    }

    /// The ISR change due at `now_ms`, if any and if none is pending: followers not
    /// caught up for `lag_ms` leave; followers that reached the watermark and the epoch
    /// start come back.
    pub fn isr_change(&self, now_ms: i64, lag_ms: i64) -> Option<IsrChange> {
        if self.pending.is_some() {
            return None;
        }
        let lagging: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|r| *r != self.node_id)
            .filter(|r| {
                self.followers
                    .get(r)
                    .is_none_or(|f| now_ms - f.last_caught_up_ms > lag_ms)
            })
            .collect();
        if !lagging.is_empty() {
            let isr = self
                .isr
                .iter()
                .copied()
                .filter(|r| !lagging.contains(r))
                .collect();
            return Some(IsrChange {
                isr,
                reason: "followers fell behind for longer than replica.lag.time.max.ms",
            });
        }
        let back: Vec<i32> = self
            .replicas
            .iter()
            .copied()
            .filter(|r| !self.isr.contains(r))
            .filter(|r| {
                self.followers.get(r).is_some_and(|f| {
                    f.log_end_offset.is_some_and(|end| {
                        end >= self.high_watermark && end >= self.epoch_start_offset
                    }) && now_ms - f.last_caught_up_ms <= lag_ms
                })
            })
            .collect();
        if back.is_empty() {
            return None;
        }
        let mut isr = self.isr.clone();
        isr.extend(back);
        Some(IsrChange {
            isr,
            reason: "followers caught up",
        })
    }

    /// The ISR change due because agents left the cluster (their lease ran out, or they
    /// left cleanly), if none is pending: in-sync followers not among `live` leave at
    /// once, as Kafka's controller drops a fenced broker from every ISR, instead of
    /// after `replica.lag.time.max.ms`. This does not wait for the lag clock, so a
    /// leader move (which starts the clock anew) never keeps a dead follower in sync.
    pub fn isr_departures(&self, live: &[i32]) -> Option<IsrChange> {
        if self.pending.is_some() {
            return None;
        }
        let gone = |r: &i32| *r != self.node_id && !live.contains(r);
        if !self.isr.iter().any(gone) {
            return None;
        }
        Some(IsrChange {
            isr: self.isr.iter().copied().filter(|r| !gone(r)).collect(),
            reason: "agents left the cluster (their lease ran out)",
        })
    }

    /// Marks `change` as sent to the metastore (an addition counts for the watermark
    /// from now on).
    pub fn propose(&mut self, change: IsrChange) {
        self.pending = Some(change);
    }

    /// The metastore answered the pending change: `Some(isr)` if it committed it.
    /// Returns whether the watermark rose.
    pub fn on_isr_result(&mut self, committed: Option<Vec<i32>>) -> bool {
        self.pending = None;
        if let Some(isr) = committed {
            self.isr = isr;
        }
        self.advance()
    }

    /// The replica set changed within this epoch (a reassignment began): new replicas
    /// are tracked from `now_ms` on, as not yet caught up; replicas no longer listed and
    /// not in the ISR are forgotten.
    pub fn set_replicas(&mut self, replicas: &[i32], now_ms: i64) {
        self.replicas = replicas.to_vec();
        // The ISR is left alone: a record read before an ISR change of ours committed
        // may arrive after it, and forgetting a committed member would let the
        // watermark pass it. Dropping replicas takes a new epoch instead.
        self.followers
            .retain(|r, _| replicas.contains(r) || self.isr.contains(r));
        for &r in replicas {
            if r != self.node_id {
                self.followers.entry(r).or_insert(FollowerProgress {
                    log_end_offset: None,
                    last_caught_up_ms: i64::MIN / 2,
                    last_fetch_leader_end: i64::MAX,
                    last_fetch_ms: now_ms,
                });
            }
        }
    }

    /// Whether acks=all writes may be taken: the committed ISR is at least
    /// `min.insync.replicas`.
    pub fn enough_replicas(&self, min_insync: usize) -> bool {
        self.isr.len() >= min_insync
    }
}

/// The controller's election for a partition whose leader is not among the `live`
/// agents: the first replica (in preference order) that is live and in the ISR; with
/// `unclean` and none such, the first live replica, alone in the ISR. The ISR loses the
/// agents that are down. With no candidate the partition has no leader (-1) and keeps its
/// ISR, so that an in-sync replica that comes back can lead again. Every change bumps the
/// leader epoch, which fences the old leader. `None`: nothing to change.
pub fn elect(record: &PartitionRecord, live: &[i32], unclean: bool) -> Option<PartitionRecord> {
    if record.leader >= 0 && live.contains(&record.leader) {
        return None;
    }
    let clean = record
        .replicas
        .iter()
        .copied()
        .find(|r| live.contains(r) && record.isr.contains(r));
    let (leader, isr) = match clean {
        Some(leader) => {
            let isr = record
                .isr
                .iter()
                .copied()
                .filter(|r| live.contains(r))
                .collect();
            (leader, isr)
        }
        None => match record.replicas.iter().copied().find(|r| live.contains(r)) {
            Some(leader) if unclean => (leader, vec![leader]),
            _ if record.leader == -1 => return None,
            _ => (-1, record.isr.clone()),
        },
    };
    Some(PartitionRecord {
        leader,
        leader_epoch: record.leader_epoch + 1,
        isr,
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
/// go, and if the leader was one of them, the first live in-sync target replica leads.
/// The epoch is bumped so the removed replicas are fenced. `None`: not yet (or none in
/// progress), or no target replica could lead.
pub fn finish_reassignment(record: &PartitionRecord, live: &[i32]) -> Option<PartitionRecord> {
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
        *replicas
            .iter()
            .find(|r| isr.contains(r) && live.contains(r))?
    };
    Some(PartitionRecord {
        replicas,
        isr,
        leader,
        leader_epoch: record.leader_epoch + 1,
        adding: Vec::new(),
        removing: Vec::new(),
        ..record.clone()
    })
}

/// Preferred-leader election: hands leadership back to the first replica when it is
/// live, in the ISR and not leading. `None`: nothing to change.
pub fn prefer(record: &PartitionRecord, live: &[i32]) -> Option<PartitionRecord> {
    let preferred = *record.replicas.first()?;
    if preferred == record.leader || !live.contains(&preferred) || !record.isr.contains(&preferred)
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

    fn record(leader: i32, epoch: i32, replicas: &[i32], isr: &[i32]) -> PartitionRecord {
        PartitionRecord {
            index: 0,
            replicas: replicas.to_vec(),
            leader,
            leader_epoch: epoch,
            isr: isr.to_vec(),
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }

    /// A follower whose agent left the cluster leaves the ISR at once, whatever its
    /// lag clock says; live followers stay; nothing while a change is pending.
    #[test]
    fn departed_agents_leave_the_isr_at_once() {
        let record = PartitionRecord {
            index: 0,
            replicas: vec![1, 2, 3],
            leader: 1,
            leader_epoch: 4,
            isr: vec![1, 2, 3],
            adding: Vec::new(),
            removing: Vec::new(),
        };
        let mut l = LeaderState::new(1, &record, 100, 100, 0);
        assert_eq!(l.isr_departures(&[1, 2, 3]), None);
        // Just elected (lag clock at zero), and 3's lease ran out.
        assert_eq!(l.isr_change(10, 30_000), None);
        let change = l.isr_departures(&[1, 2]).expect("3 departed");
        assert_eq!(change.isr, vec![1, 2]);
        l.propose(change);
        assert_eq!(l.isr_departures(&[1]), None, "one change at a time");
        l.on_isr_result(Some(vec![1, 2]));
        // Even with no agent seen live, the leader stays in its own ISR.
        assert_eq!(l.isr_departures(&[]).expect("2 departed").isr, vec![1]);
    }

    #[test]
    fn the_watermark_waits_for_every_in_sync_replica() {
        let r = record(1, 3, &[1, 2, 3], &[1, 2, 3]);
        let mut l = LeaderState::new(1, &r, 10, 10, 0);
        assert!(!l.on_durable(15), "followers have not fetched yet");
        assert!(!l.on_fetch(2, 15, 15, 1));
        assert!(l.on_fetch(3, 12, 15, 1));
        assert_eq!(l.high_watermark, 12);
        assert!(l.on_fetch(3, 15, 15, 2));
        assert_eq!(l.high_watermark, 15);
        // Followers ahead of the leader's fsync wait for it.
        assert!(!l.on_fetch(2, 20, 20, 3));
        assert!(!l.on_fetch(3, 20, 20, 3));
        assert!(l.on_durable(20));
        assert_eq!(l.high_watermark, 20);
    }

    #[test]
    fn laggards_leave_and_come_back_through_the_metastore() {
        let r = record(1, 0, &[1, 2, 3], &[1, 2, 3]);
        let mut l = LeaderState::new(1, &r, 0, 0, 0);
        l.on_durable(100);
        l.on_fetch(2, 100, 100, 10);
        assert_eq!(l.isr_change(500, 1000), None);
        l.on_fetch(2, 100, 100, 1400);
        let change = l.isr_change(1500, 1000).expect("3 lags");
        assert_eq!(change.isr, vec![1, 2]);
        l.propose(change);
        // The watermark still waits for 3 until the metastore has dropped it.
        assert_eq!(l.high_watermark, 0);
        assert!(l.on_isr_result(Some(vec![1, 2])));
        assert_eq!(l.high_watermark, 100);
        assert!(!l.enough_replicas(3));
        // 3 comes back and catches up: it is counted for the watermark while its return
        // is pending.
        l.on_fetch(3, 50, 100, 1600);
        assert_eq!(l.isr_change(1600, 1000), None, "below the watermark");
        l.on_fetch(3, 100, 100, 1700);
        let change = l.isr_change(1700, 1000).expect("3 is back");
        assert_eq!(change.isr, vec![1, 2, 3]);
        l.propose(change);
        l.on_durable(120);
        l.on_fetch(2, 120, 120, 1800);
        assert_eq!(l.high_watermark, 100, "waits for pending member 3");
        assert!(l.on_fetch(3, 120, 120, 1800));
        assert!(!l.on_isr_result(None));
        assert_eq!(l.isr, vec![1, 2]);
    }

    #[test]
    fn a_follower_behind_a_busy_leader_is_still_caught_up() {
        let r = record(1, 0, &[1, 2], &[1, 2]);
        let mut l = LeaderState::new(1, &r, 0, 0, 0);
        // Every fetch reaches the end the leader had at the one before.
        for t in 1..100 {
            l.on_fetch(2, (t - 1) * 10, t * 10, t * 100);
        }
        assert_eq!(l.isr_change(100 * 100, 500), None);
    }

    #[test]
    fn elections_pick_a_live_in_sync_replica_and_bump_the_epoch() {
        let r = record(1, 4, &[1, 2, 3], &[1, 3]);
        assert_eq!(elect(&r, &[1, 2, 3], false), None);
        let e = elect(&r, &[2, 3], false).expect("elected");
        assert_eq!((e.leader, e.leader_epoch, e.isr.clone()), (3, 5, vec![3]));
        // Only out-of-sync replicas live: no leader, unless unclean election is on.
        let none = elect(&r, &[2], false).expect("fenced");
        assert_eq!(
            (none.leader, none.leader_epoch, none.isr.clone()),
            (-1, 5, vec![1, 3])
        );
        assert_eq!(elect(&none, &[2], false), None);
        let unclean = elect(&none, &[2], true).expect("unclean");
        assert_eq!((unclean.leader, unclean.isr.clone()), (2, vec![2]));
        // An in-sync replica back: it leads.
        let back = elect(&none, &[1, 2], false).expect("back");
        assert_eq!((back.leader, back.leader_epoch, back.isr), (1, 6, vec![1]));
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
            finish_reassignment(&moving, &[1, 2, 3]),
            None,
            "3 not in sync"
        );
        let synced = PartitionRecord {
            isr: vec![1, 2, 3],
            ..moving.clone()
        };
        let done = finish_reassignment(&synced, &[1, 2, 3]).expect("done");
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
        assert_eq!(finish_reassignment(&leaderless, &[2, 3]), None);
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
    fn a_leader_tracks_replicas_added_within_its_epoch() {
        let r = record(1, 0, &[1, 2], &[1, 2]);
        let mut l = LeaderState::new(1, &r, 0, 0, 0);
        l.on_durable(50);
        l.on_fetch(2, 50, 50, 10);
        l.set_replicas(&[3, 2, 1], 20);
        assert_eq!(l.isr_change(30, 1000), None, "3 has not fetched");
        l.on_fetch(3, 50, 50, 40);
        assert_eq!(
            l.isr_change(40, 1000).expect("3 in sync").isr,
            vec![1, 2, 3]
        );
    }

    #[test]
    fn the_preferred_replica_gets_leadership_back_once_in_sync() {
        let r = record(2, 7, &[1, 2, 3], &[2, 3]);
        assert_eq!(prefer(&r, &[1, 2, 3]), None, "1 is not in sync");
        let r = record(2, 7, &[1, 2, 3], &[2, 3, 1]);
        let p = prefer(&r, &[1, 2, 3]).expect("moves");
        assert_eq!((p.leader, p.leader_epoch), (1, 8));
        assert_eq!(prefer(&p, &[1, 2, 3]), None);
    }
}
