//! One replica of a partition on one agent: its role in the newest leader epoch it
//! learned, its high watermark, and how far its log is known to be durable.
//!
//! Events in: a partition record from the metastore ([`Replica::apply`]), a produce
//! ([`Replica::admit`]), a follower's fetch ([`Replica::on_replica_fetch`]), batches
//! copied from the leader ([`Replica::may_copy`], [`Replica::copied`]), an fsync begun
//! and finished ([`Replica::begin_flush`], [`Replica::complete_flush`]), the ISR clock
//! ([`Replica::isr_tick`]) and the metastore's answer ([`Replica::on_isr_result`]).
//! Out: the [`Transition`] to carry out (stop or start copying, stamp the log with the
//! epoch), refusals, and the high watermark to publish.
//!
//! The agent's `Partition` keeps one behind a mutex beside the log; the seeded schedules
//! keep one per simulated node.

use strata_core::PartitionRecord;

use crate::leader::{IsrChange, LeaderState};

/// Which replicas of a partition are where the leader's ISR rules need them, as the
/// live agents show (`strata_core::LiveAgents::holding` and `may_join`).
#[derive(Debug, Clone, Copy)]
pub struct Members<'a> {
    /// Replicas whose agent is live on the directory recorded for them.
    pub holding: &'a [i32],
    /// Those of them that may join the ISR (not being drained).
    pub may_join: &'a [i32],
}

/// This replica's part in its current leader epoch.
#[derive(Debug, Clone)]
pub enum Role {
    Leader(LeaderState),
    /// Copies from `leader`; -1 while the partition has no leader (or before the first
    /// record).
    Follower {
        leader: i32,
    },
}

/// What the owner of a replica does after [`Replica::apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing: the record is older than one applied already, or names the role this
    /// replica has (a leader may have begun tracking replicas added within its epoch).
    None,
    /// Leads `epoch` from now on: stop copying, stamp appends with `epoch`.
    Leads {
        epoch: i32,
        /// The epoch this replica led until now, whose waiting acknowledgements fail.
        deposed: Option<i32>,
    },
    /// Follows `leader` (-1: no leader) in `epoch`: stop any earlier copying, and start
    /// a [`crate::Follower`] cycle if there is a leader.
    Follows {
        leader: i32,
        epoch: i32,
        deposed: Option<i32>,
    },
}

/// Why this replica refuses a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It does not lead (a produce or a replica fetch), or no longer follows the epoch
    /// a fetcher copies in.
    NotLeader,
    /// The request's leader epoch is older than this replica's.
    FencedEpoch { current: i32 },
    /// The request's leader epoch is newer than this replica knows.
    UnknownEpoch { current: i32 },
    /// Fewer in-sync replicas than `min.insync.replicas`: nothing is appended.
    NotEnoughReplicas { isr: usize, min: usize },
    /// A follower fetches from beyond the leader's log end: it has a divergent suffix
    /// to cut first, and is caught up with nothing.
    BeyondLogEnd { offset: i64, log_end: i64 },
    /// A new leader's watermark has not yet reached the log end its epoch began with:
    /// offsets answered now could be older than ones its predecessor answered.
    WatermarkBehindEpochStart {
        high_watermark: i64,
        epoch_start: i64,
    },
}

/// Where an acks=all write appended in an epoch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The watermark has not reached it yet.
    Pending,
    /// Committed, with enough in-sync replicas: acknowledge.
    Committed,
    /// Committed, but the ISR fell below `min.insync.replicas` meanwhile (Kafka's
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    NotEnoughReplicas { isr: usize },
    /// This replica no longer leads the epoch the write was appended in: the write may
    /// or may not survive, and the producer has to retry.
    Deposed,
}

/// An fsync begun: what it covers, and the cut count when it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushTicket {
    pub target: i64,
    cuts: u64,
}

/// What an fsync that finished established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Everything below the ticket's target is durable; `watermark_rose` if that moved
    /// the leader's high watermark.
    Durable { watermark_rose: bool },
    /// The log was cut back while the fsync ran: what it covered is not known, so it
    /// counts for nothing, and the next fsync covers it.
    Again,
}

