//! Tests of the partition log: appends, reads, segments and their indexes, recovery,
//! timestamps and idempotent producers.

use super::*;
use crate::batch::tests::encode_batch;
use kafka_protocol::records::Compression;
use std::io::Write;

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

/// A small-segment log after 40 appends: several segments, none sealed yet.
fn rolled_log() -> (tempfile::TempDir, PartitionLog) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("open");
    for i in 0..40 {
        log.append(&encode_batch(3, 1000 + i * 10, Compression::None), 0)
            .expect("append");
    }
    (dir, log)
}

/// Cuts the last 7 bytes off the file at `path`.
fn tear(path: &Path) {
    let len = fs::metadata(path).expect("stat").len();
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open")
        .set_len(len - 7)
        .expect("tear");
}

/// A roll waits for no disk: the closed segment is sealed (fsynced, indexed) by the
/// next flush, and until then tiering and retention do not see it.
#[test]
fn a_roll_is_sealed_by_the_next_flush() {
    let (dir, mut log) = rolled_log();
    assert!(log.segment_count() >= 3, "rolled");
    assert!(log.closed_segments().is_empty(), "nothing sealed yet");
    let index = dir.path().join(crate::segment::file_name(0, "index"));
    assert!(!index.exists());
    let target = log.flush_target().expect("target");
    assert!(target.has_closed_segments());
    target.sync().expect("sync");
    log.seal(&target).expect("seal").sync().expect("sync index");
    assert_eq!(log.closed_segments().len(), log.segment_count() - 1);
    assert!(index.exists());
    assert_eq!(log.open_files(), 1);
    assert!(!log.flush_target().expect("target").has_closed_segments());
}

