//! The transaction coordinator's rules, as pure functions from the record in the
//! metastore (if any) to the change to make and the answer to give. Each runs inside
//! one metastore transaction ([`strata_metastore::Metastore::change_transaction`]), so
//! the record it sees is the current one.
//!
//! States and moves are Kafka's (`TransactionState`): Empty → Ongoing (a partition or
//! group is added) → PrepareCommit / PrepareAbort (EndTxn, a timeout, or a newer
//! producer fencing this one) → CompleteCommit / CompleteAbort (every marker written).
//! With transactions v2 (KIP-890) EndTxn bumps the producer epoch, so each transaction
//! has an epoch of its own, and a retried EndTxn from the epoch just ended is answered
//! with the outcome it had.

use std::collections::BTreeSet;

use strata_metastore::{Change, Settle, TopicPartition, TxnRecord, TxnState};

pub use crate::error::TxnError;

fn invalid(record: &TxnRecord, why: &str) -> TxnError {
    TxnError::InvalidTxnState(record.state.name(), why.to_string())
}

/// The next epoch of a producer, or a fresh producer id when the epoch would run out
/// (the caller reserved `fresh_id` beforehand).
fn bumped(record: &TxnRecord, fresh_id: i64) -> (i64, i16) {
    if record.producer_epoch >= i16::MAX - 1 {
        (fresh_id, 0)
    } else {
        (record.producer_id, record.producer_epoch + 1)
    }
}

fn with_epoch(record: &TxnRecord, (producer_id, producer_epoch): (i64, i16)) -> TxnRecord {
    TxnRecord {
        last_producer_id: record.producer_id,
        last_producer_epoch: record.producer_epoch,
        producer_id,
        producer_epoch,
        ..record.clone()
    }
}

/// Checks that a request's producer id and epoch are the record's.
fn check_producer(
    record: &TxnRecord,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(), TxnError> {
    if producer_id != record.producer_id {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    if producer_epoch != record.producer_epoch {
        return Err(TxnError::ProducerFenced);
    }
    Ok(())
}

/// What InitProducerId asks.
#[derive(Debug, Clone, Copy)]
pub struct Init {
    pub timeout_ms: i64,
    /// KIP-360: the producer id and epoch the client already has (-1 if none).
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// An id reserved in case one is needed (a new transactional id, or an epoch that
    /// would run out).
    pub fresh_id: i64,
    pub now_ms: i64,
}

/// InitProducerId: a new producer id, or the next epoch of the one there (which fences
/// every older producer of the id). An open transaction is aborted first, under a
/// bumped epoch: the answer is then CONCURRENT_TRANSACTIONS, and the client retries.
pub fn init(current: Option<&TxnRecord>, req: Init) -> Change<Result<(i64, i16), TxnError>> {
    let Some(record) = current else {
        let record = TxnRecord {
            producer_id: req.fresh_id,
            producer_epoch: 0,
            last_producer_id: -1,
            last_producer_epoch: -1,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            timeout_ms: req.timeout_ms,
            start_ms: -1,
            last_update_ms: req.now_ms,
            coordinator_epoch: 0,
            version: 1,
        };
        return Change::write(record, Ok((req.fresh_id, 0)));
    };
    if req.producer_id >= 0 {
        let current = (record.producer_id, record.producer_epoch);
        let last = (record.last_producer_id, record.last_producer_epoch);
        let asked = (req.producer_id, req.producer_epoch);
        if asked != current && asked != last {
            return Change::answer(Err(
                if req.producer_id != record.producer_id
                    && req.producer_id != record.last_producer_id
                {
                    TxnError::InvalidProducerIdMapping
                } else {
                    TxnError::ProducerFenced
                },
            ));
        }
    }
    match record.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
            Change::answer(Err(TxnError::ConcurrentTransactions))
        }
        TxnState::Ongoing => Change {
            record: Some(TxnRecord {
                state: TxnState::PrepareAbort,
                coordinator_epoch: record.coordinator_epoch + 1,
                last_update_ms: req.now_ms,
                ..with_epoch(record, bumped(record, req.fresh_id))
            }),
            settle: Settle::DropOffsets,
            answer: Err(TxnError::ConcurrentTransactions),
        },
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Dead => {
            let next = bumped(record, req.fresh_id);
            Change::write(
                TxnRecord {
                    state: TxnState::Empty,
                    partitions: BTreeSet::new(),
                    groups: BTreeSet::new(),
                    timeout_ms: req.timeout_ms,
                    start_ms: -1,
                    last_update_ms: req.now_ms,
                    ..with_epoch(record, next)
                },
                Ok(next),
            )
        }
    }
}

