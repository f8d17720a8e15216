//! Log compaction against a model: random histories of keys, values and tombstones, in
//! batches of one to four records and every codec, appended to a real log with small
//! segments, compacted in passes with a key map that may be too small for one pass,
//! then read back. Checked: offsets and contents never change; below what the passes
//! cleaned, a key's record stays only if it is the newest below there; tombstones stay
//! until their horizon, and go after it; the active segment is untouched; the log
//! reopens to the same records.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};
use proptest::prelude::*;
use strata_compactor::compaction::Txns;
use strata_compactor::{CompactionPolicy, compact};
use strata_log::batch::{encode_records, plain_record};
use strata_log::{LogConfig, PartitionLog};

/// `(key, value)`; `None` is a tombstone.
type Op = (u8, Option<u16>);

fn batch(ops: &[Op], compression: Compression) -> Vec<u8> {
    let records: Vec<Record> = ops
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            plain_record(
                i as i64,
                1_000,
                Some(Bytes::from(format!("key-{k}"))),
                v.map(|v| Bytes::from(format!("value-{v}-{}", "x".repeat(20)))),
            )
        })
        .collect();
    encode_records(&records, compression)
}

/// `offset -> (key, value)` of everything in the log.
fn contents(log: &PartitionLog) -> BTreeMap<i64, (Option<Bytes>, Option<Bytes>)> {
    let mut out = BTreeMap::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let mut bytes = Bytes::from(log.read(at, 1 << 20).expect("read"));
        if bytes.is_empty() {
            break;
        }
        for set in RecordBatchDecoder::decode_all(&mut bytes).expect("decode") {
            for r in set.records {
                if r.offset >= at {
                    out.insert(r.offset, (r.key, r.value));
                }
                at = at.max(r.offset + 1);
            }
        }
    }
    out
}

const CODECS: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

fn policy(delete_retention_ms: i64) -> CompactionPolicy {
    CompactionPolicy {
        min_cleanable_dirty_ratio: 0.0,
        min_compaction_lag_ms: 0,
        max_compaction_lag_ms: i64::MAX,
        delete_retention_ms,
    }
}

/// Runs passes at `now` until none is due; returns how far they cleaned.
fn passes(
    log: &mut PartitionLog,
    dir: &std::path::Path,
    map_bytes: usize,
    now: i64,
    p: CompactionPolicy,
) -> i64 {
    let mut upto = 0;
    for _ in 0..50 {
        let hw = log.log_end_offset();
        let segments: Vec<_> = log
            .closed_segments()
            .into_iter()
            .filter(|s| s.next_offset <= hw)
            .collect();
        let no_aborts = |_: i64, _: i64| false;
        match compact(
            dir,
            &segments,
            p,
            map_bytes,
            now,
            Txns::Known(&no_aborts),
            |rw| log.swap_compacted(rw, now),
        )
        .expect("compaction pass")
        {
            Some(done) => upto = upto.max(done.upto),
            None => return upto,
        }
    }
    panic!("passes never ended");
}

proptest! {
    // Failing seeds are kept beside this file (compaction.proptest-regressions), and
    // replayed first on every run.
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn compaction_keeps_the_newest_of_each_key_at_its_offset(
        batches in prop::collection::vec(
            (prop::collection::vec((0u8..40, prop::option::weighted(0.8, 0u16..1000)), 1..5), 0usize..3),
            5..120,
        ),
        map_bytes in prop::sample::select(vec![1500usize, 1 << 20]),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig { segment_bytes: 700, index_interval_bytes: 128, ..LogConfig::default() };
        let (mut log, _) = PartitionLog::open(dir.path(), config, 0).expect("open");
        for (ops, codec) in &batches {
            log.append(&batch(ops, CODECS[*codec]), 0).expect("append");
        }
        log.flush().expect("seal");
        let before = contents(&log);
        let d = 10_000;

        // First passes: the newest of each key below `upto` stays; tombstones too.
        let upto = passes(&mut log, dir.path(), map_bytes, 1_000, policy(d));
        let after = contents(&log);
        let mut newest: BTreeMap<&Option<Bytes>, i64> = BTreeMap::new();
        for (o, (k, _)) in before.range(..upto) {
            newest.insert(k, *o);
        }
        for (o, rec) in &after {
            prop_assert_eq!(Some(rec), before.get(o), "offset {} changed", o);
        }
        for (o, rec) in &before {
            let kept = after.contains_key(o);
            if *o >= upto {
                prop_assert!(kept, "offset {} above the cleaned part ({}) went", o, upto);
            } else {
                prop_assert_eq!(kept, newest.get(&rec.0) == Some(o),
                    "offset {} below {}: kept {} but newest of its key is {:?}", o, upto, kept, newest.get(&rec.0));
            }
        }

        // Within delete.retention.ms of that pass nothing more goes; after it, the
        // tombstones it covered go.
        prop_assert_eq!(passes(&mut log, dir.path(), map_bytes, 1_000 + d, policy(d)), 0);
        prop_assert_eq!(&contents(&log), &after);
        passes(&mut log, dir.path(), map_bytes, 1_000 + d + 1, policy(d));
        let swept = contents(&log);
        for (o, rec) in &after {
            let tombstone = rec.1.is_none();
            prop_assert_eq!(swept.contains_key(o), !(tombstone && *o < upto),
                "offset {} (tombstone {}) after the horizon", o, tombstone);
        }

        // Reopened (the swapped segments' index files were rewritten): the same.
        drop(log);
        let (log, _) = PartitionLog::open(dir.path(), config, 0).expect("reopen");
        prop_assert_eq!(&contents(&log), &swept);
    }
}

/// An idempotent producer's batches, with sequences from `base_sequence`.
fn idempotent(key: u8, n: usize, base_sequence: i32) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            producer_id: 7,
            producer_epoch: 0,
            sequence: base_sequence + i as i32,
            ..plain_record(
                i as i64,
                1_000,
                Some(Bytes::from(format!("key-{key}"))),
                Some(Bytes::from(format!(
                    "value-{base_sequence}-{i}-{}",
                    "y".repeat(30)
                ))),
            )
        })
        .collect();
    encode_records(&records, Compression::None)
}

/// An idempotent producer keeps its deduplication across compaction and a restart:
/// compaction removes most of its batches (it rewrote the same keys), and a retry of
/// its last batch is still recognised and answered with the original offsets.
#[test]
fn idempotent_producer_state_survives_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 700,
        index_interval_bytes: 128,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(dir.path(), config, 0).expect("open");
    let mut seq = 0;
    let mut last = None;
    for i in 0..60 {
        let out = log
            .append(&idempotent((i % 3) as u8, 2, seq), 0)
            .expect("append");
        last = Some((seq, out.base_offset, out.last_offset));
        seq += 2;
    }
    log.flush().expect("seal");
    let upto = passes(&mut log, dir.path(), 1 << 20, 1_000, policy(10_000));
    assert!(upto > 0, "something was cleaned");
    let records_left = contents(&log).len();
    assert!(
        records_left < 60,
        "compaction removed the older updates: {records_left} left"
    );
    drop(log);
    let (mut log, _) = PartitionLog::open(dir.path(), config, 0).expect("reopen");
    let (last_seq, base, end) = last.expect("appended");
    let retry = log
        .append(&idempotent(((60 - 1) % 3) as u8, 2, last_seq), 0)
        .expect("retry");
    assert!(retry.duplicate, "the retry is recognised");
    assert_eq!((retry.base_offset, retry.last_offset), (base, end));
    let next = log
        .append(&idempotent(0, 2, seq), 0)
        .expect("next in sequence");
    assert!(!next.duplicate);
}