/// DeleteRecords and retention move the start inside a segment: reads below it are
/// refused although the segment still holds them; sealed segments wholly below it
/// go; the active segment stays; the start never moves back nor past the end.
#[test]
fn the_log_start_moves_up_inside_segments() {
    let (_dir, mut log) = rolled_log();
    log.flush().expect("seal");
    let closed = log.closed_segments();
    let second = closed[1].clone();
    let inside = second.base_offset + 1;
    assert_eq!(log.advance_start(inside).expect("advance"), 1);
    assert_eq!(log.log_start_offset(), inside);
    assert_eq!(log.closed_segments()[0], second, "the first segment went");
    assert!(matches!(
        log.read(second.base_offset, 1 << 20),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert!(!log.read(inside, 1 << 20).expect("read").is_empty());
    assert_eq!(log.advance_start(3).expect("never back"), 0);
    assert_eq!(log.log_start_offset(), inside);
    let end = log.log_end_offset();
    log.advance_start(end + 50).expect("to the end");
    assert_eq!(log.log_start_offset(), end, "not past the end");
    assert_eq!(log.segment_count(), 1, "only the active segment stays");
    log.append(&encode_batch(3, 5000, Compression::None), 0)
        .expect("append after");
    assert_eq!(log.log_end_offset(), end + 3);
}

/// A crash (of the machine) after a roll and before the flusher sealed the closed
/// segment may leave it torn: recovery cuts the log at the tear and removes the
/// later segments, whose data was never counted durable. Once a later segment is
/// sealed, a tear in an earlier one is corruption, and the log refuses to open.
#[test]
fn a_torn_unsealed_segment_ends_the_log() {
    let (dir, log) = rolled_log();
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    assert!(bases.len() >= 3);
    drop(log);
    let first = dir.path().join(crate::segment::file_name(bases[0], "log"));
    tear(&first);
    let (log, rec) = PartitionLog::open(dir.path(), small(), 0).expect("reopen");
    assert_eq!(log.segment_count(), 1, "later segments removed");
    assert!(rec.truncated_bytes > 0);
    assert!(log.log_end_offset() < bases[1]);
    for later in &bases[1..] {
        assert!(
            !dir.path()
                .join(crate::segment::file_name(*later, "log"))
                .exists()
        );
    }
    drop(log);

    let (dir, mut log) = rolled_log();
    log.flush().expect("seal everything");
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    drop(log);
    let first = dir.path().join(crate::segment::file_name(bases[0], "log"));
    fs::remove_file(first.with_extension("index")).expect("drop its index");
    tear(&first);
    assert!(matches!(
        PartitionLog::open(dir.path(), small(), 0),
        Err(Error::CorruptSegment { .. })
    ));
}

/// A read planned before a cut reads outside the lock; the generation tells the
/// caller to plan again.
#[test]
fn a_cut_changes_the_generation_reads_were_planned_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("open");
    for i in 0..6 {
        log.append(&encode_batch(3, 1000 + i * 10, Compression::None), 0)
            .expect("append");
    }
    let plan = log
        .read_plan(3, 1 << 20)
        .expect("plan")
        .expect("something to read");
    let planned = plan.generation();
    assert_eq!(planned, log.generation());
    assert!(!plan.read().expect("read").is_empty());
    assert!(
        log.read_plan(18, 1 << 20)
            .expect("plan at the end")
            .is_none()
    );
    log.truncate_to(9, 0).expect("cut");
    assert_ne!(log.generation(), planned);
}

/// Sealed segments close their files (an agent's open files grow with partitions,
/// not segments) and are still read, after a roll and after a restart.
#[test]
fn only_the_active_segment_holds_a_file() {
    let (dir, mut log) = rolled_log();
    log.flush().expect("flush");
    assert!(
        log.closed_segments().len() >= 3,
        "{:?}",
        log.closed_segments()
    );
    assert_eq!(log.open_files(), 1);
    let first = log.read(0, 1 << 20).expect("read the first sealed segment");
    assert!(!first.is_empty());
    assert_eq!(
        log.offset_for_timestamp(1000).expect("by time"),
        Some((0, 1000))
    );
    drop(log);
    let (log, _) = PartitionLog::open(dir.path(), small(), 0).expect("reopen");
    assert_eq!(log.open_files(), 1);
    assert_eq!(log.read(0, 1 << 20).expect("read after restart"), first);
}

#[test]
fn offsets_are_dense_across_rolls_and_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("open");
    let mut expected = 0;
    for i in 0..50 {
        let out = log
            .append(&encode_batch(3, 1000 + i * 10, Compression::None), 0)
            .expect("append");
        assert_eq!(out.base_offset, expected);
        assert_eq!(out.last_offset, expected + 2);
        expected += 3;
    }
    assert!(log.segment_count() > 3, "small segment.bytes rolls");
    drop(log);
    let (log, rec) = PartitionLog::open(dir.path(), small(), 0).expect("reopen");
    assert_eq!(rec.truncated_bytes, 0);
    assert_eq!(log.log_end_offset(), 150);
    // Every offset is readable, and reading from the middle of a batch returns it.
    for offset in 0..150 {
        let bytes = log.read(offset, 1).expect("read");
        let (h, _) = BatchIter::new(&bytes).next().expect("one batch");
        assert!(h.base_offset <= offset && offset <= h.last_offset());
    }
    assert!(log.read(150, 100).expect("at end").is_empty());
    assert!(matches!(
        log.read(151, 100),
        Err(Error::OffsetOutOfRange { .. })
    ));
}

/// A compacted leader's log has gaps between batches: a follower copies it as it is,
/// a read at an offset in a gap answers the next batch, and the log reopens the same
/// from its index files and by scanning.
#[test]
fn logs_with_gaps_are_copied_read_and_recovered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("open");
    let mut bases = Vec::new();
    let mut next = 0;
    for i in 0..40 {
        let base = next + (i % 3) * 4;
        let mut batch = encode_batch(3, 1000 + i, Compression::None);
        batch::assign(&mut batch, base, 0, TimestampType::CreateTime, 0);
        log.append_replicated(&batch, 0)
            .expect("a batch after a gap");
        bases.push(base);
        next = base + 3;
    }
    assert!(log.segment_count() > 3, "rolled");
    assert_eq!(log.log_end_offset(), next);
    log.flush().expect("seal");
    let check = |log: &PartitionLog| {
        for w in bases.windows(2) {
            for offset in w[0] + 3..w[1] {
                let got = log.read(offset, 1).expect("read in a gap");
                let h = batch::BatchHeader::parse(&got).expect("a batch");
                assert_eq!(h.base_offset, w[1], "read at {offset}");
            }
        }
        assert_eq!(log.log_end_offset(), next);
    };
    check(&log);
    drop(log);
    let (log, _) = PartitionLog::open(dir.path(), small(), 0).expect("reopen");
    check(&log);
    drop(log);
    for e in fs::read_dir(dir.path()).expect("ls") {
        let path = e.expect("entry").path();
        if path.extension().is_some_and(|x| x == "index") {
            fs::remove_file(path).expect("remove index");
        }
    }
    let (log, _) = PartitionLog::open(dir.path(), small(), 0).expect("reopen by scanning");
    check(&log);
}

