//! The leader's side of replication for one partition in one epoch: its followers'
//! progress, the in-sync replica set, the high watermark, and when the ISR changes.

use std::collections::BTreeMap;

use strata_core::PartitionRecord;

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
    /// `min.insync.replicas`: below it the watermark does not move (KIP-966's strict
    /// min ISR, which is what keeps the replicas that leave the ISR meanwhile eligible
    /// to lead).
    pub min_insync: usize,
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
            min_insync: 1,
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

    /// Recomputes the high watermark; returns whether it rose. It does not while the
    /// committed ISR is smaller than `min.insync.replicas` (KIP-966).
    pub fn advance(&mut self) -> bool {
        if self.isr.len() < self.min_insync {
            return false;
        }
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
    /// start come back, if they are among `may_join` (their agent is live on the
    /// directory the record names for them, and not being drained: a departed follower's
    /// last fetch offset says nothing of a log that may be gone, KIP-841). Nobody comes
    /// back while who may join is not known.
    pub fn isr_change(
        &self,
        now_ms: i64,
        lag_ms: i64,
        may_join: Option<&[i32]>,
    ) -> Option<IsrChange> {
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
        let may_join = may_join?;
        let back: Vec<i32> = self
            .replicas
            .iter()
            .copied()
            .filter(|r| !self.isr.contains(r) && may_join.contains(r))
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

    /// The ISR change due because followers no longer hold their log (their agent left
    /// the cluster: its lease ran out, or it left cleanly; or it came back on another
    /// data directory), if none is pending: in-sync followers not among `holding` leave
    /// at once, as Kafka's controller drops a fenced broker from every ISR, instead of
    /// after `replica.lag.time.max.ms`. This does not wait for the lag clock, so a
    /// leader move (which starts the clock anew) never keeps a dead follower in sync.
    pub fn isr_departures(&self, holding: &[i32]) -> Option<IsrChange> {
        if self.pending.is_some() {
            return None;
        }
        let gone = |r: &i32| *r != self.node_id && !holding.contains(r);
        if !self.isr.iter().any(gone) {
            return None;
        }
        Some(IsrChange {
            isr: self.isr.iter().copied().filter(|r| !gone(r)).collect(),
            reason: "agents left the cluster or lost their disk",
        })
    }

    /// Follower `replica`'s agent restarted or left: what it fetched before says
    /// nothing of the log it has now, so it counts as not having fetched in this epoch
    /// (and, out of the ISR, cannot join it before it fetched again). Its lag clock goes
    /// on.
    pub fn forget(&mut self, replica: i32) {
        if let Some(f) = self.followers.get_mut(&replica) {
            f.log_end_offset = None;
            f.last_fetch_leader_end = i64::MAX;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::record;

    /// A follower whose agent left the cluster leaves the ISR at once, whatever its
    /// lag clock says; live followers stay; nothing while a change is pending.
    #[test]
    fn departed_agents_leave_the_isr_at_once() {
        let record = record(1, 4, &[1, 2, 3], &[1, 2, 3]);
        let mut l = LeaderState::new(1, &record, 100, 100, 0);
        assert_eq!(l.isr_departures(&[1, 2, 3]), None);
        // Just elected (lag clock at zero), and 3's lease ran out.
        assert_eq!(l.isr_change(10, 30_000, Some(&[1, 2, 3])), None);
        let change = l.isr_departures(&[1, 2]).expect("3 departed");
        assert_eq!(change.isr, vec![1, 2]);
        l.propose(change);
        assert_eq!(l.isr_departures(&[1]), None, "one change at a time");
        l.on_isr_result(Some(vec![1, 2]));
        // Even with no agent seen live, the leader stays in its own ISR.
        assert_eq!(l.isr_departures(&[]).expect("2 departed").isr, vec![1]);
    }

    /// KIP-966's strict min ISR: below `min.insync.replicas` the watermark stays where
    /// it is (so the replicas that left keep everything below it), and moves again once
    /// the ISR is back.
    #[test]
    fn the_watermark_waits_while_the_isr_is_below_min_insync() {
        let r = record(1, 0, &[1, 2, 3], &[1, 2]);
        let mut l = LeaderState::new(1, &r, 0, 0, 0);
        l.min_insync = 2;
        l.on_durable(10);
        assert!(l.on_fetch(2, 10, 10, 1));
        l.propose(IsrChange {
            isr: vec![1],
            reason: "test",
        });
        l.on_isr_result(Some(vec![1]));
        assert!(!l.on_durable(20), "alone, below min.insync.replicas");
        assert_eq!(l.high_watermark, 10);
        l.on_fetch(3, 20, 20, 2);
        l.propose(l.isr_change(2, 1000, Some(&[1, 2, 3])).expect("3 back"));
        assert!(l.on_isr_result(Some(vec![1, 3])), "moves again");
        assert_eq!(l.high_watermark, 20);
    }

    /// A follower that left is not brought back by what it fetched before it left
    /// (the ISR flapped every tick around a dead agent), nor by a restart's stale
    /// progress: only a fetch after it came back counts.
    #[test]
    fn a_departed_follower_rejoins_only_when_back_and_fetching() {
        let r = record(1, 0, &[1, 2, 3], &[1, 2, 3]);
        let mut l = LeaderState::new(1, &r, 0, 0, 0);
        l.on_durable(10);
        l.on_fetch(2, 10, 10, 5);
        l.on_fetch(3, 10, 10, 5);
        let gone = l.isr_departures(&[1, 2]).expect("3 left");
        l.propose(gone);
        l.on_isr_result(Some(vec![1, 2]));
        // Its last fetch was at the leader's end, within the lag: not re-added while gone.
        assert_eq!(l.isr_change(20, 1000, Some(&[1, 2])), None);
        assert_eq!(
            l.isr_change(20, 1000, None),
            None,
            "who may join is unknown"
        );
        // Back (a new process): its old progress is forgotten.
        l.forget(3);
        assert_eq!(l.isr_change(30, 1000, Some(&[1, 2, 3])), None);
        l.on_fetch(3, 10, 10, 40);
        assert_eq!(
            l.isr_change(40, 1000, Some(&[1, 2, 3]))
                .expect("caught up")
                .isr,
            vec![1, 2, 3]
        );
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
        assert_eq!(l.isr_change(500, 1000, Some(&[1, 2, 3])), None);
        l.on_fetch(2, 100, 100, 1400);
        let change = l.isr_change(1500, 1000, Some(&[1, 2, 3])).expect("3 lags");
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
        assert_eq!(
            l.isr_change(1600, 1000, Some(&[1, 2, 3])),
            None,
            "below the watermark"
        );
        l.on_fetch(3, 100, 100, 1700);
        let change = l
            .isr_change(1700, 1000, Some(&[1, 2, 3]))
            .expect("3 is back");
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
        assert_eq!(l.isr_change(100 * 100, 500, Some(&[1, 2])), None);
    }

    #[test]
    fn a_leader_tracks_replicas_added_within_its_epoch() {
        let r = record(1, 0, &[1, 2], &[1, 2]);
        let mut l = LeaderState::new(1, &r, 0, 0, 0);
        l.on_durable(50);
        l.on_fetch(2, 50, 50, 10);
        l.set_replicas(&[3, 2, 1], 20);
        assert_eq!(
            l.isr_change(30, 1000, Some(&[1, 2, 3])),
            None,
            "3 has not fetched"
        );
        l.on_fetch(3, 50, 50, 40);
        assert_eq!(
            l.isr_change(40, 1000, Some(&[1, 2, 3]))
                .expect("3 in sync")
                .isr,
            vec![1, 2, 3]
        );
    }
}
