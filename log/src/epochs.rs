//! The leader-epoch history of a log: at which offset each leader epoch began.
//!
//! Every batch carries the epoch of the leader that appended it, so the history is the
//! list of `(epoch, start offset)` where the epoch in the batch headers rises. A
//! follower that starts copying from a new leader compares its history with the
//! leader's (Kafka's OffsetForLeaderEpoch, KIP-101 and KIP-279) and cuts off whatever
//! suffix the leader does not have before it copies anything.
//!
//! Pure data: no I/O, so the replication state machines and their seeded tests use the
//! same code as the log.

/// `(epoch, start offset)` pairs, rising in both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochHistory {
    entries: Vec<(i32, i64)>,
}

impl EpochHistory {
    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    /// Records that a batch of `epoch` starts at `base_offset`. A batch of an epoch
    /// older than the latest one (which a log never holds after its newer epoch) is
    /// ignored rather than allowed to make the history fall.
    pub fn note(&mut self, epoch: i32, base_offset: i64) {
        match self.entries.last() {
            Some(&(latest, _)) if epoch <= latest => {}
            _ => self.entries.push((epoch, base_offset)),
        }
    }

    /// The newest epoch in the log.
    pub fn latest(&self) -> Option<i32> {
        self.entries.last().map(|&(e, _)| e)
    }

    /// OffsetForLeaderEpoch: the largest epoch at or below `epoch` that this log has, and
    /// the offset where it ends (where the next epoch starts, or `log_end` for the
    /// newest). `None` when every epoch in the log is newer than `epoch`, or the log is
    /// empty.
    pub fn end_offset_for(&self, epoch: i32, log_end: i64) -> Option<(i32, i64)> {
        let i = self.entries.partition_point(|&(e, _)| e <= epoch);
        if i == 0 {
            return None;
        }
        let found = self.entries[i - 1].0;
        let end = self.entries.get(i).map_or(log_end, |&(_, start)| start);
        Some((found, end))
    }

    /// Forgets epochs that start at or above `offset` (the log was cut back to it).
    pub fn truncate_to(&mut self, offset: i64) {
        self.entries.retain(|&(_, start)| start < offset);
    }
}

/// Where a follower cuts its log, from one OffsetForLeaderEpoch answer (KIP-279).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Cut the log to end here; from there on it matches the leader's.
    Done(i64),
    /// Cut the log to end here (everything after is known to differ), then ask again for
    /// the newest epoch left: the leader answered an epoch this log does not have, so
    /// where the logs part is not known yet.
    Again(i64),
}