#[test]
fn a_follower_copies_batches_as_they_are_and_cuts_a_divergent_suffix() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let follower_dir = tempfile::tempdir().expect("tempdir");
    let (mut leader, _) = PartitionLog::open(leader_dir.path(), small(), 0).expect("open");
    let (mut follower, _) = PartitionLog::open(follower_dir.path(), small(), 0).expect("open");
    for epoch in 0..3 {
        leader.set_leader_epoch(epoch);
        for i in 0..10 {
            leader
                .append(&encode_batch(3, 1000 + i, Compression::None), 0)
                .expect("append");
        }
    }
    assert_eq!(leader.epochs().entries(), &[(0, 0), (1, 30), (2, 60)]);
    let mut at = 0;
    while at < leader.log_end_offset() {
        let bytes = leader.read(at, 200).expect("read");
        at = follower.append_replicated(&bytes, 0).expect("replicate");
    }
    assert_eq!(follower.log_end_offset(), 90);
    assert!(follower.segment_count() > 3, "copies rolled segments");
    assert_eq!(follower.epochs(), leader.epochs());
    assert_eq!(
        follower.read(45, 1 << 20).expect("read"),
        leader.read(45, 1 << 20).expect("read")
    );
    // A batch that does not continue the log is refused.
    let again = leader.read(0, 100).expect("read");
    assert!(follower.append_replicated(&again, 0).is_err());

    // Cut back into the middle of a sealed segment, then past a batch boundary.
    assert_eq!(follower.truncate_to(40, 0).expect("truncate"), 39);
    assert_eq!(follower.epochs().entries(), &[(0, 0), (1, 30)]);
    assert_eq!(
        follower.read(39, 10).expect("read at end"),
        Vec::<u8>::new()
    );
    drop(follower);
    let (mut follower, recovery) =
        PartitionLog::open(follower_dir.path(), small(), 0).expect("reopen");
    assert_eq!(recovery.log_end_offset, 39);
    assert_eq!(follower.epochs().entries(), &[(0, 0), (1, 30)]);
    // It copies on from the cut, and ends up identical.
    let mut at = 39;
    while at < leader.log_end_offset() {
        let bytes = leader.read(at, 200).expect("read");
        at = follower.append_replicated(&bytes, 0).expect("replicate");
    }
    assert_eq!(follower.epochs(), leader.epochs());
    // Cut below the log start: the log is empty and starts there.
    assert_eq!(follower.truncate_to(-5, 0).expect("truncate"), 0);
    assert_eq!(follower.log_start_offset(), 0);
    assert!(follower.epochs().entries().is_empty());
    // Behind a leader whose log now starts at 60: start over there.
    assert_eq!(follower.reset_to(60, 0).expect("reset"), 60);
    assert_eq!(
        (follower.log_start_offset(), follower.log_end_offset()),
        (60, 60)
    );
    let mut at = 60;
    while at < leader.log_end_offset() {
        let bytes = leader.read(at, 1 << 20).expect("read");
        at = follower.append_replicated(&bytes, 0).expect("copy");
    }
    assert_eq!(at, 90);
    drop(follower);
    let (follower, recovery) = PartitionLog::open(follower_dir.path(), small(), 0).expect("reopen");
    assert_eq!(
        (recovery.log_start_offset, recovery.log_end_offset),
        (60, 90)
    );
    assert_eq!(follower.epochs().entries(), &[(2, 60)]);
}