/// A transaction gains partitions or a group (AddPartitionsToTxn, AddOffsetsToTxn,
/// or a leader or group coordinator adding them for a KIP-890 v2 producer).
pub fn add(
    current: Option<&TxnRecord>,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[TopicPartition],
    group: Option<&str>,
    version: i16,
    now_ms: i64,
) -> Change<Result<(), TxnError>> {
    let Some(record) = current else {
        return Change::answer(Err(TxnError::InvalidProducerIdMapping));
    };
    if let Err(e) = check_producer(record, producer_id, producer_epoch) {
        return Change::answer(Err(e));
    }
    if record.state.is_prepared() {
        return Change::answer(Err(TxnError::ConcurrentTransactions));
    }
    if record.state == TxnState::Dead {
        return Change::answer(Err(invalid(record, "the transactional id has expired")));
    }
    let ongoing = record.state == TxnState::Ongoing;
    let known = partitions.iter().all(|p| record.partitions.contains(p))
        && group.is_none_or(|g| record.groups.contains(g));
    if ongoing && known {
        return Change::answer(Ok(()));
    }
    let mut next = record.clone();
    if !ongoing {
        next.partitions.clear();
        next.groups.clear();
        next.start_ms = now_ms;
        next.state = TxnState::Ongoing;
        next.version = version;
    }
    next.partitions.extend(partitions.iter().cloned());
    if let Some(g) = group {
        next.groups.insert(g.to_string());
    }
    next.last_update_ms = now_ms;
    Change::write(next, Ok(()))
}

/// KIP-890's verification: whether `partition` is in the producer's ongoing
/// transaction. Changes nothing.
pub fn verify(
    current: Option<&TxnRecord>,
    producer_id: i64,
    producer_epoch: i16,
    partition: &TopicPartition,
) -> Result<(), TxnError> {
    let record = current.ok_or(TxnError::InvalidProducerIdMapping)?;
    check_producer(record, producer_id, producer_epoch)?;
    if record.state != TxnState::Ongoing || !record.partitions.contains(partition) {
        return Err(invalid(
            record,
            "the partition was not added to the transaction",
        ));
    }
    Ok(())
}

/// What an EndTxn decided: the producer id and epoch to answer (bumped for v2), and
/// whether markers must now be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub markers: bool,
}

/// EndTxn: the decision to commit or abort, recorded with the pending offsets settled
/// (committed or dropped) in the same metastore transaction. `v2`: the producer speaks
/// transactions v2 (EndTxn v5+), and the epoch is bumped.
pub fn end(
    current: Option<&TxnRecord>,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    v2: bool,
    fresh_id: i64,
    now_ms: i64,
) -> Change<Result<Ended, TxnError>> {
    let Some(record) = current else {
        return Change::answer(Err(TxnError::InvalidProducerIdMapping));
    };
    let (prepared, complete) = if commit {
        (TxnState::PrepareCommit, TxnState::CompleteCommit)
    } else {
        (TxnState::PrepareAbort, TxnState::CompleteAbort)
    };
    // A v2 retry of the EndTxn that bumped the epoch: answer what it decided.
    let retry_of_bump = v2
        && producer_id == record.last_producer_id
        && producer_epoch == record.last_producer_epoch
        && (record.state == prepared || record.state == complete);
    if retry_of_bump {
        return Change::answer(Ok(Ended {
            producer_id: record.producer_id,
            producer_epoch: record.producer_epoch,
            markers: false,
        }));
    }
    // The epoch just ended with the other outcome (the coordinator aborted it on a
    // timeout, say): this producer's transaction is over, not fenced by another.
    let ended_otherwise = v2
        && producer_id == record.last_producer_id
        && producer_epoch == record.last_producer_epoch
        && (record.state.is_prepared()
            || matches!(
                record.state,
                TxnState::CompleteCommit | TxnState::CompleteAbort
            ));
    if ended_otherwise {
        return Change::answer(Err(invalid(
            record,
            "the transaction already ended with the other outcome",
        )));
    }
    if let Err(e) = check_producer(record, producer_id, producer_epoch) {
        return Change::answer(Err(e));
    }
    let same = Ended {
        producer_id: record.producer_id,
        producer_epoch: record.producer_epoch,
        markers: false,
    };
    match record.state {
        TxnState::Ongoing => {
            let next = if v2 {
                with_epoch(record, bumped(record, fresh_id))
            } else {
                record.clone()
            };
            let ended = Ended {
                producer_id: next.producer_id,
                producer_epoch: next.producer_epoch,
                markers: true,
            };
            Change {
                record: Some(TxnRecord {
                    state: prepared,
                    coordinator_epoch: record.coordinator_epoch + 1,
                    last_update_ms: now_ms,
                    ..next
                }),
                settle: if commit {
                    Settle::CommitOffsets
                } else {
                    Settle::DropOffsets
                },
                answer: Ok(ended),
            }
        }
        // A v1 retry of the same decision.
        s if s == prepared || s == complete => Change::answer(Ok(same)),
        // v2 producers may end a transaction that wrote nothing: the epoch moves on.
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort if v2 => {
            let next = with_epoch(record, bumped(record, fresh_id));
            let ended = Ended {
                producer_id: next.producer_id,
                producer_epoch: next.producer_epoch,
                markers: false,
            };
            Change::write(
                TxnRecord {
                    state: complete,
                    partitions: BTreeSet::new(),
                    groups: BTreeSet::new(),
                    last_update_ms: now_ms,
                    ..next
                },
                Ok(ended),
            )
        }
        TxnState::PrepareEpochFence => Change::answer(Err(TxnError::ProducerFenced)),
        _ => Change::answer(Err(invalid(
            record,
            if commit {
                "there is no transaction to commit"
            } else {
                "there is no transaction to abort"
            },
        ))),
    }
}

