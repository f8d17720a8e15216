//! A partition's transactions through the log: transactional appends open them, markers
//! end them, and the last stable offset and the aborted index come back the same after
//! a restart, on a follower that copied the batches, and after a truncation.

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record};
use strata_log::batch::{encode_records, plain_record};
use strata_log::txn::{AbortedTxn, ControlRecord, Marker};
use strata_log::{LogConfig, PartitionLog};

/// `n` records of a transactional producer, its sequences from `seq`.
fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: true,
            producer_id: pid,
            producer_epoch: epoch,
            sequence: seq + i as i32,
            ..plain_record(i as i64, 1_000, None, Some(Bytes::from_static(b"v")))
        })
        .collect();
    encode_records(&records, Compression::None)
}

fn marker(marker: Marker) -> ControlRecord {
    ControlRecord {
        marker,
        coordinator_epoch: 1,
    }
}

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 512,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

/// Producer 1 aborts, producer 2 commits, producer 3 stays open.
fn history(log: &mut PartitionLog) -> (i64, i64) {
    log.append(&txn_batch(1, 0, 0, 3), 0).expect("p1"); // 0..3
    log.append(&txn_batch(2, 0, 0, 2), 0).expect("p2"); // 3..5
    log.append(&txn_batch(1, 0, 3, 2), 0).expect("p1 again"); // 5..7
    let abort = log
        .append_marker(1, 0, marker(Marker::Abort), 0)
        .expect("abort"); // 7
    log.append(&txn_batch(3, 0, 0, 1), 0).expect("p3"); // 8
    let commit = log
        .append_marker(2, 0, marker(Marker::Commit), 0)
        .expect("commit"); // 9
    (abort, commit)
}

#[test]
fn markers_end_transactions_and_the_stable_offset_follows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("open");
    let (abort, commit) = history(&mut log);
    assert_eq!((abort, commit), (7, 9));
    let end = log.log_end_offset();
    assert_eq!(end, 10);
    assert_eq!(
        log.last_stable_offset(8),
        3,
        "the commit at 9 is not covered"
    );
    assert_eq!(log.last_stable_offset(end), 8, "producer 3 is open at 8");
    let aborted = log.aborted_between(0, end);
    assert_eq!(
        aborted,
        vec![AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 7,
            last_stable_offset: 3,
        }]
    );
    // A marker from an older epoch, or an older coordinator, is refused.
    log.append_marker(2, 1, marker(Marker::Commit), 0)
        .expect("epoch 1 ends nothing, and is allowed");
    assert!(matches!(
        log.append_marker(2, 0, marker(Marker::Commit), 0),
        Err(strata_log::Error::InvalidProducerEpoch { .. })
    ));
    assert!(matches!(
        log.append_marker(
            2,
            1,
            ControlRecord {
                marker: Marker::Commit,
                coordinator_epoch: 0
            },
            0
        ),
        Err(strata_log::Error::CoordinatorFenced { .. })
    ));
    // After the epoch-1 marker, an epoch-0 batch is fenced.
    assert!(matches!(
        log.append(&txn_batch(2, 0, 2, 1), 0),
        Err(strata_log::Error::InvalidProducerEpoch { .. })
    ));
}

#[test]
fn transactions_survive_restart_replication_and_truncation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("open");
    history(&mut log);
    let end = log.log_end_offset();
    let lso = log.last_stable_offset(end);
    let aborted = log.aborted_between(0, end);

    // A follower copying the batches as they are.
    let follower_dir = tempfile::tempdir().expect("tempdir");
    let (mut follower, _) = PartitionLog::open(follower_dir.path(), small(), 0).expect("open");
    let mut offset = 0;
    while offset < end {
        let bytes = log.read(offset, 1 << 20).expect("read");
        offset = follower.append_replicated(&bytes, 0).expect("copy");
    }
    assert_eq!(follower.last_stable_offset(end), lso);
    assert_eq!(follower.aborted_between(0, end), aborted);

    // A restart, with and without a snapshot.
    drop(log);
    let (mut reopened, _) = PartitionLog::open(dir.path(), small(), 0).expect("reopen");
    assert_eq!(reopened.last_stable_offset(end), lso);
    assert_eq!(reopened.aborted_between(0, end), aborted);
    reopened.snapshot_producers().expect("snapshot");
    drop(reopened);
    let (mut reopened, _) = PartitionLog::open(dir.path(), small(), 0).expect("reopen");
    assert_eq!(reopened.last_stable_offset(end), lso);
    assert_eq!(reopened.aborted_between(0, end), aborted);

    // Cut back below the abort marker: producer 1's transaction is open again.
    reopened.truncate_to(7, 0).expect("truncate");
    assert_eq!(reopened.last_stable_offset(7), 0);
    assert!(reopened.aborted_between(0, 7).is_empty());
}