#[derive(Debug, Clone)]
pub struct Replica {
    node_id: i32,
    role: Role,
    /// The newest leader epoch applied (-1 before the first record).
    epoch: i32,
    /// The watermark while following (a leader's is its [`LeaderState`]'s).
    high_watermark: i64,
    /// The log end the last fsync covered.
    flushed: i64,
    /// Bumped whenever the log is cut back, so that an fsync that began before a cut
    /// does not claim what was appended after it.
    cuts: u64,
    /// `min.insync.replicas`, for the strict min ISR of a leader's watermark.
    min_insync: usize,
    /// While leading: the epoch this unbroken leadership began in. A leader elected
    /// again in a newer epoch (a reassignment or an ISR change bumped it) keeps its log
    /// as it was, so what it appended in the earlier epochs is still its to commit.
    leading_since: i32,
}

impl Replica {
    /// A replica whose log (just opened) ends at `log_end`, everything in it durable,
    /// and which last knew `high_watermark` as committed. It has no role until the
    /// first [`Replica::apply`].
    pub fn new(node_id: i32, log_end: i64, high_watermark: i64) -> Replica {
        Replica {
            node_id,
            role: Role::Follower { leader: -1 },
            epoch: -1,
            high_watermark: high_watermark.min(log_end),
            flushed: log_end,
            cuts: 0,
            min_insync: 1,
            leading_since: -1,
        }
    }

    /// Sets `min.insync.replicas` (the topic's config changed). Returns whether a
    /// leader's watermark rose (it was held back by a higher minimum).
    pub fn set_min_insync(&mut self, min_insync: usize) -> bool {
        self.min_insync = min_insync.max(1);
        match &mut self.role {
            Role::Leader(l) => {
                l.min_insync = self.min_insync;
                l.advance()
            }
            Role::Follower { .. } => false,
        }
    }

    pub fn role(&self) -> &Role {
        &self.role
    }

    /// The leader state, while this replica leads.
    pub fn leader(&self) -> Option<&LeaderState> {
        match &self.role {
            Role::Leader(l) => Some(l),
            Role::Follower { .. } => None,
        }
    }

    /// The newest leader epoch this replica applied.
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    pub fn high_watermark(&self) -> i64 {
        match &self.role {
            Role::Leader(l) => l.high_watermark,
            Role::Follower { .. } => self.high_watermark,
        }
    }

    /// The log end the last fsync covered.
    pub fn flushed(&self) -> i64 {
        self.flushed
    }

    /// Takes the role `record` names for this node, with the log ending at `log_end`.
    /// A new leader counts every follower as caught up at `now_ms`, and its own log as
    /// durable up to the last fsync; its watermark waits until each in-sync follower
    /// fetched. A record older than the epoch applied changes nothing (one read before
    /// a newer one was applied may arrive late).
    pub fn apply(&mut self, record: &PartitionRecord, log_end: i64, now_ms: i64) -> Transition {
        if record.leader_epoch < self.epoch {
            return Transition::None;
        }
        let led = self.leader().map(|l| l.epoch);
        if record.leader == self.node_id {
            if let Role::Leader(l) = &mut self.role
                && l.epoch == record.leader_epoch
            {
                // Within an epoch only this leader changes the ISR; a reassignment may
                // add replicas (one that drops any starts a new epoch).
                if l.replicas != record.replicas {
                    l.set_replicas(&record.replicas, now_ms);
                }
                return Transition::None;
            }
            let known = self.high_watermark();
            let mut leader = LeaderState::new(self.node_id, record, log_end, known, now_ms);
            leader.min_insync = self.min_insync;
            leader.on_durable(self.flushed);
            if led.is_none() {
                self.leading_since = record.leader_epoch;
            }
            self.role = Role::Leader(leader);
            self.epoch = record.leader_epoch;
            return Transition::Leads {
                epoch: record.leader_epoch,
                deposed: led,
            };
        }
        if let Role::Follower { leader } = self.role
            && leader == record.leader
            && self.epoch == record.leader_epoch
        {
            return Transition::None;
        }
        self.high_watermark = self.high_watermark().min(log_end);
        self.role = Role::Follower {
            leader: record.leader,
        };
        self.epoch = record.leader_epoch;
        Transition::Follows {
            leader: record.leader,
            epoch: record.leader_epoch,
            deposed: led,
        }
    }