#[test]
fn torn_tail_is_cut_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default(), 0).expect("open");
    for _ in 0..5 {
        log.append(&encode_batch(2, 1000, Compression::Gzip), 0)
            .expect("append");
    }
    let path = dir.path().join(crate::segment::file_name(0, "log"));
    drop(log);
    let good_len = fs::metadata(&path).expect("stat").len();
    // A half-written batch at the end.
    let half = encode_batch(2, 1000, Compression::None);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open");
    f.write_all(&half[..half.len() / 2]).expect("write");
    drop(f);
    let (log, rec) = PartitionLog::open(dir.path(), LogConfig::default(), 0).expect("reopen");
    assert_eq!(rec.truncated_bytes, (half.len() / 2) as u64);
    assert_eq!(log.log_end_offset(), 10);
    assert_eq!(fs::metadata(&path).expect("stat").len(), good_len);
    drop(log);
    // A flipped byte in the last batch: that whole batch goes.
    let mut bytes = fs::read(&path).expect("read");
    let n = bytes.len();
    bytes[n - 3] ^= 0x55;
    fs::write(&path, &bytes).expect("write");
    let (log, rec) = PartitionLog::open(dir.path(), LogConfig::default(), 0).expect("reopen");
    assert_eq!(rec.truncation_reason, Some("bad CRC or magic"));
    assert_eq!(log.log_end_offset(), 8);
}

#[test]
fn nothing_is_appended_when_one_batch_is_bad() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default(), 0).expect("open");
    let mut two = encode_batch(2, 1000, Compression::None);
    let mut bad = encode_batch(2, 1000, Compression::None);
    let n = bad.len();
    bad[n - 1] ^= 1;
    two.extend_from_slice(&bad);
    assert!(matches!(
        log.append(&two, 0),
        Err(Error::CorruptBatch { .. })
    ));
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.size_bytes(), 0);
    let mut partial = encode_batch(2, 1000, Compression::None);
    partial.truncate(partial.len() - 4);
    assert!(log.append(&partial, 0).is_err());
    assert_eq!(log.size_bytes(), 0);
}

#[test]
fn timestamp_lookups_span_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("open");
    for i in 0..40 {
        // Records i*4 .. i*4+3 with timestamps 10_000 + (i*4 + j) * 10.
        let records: Vec<_> = (0..4)
            .map(|j| crate::batch::tests::record(j, 10_000 + (i * 4 + j) * 10, None, Some(b"v")))
            .collect();
        let mut buf = bytes::BytesMut::new();
        kafka_protocol::records::RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &kafka_protocol::records::RecordEncodeOptions {
                version: 2,
                compression: Compression::Lz4,
            },
        )
        .expect("encode");
        log.append(&buf, 0).expect("append");
    }
    assert!(log.segment_count() > 2);
    assert_eq!(log.offset_for_timestamp(0).expect("ts"), Some((0, 10_000)));
    assert_eq!(
        log.offset_for_timestamp(10_555).expect("ts"),
        Some((56, 10_560))
    );
    assert_eq!(
        log.offset_for_timestamp(10_560).expect("ts"),
        Some((56, 10_560))
    );
    assert_eq!(log.offset_for_timestamp(99_999).expect("ts"), None);
    assert_eq!(
        log.max_timestamp_record().expect("max"),
        Some((159, 11_590))
    );
    drop(log);
    let (log, _) = PartitionLog::open(dir.path(), small(), 0).expect("reopen from index files");
    assert_eq!(
        log.offset_for_timestamp(10_555).expect("ts"),
        Some((56, 10_560))
    );
}

/// Batches are written from the bytes the producer sent, only their headers stamped
/// in a copy: a large batch (written in two parts) and a small one (joined) read
/// back with their records untouched and a CRC that holds, on a `LogAppendTime`
/// topic too, where stamping recomputes it.
#[test]
fn appended_batches_read_back_stamped() {
    use crate::batch::{BatchHeader, HEADER_BYTES, example_batch};
    for timestamp_type in [TimestampType::CreateTime, TimestampType::LogAppendTime] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            timestamp_type,
            ..LogConfig::default()
        };
        let (mut log, _) = PartitionLog::open(dir.path(), config, 0).expect("open");
        let small = example_batch(3, 10, 1_000, Compression::None);
        let large = example_batch(2, 100_000, 2_000, Compression::None);
        let sent = Bytes::from([small.as_slice(), large.as_slice()].concat());
        let out = log.append_shared(&sent, 7_000).expect("append");
        assert_eq!((out.base_offset, out.last_offset), (0, 4));
        let read = log.read(0, 1 << 20).expect("read");
        let batches: Vec<_> = BatchIter::new(&read).collect();
        assert_eq!(batches.len(), 2, "{timestamp_type:?}");
        for ((header, bytes), (base, sent)) in batches.iter().zip([(0, &small), (3, &large)]) {
            let parsed = BatchHeader::parse(bytes).expect("header");
            parsed.verify(bytes).expect("the CRC holds");
            assert_eq!(header.base_offset, base);
            assert_eq!(bytes.len(), sent.len());
            assert_eq!(
                bytes[HEADER_BYTES..],
                sent[HEADER_BYTES..],
                "records as sent"
            );
            assert_eq!(
                parsed.is_log_append_time(),
                timestamp_type == TimestampType::LogAppendTime
            );
            if parsed.is_log_append_time() {
                assert_eq!(parsed.max_timestamp, 7_000);
            }
        }
    }
}