/// Where a follower must cut its log before copying from a leader (KIP-279).
///
/// `leader_answer` is the leader's [`EpochHistory::end_offset_for`] for this log's
/// newest epoch. A [`Cut::Again`] always cuts something, so asking until the answer is
/// [`Cut::Done`] ends.
pub fn divergence(
    local: &EpochHistory,
    local_start: i64,
    local_end: i64,
    leader_answer: Option<(i32, i64)>,
) -> Cut {
    let Some(latest) = local.latest() else {
        // Nothing here carries an epoch: an empty log.
        return Cut::Done(local_end);
    };
    let Some((leader_epoch, leader_end)) = leader_answer else {
        // The leader has no epoch this old: nothing here is known to match it.
        return Cut::Done(local_start);
    };
    if leader_epoch == latest {
        return Cut::Done(leader_end.min(local_end));
    }
    // The leader never saw our newest epoch; its newest epoch at or below ours is
    // `leader_epoch`, so every record here of a later epoch differs from its log.
    match local.end_offset_for(leader_epoch, local_end) {
        // Both have `leader_epoch`, copied from its one leader: they agree up to the
        // shorter of the two.
        Some((found, local_epoch_end)) if found == leader_epoch => {
            Cut::Done(leader_end.min(local_epoch_end).max(local_start))
        }
        // We lack `leader_epoch` itself: cut what follows our older epoch `found`, then
        // ask about `found`.
        Some((_, local_epoch_end)) => Cut::Again(local_epoch_end.max(local_start)),
        None => Cut::Done(local_start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(entries: &[(i32, i64)]) -> EpochHistory {
        let mut h = EpochHistory::default();
        for &(e, o) in entries {
            h.note(e, o);
        }
        h
    }

    #[test]
    fn end_offsets_follow_kafka() {
        let h = history(&[(0, 0), (2, 10), (5, 30)]);
        assert_eq!(h.end_offset_for(0, 40), Some((0, 10)));
        assert_eq!(h.end_offset_for(1, 40), Some((0, 10)));
        assert_eq!(h.end_offset_for(2, 40), Some((2, 30)));
        assert_eq!(h.end_offset_for(4, 40), Some((2, 30)));
        assert_eq!(h.end_offset_for(5, 40), Some((5, 40)));
        assert_eq!(h.end_offset_for(9, 40), Some((5, 40)));
        assert_eq!(history(&[(3, 0)]).end_offset_for(2, 5), None);
        assert_eq!(EpochHistory::default().end_offset_for(0, 0), None);
    }

    #[test]
    fn older_epochs_never_lower_the_history() {
        let h = history(&[(1, 0), (0, 5), (1, 7), (3, 9)]);
        assert_eq!(h.entries(), &[(1, 0), (3, 9)]);
    }

    #[test]
    fn truncation_drops_epochs_that_start_at_or_after_the_cut() {
        let mut h = history(&[(0, 0), (2, 10), (5, 30)]);
        h.truncate_to(30);
        assert_eq!(h.entries(), &[(0, 0), (2, 10)]);
        h.truncate_to(5);
        assert_eq!(h.entries(), &[(0, 0)]);
    }

    #[test]
    fn a_follower_cuts_what_the_leader_does_not_have() {
        use Cut::Done;
        // Same newest epoch: keep up to the shorter of the two.
        let local = history(&[(0, 0), (1, 10)]);
        assert_eq!(divergence(&local, 0, 20, Some((1, 15))), Done(15));
        assert_eq!(divergence(&local, 0, 20, Some((1, 25))), Done(20));
        // The old leader of epoch 1 wrote 10..20 that the new leader (epoch 2) never got:
        // the leader's epoch 1 ended at 14.
        assert_eq!(divergence(&local, 0, 20, Some((1, 14))), Done(14));
        // Our newest epoch 3 never reached the leader, whose epoch 1 ended at 12.
        let local = history(&[(0, 0), (1, 10), (3, 16)]);
        assert_eq!(divergence(&local, 0, 20, Some((1, 12))), Done(12));
        // ... or ended after our own epoch 1 did.
        assert_eq!(divergence(&local, 0, 20, Some((1, 18))), Done(16));
        // The leader knows no epoch this old.
        assert_eq!(divergence(&local, 4, 20, None), Done(4));
        // An empty log has nothing to cut.
        assert_eq!(
            divergence(&EpochHistory::default(), 7, 7, Some((2, 3))),
            Done(7)
        );
    }

    /// The schedule tests' seed 68521: we have epochs 1 and 3, the leader 1 and 2. Asked
    /// about 3 it answers epoch 2, which we lack: the cut after our epoch 1 is only a
    /// first step; asked about 1 it says where its epoch 1 really ended.
    #[test]
    fn an_epoch_we_lack_takes_a_second_question() {
        let mut local = history(&[(0, 0), (1, 33), (3, 42)]);
        let leader = history(&[(0, 0), (1, 33), (2, 38)]);
        let mut end = 45;
        let mut rounds = 0;
        let cut = loop {
            rounds += 1;
            let asked = local.latest().expect("an epoch");
            match divergence(&local, 0, end, leader.end_offset_for(asked, 40)) {
                Cut::Done(at) => break at,
                Cut::Again(at) => {
                    assert!(at < end, "every round cuts");
                    local.truncate_to(at);
                    end = at;
                }
            }
        };
        assert_eq!((cut, rounds), (38, 2));
    }
}