    /// Checks a request's leader epoch against this replica's (-1: not given, as from
    /// clients before KIP-320: anything goes).
    pub fn check_epoch(&self, epoch: i32) -> Result<(), Refusal> {
        if epoch < 0 {
            return Ok(());
        }
        match epoch.cmp(&self.epoch) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(Refusal::FencedEpoch {
                current: self.epoch,
            }),
            std::cmp::Ordering::Greater => Err(Refusal::UnknownEpoch {
                current: self.epoch,
            }),
        }
    }

    /// Whether offsets may be answered to clients now (KIP-207): a new leader's
    /// watermark starts at what it knew as a follower, which may be below the one the
    /// previous leader answered; until it reaches the log end this epoch began with,
    /// "latest" could go backwards and a reader would stop short of acknowledged
    /// records. Clients retry the refusal (OFFSET_NOT_AVAILABLE).
    pub fn offsets_settled(&self) -> Result<(), Refusal> {
        match &self.role {
            Role::Leader(l) if l.high_watermark < l.epoch_start_offset => {
                Err(Refusal::WatermarkBehindEpochStart {
                    high_watermark: l.high_watermark,
                    epoch_start: l.epoch_start_offset,
                })
            }
            Role::Leader(_) => Ok(()),
            Role::Follower { .. } => Err(Refusal::NotLeader),
        }
    }

    /// Whether a produce may be appended now, and in which epoch: only a leader takes
    /// one, and with `min_insync` given (acks=all) only while its committed ISR is at
    /// least that large.
    pub fn admit(&self, min_insync: Option<usize>) -> Result<i32, Refusal> {
        let Role::Leader(leader) = &self.role else {
            return Err(Refusal::NotLeader);
        };
        if let Some(min) = min_insync
            && !leader.enough_replicas(min)
        {
            return Err(Refusal::NotEnoughReplicas {
                isr: leader.isr.len(),
                min,
            });
        }
        Ok(leader.epoch)
    }

    /// Everything below `end` is durable on this replica (an fsync, or a write with
    /// page-cache durability). Returns whether the leader's watermark rose.
    pub fn on_durable(&mut self, end: i64) -> bool {
        match &mut self.role {
            Role::Leader(l) => l.on_durable(end),
            Role::Follower { .. } => false,
        }
    }

    /// Follower `follower` fetches from `offset` in `epoch`, while this replica's log
    /// ends at `log_end`: the leader learns how far that follower's copy reaches.
    /// Returns whether the watermark rose.
    pub fn on_replica_fetch(
        &mut self,
        follower: i32,
        epoch: i32,
        offset: i64,
        log_end: i64,
        now_ms: i64,
    ) -> Result<bool, Refusal> {
        self.check_epoch(epoch)?;
        let Role::Leader(leader) = &mut self.role else {
            return Err(Refusal::NotLeader);
        };
        if offset > log_end {
            return Err(Refusal::BeyondLogEnd { offset, log_end });
        }
        Ok(leader.on_fetch(follower, offset, log_end, now_ms))
    }

    /// The ISR change to send to the metastore now, with its epoch: the pending one
    /// until the metastore has answered it, else a new one if due (then marked
    /// pending): followers that no longer hold their log leave first (when who holds
    /// what is known), then the lag rules apply.
    pub fn isr_tick(
        &mut self,
        now_ms: i64,
        lag_ms: i64,
        members: Option<Members<'_>>,
    ) -> Option<(i32, IsrChange)> {
        let Role::Leader(leader) = &mut self.role else {
            return None;
        };
        if let Some(pending) = &leader.pending {
            return Some((leader.epoch, pending.clone()));
        }
        let change = members
            .and_then(|m| leader.isr_departures(m.holding))
            .or_else(|| leader.isr_change(now_ms, lag_ms, members.map(|m| m.may_join)))?;
        leader.propose(change.clone());
        Some((leader.epoch, change))
    }

    /// Follower `replica`'s agent restarted or left ([`LeaderState::forget`]).
    pub fn forget_follower(&mut self, replica: i32) {
        if let Role::Leader(l) = &mut self.role {
            l.forget(replica);
        }
    }

    /// The metastore's answer to the ISR change proposed in `epoch`: `Some(isr)` if it
    /// committed it. Returns whether the watermark rose.
    pub fn on_isr_result(&mut self, epoch: i32, committed: Option<Vec<i32>>) -> bool {
        match &mut self.role {
            Role::Leader(l) if l.epoch == epoch => l.on_isr_result(committed),
            _ => false,
        }
    }

    /// Where an acks=all write appended in `epoch`, ending at `end_offset`, stands.
    pub fn ack(&self, epoch: i32, end_offset: i64, min_insync: usize) -> Ack {
        match &self.role {
            Role::Leader(l) if (self.leading_since..=l.epoch).contains(&epoch) => {
                // Checked first: below min.insync.replicas the watermark does not move,
                // so the write would otherwise wait for ever.
                if !l.enough_replicas(min_insync) {
                    Ack::NotEnoughReplicas { isr: l.isr.len() }
                } else if l.high_watermark < end_offset {
                    Ack::Pending
                } else {
                    Ack::Committed
                }
            }
            _ => Ack::Deposed,
        }
    }

    /// Whether a fetcher of `epoch` may still write to the log (append what it copied,
    /// cut a divergent suffix, start over at the leader's log start): only while this
    /// replica follows that epoch, so a fetcher of an epoch that ended cannot touch it.
    pub fn may_copy(&self, epoch: i32) -> Result<(), Refusal> {
        match self.role {
            Role::Follower { .. } if self.epoch == epoch => Ok(()),
            _ => Err(Refusal::NotLeader),
        }
    }

    /// A follower changed its log from ending at `before` to the range
    /// `log_start..log_end`, and learned the leader's watermark `leader_hw` (if the
    /// change brought one). Its own watermark is the leader's, capped at its log end. A
    /// cut (the end fell, or the start passed the old end) makes any fsync in flight
    /// count for nothing.
    pub fn copied(&mut self, before: i64, log_start: i64, log_end: i64, leader_hw: Option<i64>) {
        if log_end < before || log_start > before {
            self.cuts += 1;
        }
        self.flushed = self.flushed.min(log_end);
        let hw = leader_hw.unwrap_or(self.high_watermark);
        self.high_watermark = hw.min(log_end);
    }

    /// An fsync of the log up to `target` is about to begin; `None` if everything below
    /// it is already durable.
    pub fn begin_flush(&self, target: i64) -> Option<FlushTicket> {
        (target > self.flushed).then_some(FlushTicket {
            target,
            cuts: self.cuts,
        })
    }

    /// The fsync of `ticket` finished: unless the log was cut back meanwhile,
    /// everything below its target is durable, which a leader counts for its watermark.
    pub fn complete_flush(&mut self, ticket: FlushTicket) -> Flushed {
        if ticket.cuts != self.cuts {
            return Flushed::Again;
        }
        self.flushed = self.flushed.max(ticket.target);
        Flushed::Durable {
            watermark_rose: self.on_durable(ticket.target),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::record;

    #[test]
    fn roles_follow_the_newest_epoch_and_ignore_older_records() {
        let mut r = Replica::new(1, 10, 8);
        assert_eq!(r.high_watermark(), 8);
        let follow = record(2, 3, &[1, 2], &[1, 2]);
        assert_eq!(
            r.apply(&follow, 10, 0),
            Transition::Follows {
                leader: 2,
                epoch: 3,
                deposed: None
            }
        );
        assert_eq!(r.apply(&follow, 10, 0), Transition::None, "same role");
        let lead = record(1, 4, &[1, 2], &[1, 2]);
        assert_eq!(
            r.apply(&lead, 10, 0),
            Transition::Leads {
                epoch: 4,
                deposed: None
            }
        );
        assert_eq!(r.apply(&follow, 10, 0), Transition::None, "older epoch");
        assert_eq!(r.admit(Some(2)), Ok(4));
        assert_eq!(
            r.admit(Some(3)),
            Err(Refusal::NotEnoughReplicas { isr: 2, min: 3 })
        );
        let deposed = record(2, 5, &[1, 2], &[2]);
        assert_eq!(
            r.apply(&deposed, 10, 0),
            Transition::Follows {
                leader: 2,
                epoch: 5,
                deposed: Some(4)
            }
        );
        assert_eq!(r.admit(None), Err(Refusal::NotLeader));
        assert_eq!(r.check_epoch(4), Err(Refusal::FencedEpoch { current: 5 }));
        assert_eq!(r.check_epoch(6), Err(Refusal::UnknownEpoch { current: 5 }));
    }

    #[test]
    fn acknowledgements_wait_for_the_watermark_in_the_same_epoch() {
        let mut r = Replica::new(1, 0, 0);
        r.apply(&record(1, 0, &[1, 2], &[1, 2]), 0, 0);
        assert_eq!(r.ack(0, 5, 2), Ack::Pending);
        assert!(!r.on_durable(5), "the follower has not fetched");
        assert_eq!(
            r.on_replica_fetch(2, 0, 7, 5, 1),
            Err(Refusal::BeyondLogEnd {
                offset: 7,
                log_end: 5
            })
        );
        assert_eq!(r.on_replica_fetch(2, 0, 5, 5, 1), Ok(true));
        assert_eq!(r.ack(0, 5, 2), Ack::Committed);
        assert_eq!(r.ack(0, 5, 3), Ack::NotEnoughReplicas { isr: 2 });
        r.apply(&record(2, 1, &[1, 2], &[1, 2]), 5, 2);
        assert_eq!(r.ack(0, 5, 2), Ack::Deposed);
    }

    /// A reassignment or an ISR change may elect the same leader again in a newer
    /// epoch: its log is unchanged, so a write it appended before is committed (and
    /// acknowledged) by the watermark of the new epoch, as in Kafka, and not refused as
    /// if leadership had moved. Once it followed another leader, it is.
    #[test]
    fn a_leader_elected_again_still_commits_what_it_appended() {
        let mut r = Replica::new(1, 0, 0);
        r.apply(&record(1, 0, &[1, 2], &[1, 2]), 0, 0);
        r.on_durable(5);
        assert_eq!(r.ack(0, 5, 2), Ack::Pending);
        let again = r.apply(&record(1, 1, &[1, 2, 3], &[1, 2]), 5, 1);
        assert_eq!(
            again,
            Transition::Leads {
                epoch: 1,
                deposed: Some(0)
            }
        );
        assert_eq!(
            r.ack(0, 5, 2),
            Ack::Pending,
            "still this leader's to commit"
        );
        r.on_durable(5);
        assert_eq!(r.on_replica_fetch(2, 1, 5, 5, 2), Ok(true));
        assert_eq!(r.ack(0, 5, 2), Ack::Committed);
        assert_eq!(r.ack(1, 5, 2), Ack::Committed);
        assert_eq!(r.ack(2, 5, 2), Ack::Deposed, "an epoch not begun yet");

        r.apply(&record(2, 2, &[1, 2], &[1, 2]), 5, 3);
        r.apply(&record(1, 3, &[1, 2], &[1, 2]), 5, 4);
        assert_eq!(
            r.ack(1, 5, 2),
            Ack::Deposed,
            "it followed another leader since"
        );
        assert_eq!(r.ack(3, 6, 2), Ack::Pending);
    }

    #[test]
    fn a_new_leader_answers_offsets_once_its_watermark_reaches_its_epoch_start() {
        // It followed with 10 records and knew 6 committed; the old leader had
        // answered up to 10.
        let mut r = Replica::new(1, 10, 6);
        r.apply(&record(2, 0, &[1, 2], &[1, 2]), 10, 0);
        assert_eq!(r.offsets_settled(), Err(Refusal::NotLeader));
        r.apply(&record(1, 1, &[1, 2], &[1, 2]), 10, 0);
        assert_eq!(
            r.offsets_settled(),
            Err(Refusal::WatermarkBehindEpochStart {
                high_watermark: 6,
                epoch_start: 10
            })
        );
        r.on_durable(10);
        assert_eq!(r.on_replica_fetch(2, 1, 8, 10, 1), Ok(true));
        assert!(r.offsets_settled().is_err(), "8 is still behind 10");
        assert_eq!(r.on_replica_fetch(2, 1, 10, 10, 2), Ok(true));
        assert_eq!(r.offsets_settled(), Ok(()));
    }

    /// An fsync that began before the log was cut back claims nothing: the offsets it
    /// covered may since hold other batches.
    #[test]
    fn a_cut_during_an_fsync_voids_it() {
        let mut r = Replica::new(1, 0, 0);
        r.apply(&record(2, 0, &[1, 2], &[1, 2]), 0, 0);
        assert_eq!(r.may_copy(0), Ok(()));
        assert_eq!(r.may_copy(1), Err(Refusal::NotLeader));
        r.copied(0, 0, 10, Some(4));
        assert_eq!(r.high_watermark(), 4);
        let ticket = r.begin_flush(10).expect("not durable yet");
        // A new leader's epoch, the divergent suffix cut, other batches copied.
        r.apply(&record(3, 1, &[1, 2, 3], &[1, 3]), 10, 0);
        r.copied(10, 0, 6, None);
        r.copied(6, 0, 10, Some(9));
        assert_eq!(r.complete_flush(ticket), Flushed::Again);
        assert_eq!(r.flushed(), 0, "nothing was durable before");
        let ticket = r.begin_flush(10).expect("again");
        assert_eq!(
            r.complete_flush(ticket),
            Flushed::Durable {
                watermark_rose: false
            }
        );
        assert_eq!(r.flushed(), 10);
        assert_eq!(r.begin_flush(10), None);
    }
}