#[test]
fn segment_ms_rolls_by_age() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(dir.path(), config, 0).expect("open");
    log.append(&encode_batch(1, 0, Compression::None), 10)
        .expect("append");
    log.append(&encode_batch(1, 0, Compression::None), 500)
        .expect("append");
    assert_eq!(log.segment_count(), 1);
    log.append(&encode_batch(1, 0, Compression::None), 1500)
        .expect("append");
    assert_eq!(log.segment_count(), 2);
}

/// An idempotent batch: producer 42, epoch 0, sequences `seq..seq+n`.
fn idempotent_batch(seq: i32, n: usize) -> Vec<u8> {
    let records: Vec<_> = (0..n)
        .map(|j| {
            let mut r = crate::batch::tests::record(j as i64, 1000, None, Some(b"v"));
            r.producer_id = 42;
            r.producer_epoch = 0;
            r.sequence = seq + j as i32;
            r
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    kafka_protocol::records::RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &kafka_protocol::records::RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode");
    buf.to_vec()
}

#[test]
fn retries_are_deduplicated_across_rolls_restarts_and_crashes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("open");
    let mut seq = 0;
    for i in 0..30 {
        let out = log.append(&idempotent_batch(seq, 3), 0).expect("append");
        assert_eq!((out.base_offset, out.duplicate), (i * 3, false));
        seq += 3;
    }
    assert!(log.segment_count() > 2, "rolled, so snapshots were written");
    let retry = log.append(&idempotent_batch(seq - 3, 3), 0).expect("retry");
    assert_eq!(
        (retry.base_offset, retry.last_offset, retry.duplicate),
        (87, 89, true)
    );
    assert_eq!(log.log_end_offset(), 90, "a retry appends nothing");
    assert!(matches!(
        log.append(&idempotent_batch(seq + 1, 1), 0),
        Err(Error::OutOfOrderSequence { .. })
    ));
    drop(log);
    // Reopen without a snapshot at the end: the state comes from the last roll's
    // snapshot plus the active segment.
    let (mut log, _) = PartitionLog::open(dir.path(), small(), 0).expect("reopen");
    let retry = log
        .append(&idempotent_batch(seq - 3, 3), 0)
        .expect("retry after restart");
    assert_eq!((retry.base_offset, retry.duplicate), (87, true));
    log.snapshot_producers().expect("snapshot");
    drop(log);
    // A crash that cut the last batch off: the snapshot taken past the new end is
    // ignored and the cut batch is accepted again as new.
    let last_segment = crate::producer_state::list_snapshots(dir.path()).expect("list");
    assert_eq!(last_segment.last().map(|s| s.0), Some(90));
    let active = fs::read_dir(dir.path())
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
        .expect("a segment");
    let len = fs::metadata(&active).expect("stat").len();
    let one = idempotent_batch(0, 3).len() as u64;
    fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .expect("open")
        .set_len(len - one / 2)
        .expect("tear");
    let (mut log, rec) = PartitionLog::open(dir.path(), small(), 0).expect("reopen after crash");
    assert!(rec.truncated_bytes > 0);
    assert_eq!(log.log_end_offset(), 87);
    let again = log
        .append(&idempotent_batch(seq - 3, 3), 0)
        .expect("re-send of the lost batch");
    assert_eq!((again.base_offset, again.duplicate), (87, false));
}