/// A transaction open past its timeout is aborted, under a bumped epoch so that its
/// producer is fenced. `None` if it is not due.
pub fn expire(current: Option<&TxnRecord>, fresh_id: i64, now_ms: i64) -> Change<bool> {
    match current {
        Some(record)
            if record.state == TxnState::Ongoing
                && record.start_ms + record.timeout_ms < now_ms =>
        {
            Change {
                record: Some(TxnRecord {
                    state: TxnState::PrepareAbort,
                    coordinator_epoch: record.coordinator_epoch + 1,
                    last_update_ms: now_ms,
                    ..with_epoch(record, bumped(record, fresh_id))
                }),
                settle: Settle::DropOffsets,
                answer: true,
            }
        }
        _ => Change::answer(false),
    }
}

/// A coordinator takes over writing the markers of a prepared transaction: the
/// coordinator epoch moves, so partitions refuse the previous writer's late markers.
/// Answers the record to write markers for.
pub fn take_over(current: Option<&TxnRecord>, now_ms: i64) -> Change<Option<TxnRecord>> {
    match current {
        Some(record) if record.state.is_prepared() => {
            let next = TxnRecord {
                coordinator_epoch: record.coordinator_epoch + 1,
                last_update_ms: now_ms,
                ..record.clone()
            };
            Change::write(next.clone(), Some(next))
        }
        _ => Change::answer(None),
    }
}

