//! A follower's copying cycle in one leader epoch (KIP-101/279): truncate, then fetch,
//! and on any failure truncate anew.
//!
//! Before it copies anything in an epoch the follower asks the leader where the
//! leader's copy of the follower's newest epoch ends (OffsetForLeaderEpoch) and cuts its
//! log to [`divergence`]; while the leader answers with an epoch the follower lacks it
//! asks again, each round cutting at least one epoch off. Then it fetches from its log
//! end, which tells the leader how far its copy reaches, and appends what comes back,
//! taking the leader's watermark. A fetch below the leader's log start (retention moved
//! it) starts the log over there. Any refusal, lost request or broken connection sends
//! the cycle back to the question: asking again is always safe, and it is what catches
//! a log that diverged while the follower was not looking.
//!
//! Events in: [`Follower::next_request`], [`Follower::on_epoch_answer`],
//! [`Follower::on_fetch_answer`], [`Follower::restart`]; out: the [`Request`] to send
//! and what to do to the log ([`Truncation`], [`Step`]). The agent's fetcher task and
//! the seeded schedules drive the same cycle.

use strata_log::epochs::{Cut, EpochHistory, divergence};

/// The request a follower sends next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// OffsetForLeaderEpoch for the follower's newest epoch.
    EpochQuery { latest: i32 },
    /// Fetch from the follower's log end.
    Fetch { offset: i64 },
}

/// The leader's answer to a fetch, as far as the cycle cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchAnswer {
    /// Batches from the fetch offset on (perhaps none), and the leader's watermark.
    Batches { high_watermark: i64 },
    /// The fetch offset is out of the leader's range, whose log starts at `log_start`.
    OutOfRange { log_start: i64 },
    /// Any other refusal (another epoch, not the leader, an error).
    Refused,
}

/// What to do with a fetch answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Append the batches and take the leader's watermark.
    Append { high_watermark: i64 },
    /// The leader no longer has what the follower would copy next: empty the log and
    /// start it again at the leader's log start (Kafka's `truncateFullyAndStartAt`).
    ResetTo(i64),
    /// Back off, then ask the leader again from the start of the cycle.
    Retry,
}

/// Where to cut after an epoch answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// Cut the log back to end here (nothing to do if it already ends there).
    pub to: i64,
    /// Whether the log is now known to be a prefix of the leader's; if not, the next
    /// request asks again.
    pub done: bool,
}

/// One follower's cycle in one epoch of one leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follower {
    pub leader: i32,
    pub epoch: i32,
    truncated: bool,
}

impl Follower {
    pub fn new(leader: i32, epoch: i32) -> Follower {
        Follower {
            leader,
            epoch,
            truncated: false,
        }
    }

    /// Whether the log is known to be a prefix of the leader's (fetching, not asking).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// What to send, for a log ending at `log_end` whose newest epoch is `latest`: the
    /// epoch question until the log is cut to the leader's (an empty log has nothing
    /// to cut), fetches after.
    pub fn next_request(&mut self, latest: Option<i32>, log_end: i64) -> Request {
        match latest {
            Some(latest) if !self.truncated => Request::EpochQuery { latest },
            _ => {
                self.truncated = true;
                Request::Fetch { offset: log_end }
            }
        }
    }

    /// The leader's answer about the follower's newest epoch (`None`: it has no epoch at
    /// or below it), for a log `log_start..log_end` with `history`.
    pub fn on_epoch_answer(
        &mut self,
        history: &EpochHistory,
        log_start: i64,
        log_end: i64,
        answer: Option<(i32, i64)>,
    ) -> Truncation {
        let (to, done) = match divergence(history, log_start, log_end, answer) {
            Cut::Done(at) => (at, true),
            Cut::Again(at) => (at, false),
        };
        self.truncated = done;
        Truncation { to, done }
    }

    /// What to do with the leader's answer to a fetch from `log_end`.
    pub fn on_fetch_answer(&mut self, answer: FetchAnswer, log_end: i64) -> Step {
        match answer {
            FetchAnswer::Batches { high_watermark } => Step::Append { high_watermark },
            FetchAnswer::OutOfRange { log_start } if log_end < log_start => {
                Step::ResetTo(log_start)
            }
            FetchAnswer::OutOfRange { .. } | FetchAnswer::Refused => {
                self.restart();
                Step::Retry
            }
        }
    }

    /// A request was refused or lost, or the connection broke: ask again.
    pub fn restart(&mut self) {
        self.truncated = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(entries: &[(i32, i64)]) -> EpochHistory {
        let mut h = EpochHistory::default();
        for &(epoch, start) in entries {
            h.note(epoch, start);
        }
        h
    }

    #[test]
    fn an_empty_log_fetches_at_once() {
        let mut f = Follower::new(2, 5);
        assert_eq!(f.next_request(None, 0), Request::Fetch { offset: 0 });
        assert!(f.truncated());
    }

    /// The leader has epoch 3 up to 12 only: the follower's suffix of epoch 3 beyond
    /// that goes, and it fetches from 12.
    #[test]
    fn a_divergent_suffix_is_cut_before_fetching() {
        let h = history(&[(1, 0), (3, 10)]);
        let mut f = Follower::new(2, 5);
        assert_eq!(
            f.next_request(h.latest(), 20),
            Request::EpochQuery { latest: 3 }
        );
        let cut = f.on_epoch_answer(&h, 0, 20, Some((3, 12)));
        assert_eq!(cut, Truncation { to: 12, done: true });
        assert_eq!(
            f.next_request(h.latest(), 12),
            Request::Fetch { offset: 12 }
        );
    }

    /// The leader answers an epoch the follower lacks (2): cut to where it ends or to
    /// the follower's next epoch, and ask again (KIP-279).
    #[test]
    fn an_answer_with_an_unknown_epoch_asks_again() {
        let h = history(&[(1, 0), (3, 10)]);
        let mut f = Follower::new(2, 5);
        f.next_request(h.latest(), 20);
        let cut = f.on_epoch_answer(&h, 0, 20, Some((2, 15)));
        assert!(!cut.done);
        assert!(cut.to <= 15);
        assert!(matches!(
            f.next_request(h.latest(), cut.to),
            Request::EpochQuery { .. }
        ));
    }

    #[test]
    fn refusals_restart_the_cycle_and_retention_starts_the_log_over() {
        let h = history(&[(1, 0)]);
        let mut f = Follower::new(2, 5);
        f.next_request(h.latest(), 20);
        f.on_epoch_answer(&h, 0, 20, Some((1, 30)));
        assert_eq!(
            f.on_fetch_answer(FetchAnswer::Batches { high_watermark: 18 }, 20),
            Step::Append { high_watermark: 18 }
        );
        assert_eq!(
            f.on_fetch_answer(FetchAnswer::OutOfRange { log_start: 50 }, 20),
            Step::ResetTo(50)
        );
        assert!(f.truncated());
        assert_eq!(
            f.on_fetch_answer(FetchAnswer::OutOfRange { log_start: 0 }, 20),
            Step::Retry
        );
        assert!(!f.truncated());
        f.next_request(h.latest(), 20);
        f.on_epoch_answer(&h, 0, 20, Some((1, 30)));
        assert_eq!(f.on_fetch_answer(FetchAnswer::Refused, 20), Step::Retry);
        assert_eq!(
            f.next_request(h.latest(), 20),
            Request::EpochQuery { latest: 1 }
        );
    }
}
