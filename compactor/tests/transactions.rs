//! Compaction of transactional records: in a local log cleaned below its last stable
//! offset, an aborted record goes and never shadows the committed value of its key;
//! markers stay. In an archive (`Txns::Unknown`, markers maybe not archived yet),
//! transactional records all stay and shadow nothing.

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};
use strata_compactor::compaction::Txns;
use strata_compactor::{CompactionPolicy, compact};
use strata_log::batch::{encode_records, plain_record};
use strata_log::txn::{ControlRecord, Marker};
use strata_log::{LogConfig, PartitionLog};

fn record(key: &str, value: &str) -> Record {
    plain_record(
        0,
        1_000,
        Some(Bytes::from(key.to_string())),
        Some(Bytes::from(value.to_string())),
    )
}

fn transactional(pid: i64, seq: i32, key: &str, value: &str) -> Vec<u8> {
    let r = Record {
        transactional: true,
        producer_id: pid,
        producer_epoch: 0,
        sequence: seq,
        ..record(key, value)
    };
    encode_records(&[r], Compression::None)
}

/// Values in the log, in offset order, with whether each came in a control batch.
fn values(log: &PartitionLog) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let mut bytes = Bytes::from(log.read(at, 1 << 20).expect("read"));
        if bytes.is_empty() {
            break;
        }
        for set in RecordBatchDecoder::decode_all(&mut bytes).expect("decode") {
            for r in set.records {
                if r.offset >= at {
                    let v = if r.control {
                        "<marker>".to_string()
                    } else {
                        String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
                    };
                    out.push((r.offset, v));
                }
                at = at.max(r.offset + 1);
            }
        }
    }
    out
}

/// k=committed (plain), k=aborted (transaction of producer 7, aborted), k=kept
/// (transaction of producer 8, committed), then filler so those segments seal.
fn history(dir: &std::path::Path) -> PartitionLog {
    let config = LogConfig {
        segment_bytes: 256,
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(dir, config, 0).expect("open");
    let abort = ControlRecord {
        marker: Marker::Abort,
        coordinator_epoch: 0,
    };
    let commit = ControlRecord {
        marker: Marker::Commit,
        ..abort
    };
    log.append(
        &encode_records(&[record("k", "committed")], Compression::None),
        0,
    )
    .expect("plain");
    log.append(&transactional(7, 0, "k", "aborted"), 0)
        .expect("aborted write");
    log.append_marker(7, 0, abort, 0).expect("abort");
    log.append(&transactional(8, 0, "j", "kept"), 0)
        .expect("committed write");
    log.append_marker(8, 0, commit, 0).expect("commit");
    for i in 0..12 {
        log.append(
            &encode_records(&[record(&format!("filler-{i}"), "f")], Compression::None),
            0,
        )
        .expect("filler");
    }
    log.flush().expect("seal");
    log
}

fn policy() -> CompactionPolicy {
    CompactionPolicy {
        min_cleanable_dirty_ratio: 0.0,
        min_compaction_lag_ms: 0,
        max_compaction_lag_ms: i64::MAX,
        delete_retention_ms: 0,
    }
}

fn pass(log: &mut PartitionLog, dir: &std::path::Path, txns: Txns<'_>) {
    let end = log.log_end_offset();
    let lso = log.last_stable_offset(end);
    let segments: Vec<_> = log
        .closed_segments()
        .into_iter()
        .filter(|s| s.next_offset <= lso)
        .collect();
    compact(dir, &segments, policy(), 1 << 20, 10_000, txns, |rw| {
        log.swap_compacted(rw, 10_000)
    })
    .expect("pass");
}

#[test]
fn an_aborted_record_goes_and_leaves_the_committed_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = history(dir.path());
    let txns = log.producers().transactions().clone();
    let aborted = |pid: i64, offset: i64| txns.is_aborted(pid, offset);
    pass(&mut log, dir.path(), Txns::Known(&aborted));
    let got = values(&log);
    let first: Vec<_> = got.iter().take(4).cloned().collect();
    assert_eq!(
        first,
        [
            (0, "committed".to_string()),
            (2, "<marker>".to_string()),
            (3, "kept".to_string()),
            (4, "<marker>".to_string()),
        ],
        "the aborted record at 1 is gone; the committed value, the markers and the committed transaction stay"
    );
    assert_eq!(
        log.aborted_between(0, 5).len(),
        1,
        "the aborted index stays"
    );
}

#[test]
fn an_archive_keeps_transactional_records_and_lets_none_shadow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = history(dir.path());
    pass(&mut log, dir.path(), Txns::Unknown);
    let first: Vec<_> = values(&log).into_iter().take(5).collect();
    assert_eq!(
        first.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4],
        "nothing of the transactions goes, and the aborted value shadows nothing: {first:?}"
    );
}