/// Every marker of `written` is in: the transaction is complete. Nothing changes if
/// another coordinator took the record over meanwhile.
pub fn complete(current: Option<&TxnRecord>, written: &TxnRecord, now_ms: i64) -> Change<bool> {
    match current {
        Some(record)
            if record.state.is_prepared()
                && record.coordinator_epoch == written.coordinator_epoch
                && record.producer_id == written.producer_id
                && record.producer_epoch == written.producer_epoch =>
        {
            let state = if record.state == TxnState::PrepareCommit {
                TxnState::CompleteCommit
            } else {
                TxnState::CompleteAbort
            };
            // As Kafka's, a complete transaction names no partitions any more.
            Change::write(
                TxnRecord {
                    state,
                    partitions: BTreeSet::new(),
                    groups: BTreeSet::new(),
                    last_update_ms: now_ms,
                    ..record.clone()
                },
                true,
            )
        }
        _ => Change::answer(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("t".to_string(), p)
    }

    fn apply<T>(
        record: &mut Option<TxnRecord>,
        f: impl FnOnce(Option<&TxnRecord>) -> Change<T>,
    ) -> T {
        let change = f(record.as_ref());
        if let Some(r) = change.record {
            *record = Some(r);
        }
        change.answer
    }

    fn init_req(now_ms: i64) -> Init {
        Init {
            timeout_ms: 1_000,
            producer_id: -1,
            producer_epoch: -1,
            fresh_id: 100,
            now_ms,
        }
    }

    #[test]
    fn a_transaction_runs_commits_and_completes() {
        let mut r = None;
        assert_eq!(apply(&mut r, |r| init(r, init_req(0))), Ok((100, 0)));
        assert_eq!(
            apply(&mut r, |r| add(r, 100, 0, &[tp(0)], None, 1, 5)),
            Ok(())
        );
        assert_eq!(verify(r.as_ref(), 100, 0, &tp(0)), Ok(()));
        assert!(verify(r.as_ref(), 100, 0, &tp(1)).is_err());
        let change = end(r.as_ref(), 100, 0, true, false, 101, 9);
        assert_eq!(change.settle, Settle::CommitOffsets);
        let ended = apply(&mut r, |_| change).expect("commit");
        assert!(ended.markers);
        let written = r.clone().expect("record");
        assert_eq!(written.state, TxnState::PrepareCommit);
        assert_eq!(
            apply(&mut r, |r| add(r, 100, 0, &[tp(1)], None, 1, 10)),
            Err(TxnError::ConcurrentTransactions)
        );
        assert_eq!(
            apply(&mut r, |r| end(r, 100, 0, true, false, 101, 10)),
            Ok(Ended {
                producer_id: 100,
                producer_epoch: 0,
                markers: false
            }),
            "a retry of the same decision"
        );
        assert!(apply(&mut r, |r| complete(r, &written, 11)));
        assert_eq!(r.as_ref().map(|r| r.state), Some(TxnState::CompleteCommit));
        assert!(matches!(
            apply(&mut r, |r| end(r, 100, 0, false, false, 101, 12)),
            Err(TxnError::InvalidTxnState(..))
        ));
    }

    #[test]
    fn init_fences_the_previous_producer_and_aborts_its_transaction() {
        let mut r = None;
        apply(&mut r, |r| init(r, init_req(0))).expect("init");
        apply(&mut r, |r| add(r, 100, 0, &[tp(0)], Some("g"), 1, 1)).expect("add");
        let change = init(r.as_ref(), init_req(2));
        assert_eq!(change.settle, Settle::DropOffsets);
        assert_eq!(
            apply(&mut r, |_| change),
            Err(TxnError::ConcurrentTransactions)
        );
        let record = r.clone().expect("record");
        assert_eq!(
            (record.state, record.producer_epoch),
            (TxnState::PrepareAbort, 1)
        );
        assert_eq!(
            apply(&mut r, |r| end(r, 100, 0, true, false, 101, 3)),
            Err(TxnError::ProducerFenced),
            "the old producer cannot commit"
        );
        assert!(apply(&mut r, |r| complete(r, &record, 4)));
        assert_eq!(apply(&mut r, |r| init(r, init_req(5))), Ok((100, 2)));
        assert_eq!(
            apply(&mut r, |r| add(r, 100, 1, &[tp(0)], None, 1, 6)),
            Err(TxnError::ProducerFenced)
        );
    }

    #[test]
    fn v2_bumps_the_epoch_per_transaction_and_answers_retries() {
        let mut r = None;
        apply(&mut r, |r| init(r, init_req(0))).expect("init");
        apply(&mut r, |r| add(r, 100, 0, &[tp(0)], None, 2, 1)).expect("add");
        let ended = apply(&mut r, |r| end(r, 100, 0, false, true, 101, 2)).expect("abort");
        assert_eq!((ended.producer_epoch, ended.markers), (1, true));
        assert_eq!(
            apply(&mut r, |r| end(r, 100, 0, false, true, 101, 3)),
            Ok(Ended {
                producer_id: 100,
                producer_epoch: 1,
                markers: false
            }),
            "the retry from the old epoch learns the new one"
        );
        let written = r.clone().expect("record");
        apply(&mut r, |r| complete(r, &written, 4));
        let empty = apply(&mut r, |r| end(r, 100, 1, true, true, 101, 5)).expect("empty");
        assert_eq!((empty.producer_epoch, empty.markers), (2, false));
    }

    #[test]
    fn timeouts_abort_and_exhausted_epochs_take_a_new_id() {
        let mut r = None;
        apply(&mut r, |r| init(r, init_req(0))).expect("init");
        apply(&mut r, |r| add(r, 100, 0, &[tp(0)], None, 1, 10)).expect("add");
        assert!(!apply(&mut r, |r| expire(r, 101, 1_010)));
        assert!(apply(&mut r, |r| expire(r, 101, 1_011)));
        let record = r.clone().expect("record");
        assert_eq!(
            (record.state, record.producer_epoch),
            (TxnState::PrepareAbort, 1)
        );
        let taken = apply(&mut r, |r| take_over(r, 1_012)).expect("prepared");
        assert!(
            !apply(&mut r, |r| complete(r, &record, 1_013)),
            "the deposed writer cannot complete"
        );
        assert!(apply(&mut r, |r| complete(r, &taken, 1_013)));
        let mut worn = r.clone().expect("record");
        worn.producer_epoch = i16::MAX - 1;
        let mut r = Some(worn);
        let req = Init {
            fresh_id: 555,
            ..init_req(2_000)
        };
        assert_eq!(apply(&mut r, |r| init(r, req)), Ok((555, 0)));
    }
}
