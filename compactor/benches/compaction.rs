//! Log-compaction throughput and memory, against the disk in the same run.
//!
//! `cargo bench -p strata-compactor --bench compaction` writes a partition of
//! `STRATA_BENCH_RECORDS` records (default 10 000 000) over `STRATA_BENCH_KEYS` keys
//! (default 1 000 000; 100-byte values, batches of 100, 64 MiB segments) into
//! `STRATA_BENCH_DIR` (default the system temp dir), with a key map of
//! `STRATA_BENCH_KEY_MAP_MB` (default 128, Kafka's dedupe buffer), then prints:
//! - the disk reference: the segments copied file to file and fsynced (read + write),
//! - compaction: passes until none is due, in MB/s of the log before, and as a ratio
//!   of the disk reference,
//! - peak memory (VmHWM, reset before the compaction) and the passes it took.

// A benchmark measures wall time.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::records::Compression;
use strata_compactor::{CompactionPolicy, compact};
use strata_log::batch::{encode_records, plain_record};
use strata_log::{LogConfig, PartitionLog};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn batch(first: u64, n: u64, keys: u64) -> Vec<u8> {
    let records: Vec<_> = (0..n)
        .map(|i| {
            let k = (first + i).wrapping_mul(2_654_435_761) % keys;
            plain_record(
                i as i64,
                1_700_000_000_000,
                Some(Bytes::from(format!("key-{k:010}"))),
                Some(Bytes::from(vec![b'v'; 100])),
            )
        })
        .collect();
    encode_records(&records, Compression::None)
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let records = env("STRATA_BENCH_RECORDS", 10_000_000);
    let keys = env("STRATA_BENCH_KEYS", 1_000_000);
    let key_map = env("STRATA_BENCH_KEY_MAP_MB", 128) as usize * 1024 * 1024;
    let base = std::env::var("STRATA_BENCH_DIR")
        .map_or_else(|_| std::env::temp_dir(), std::path::PathBuf::from);
    let dir = tempfile::tempdir_in(&base).expect("tempdir");
    let log_dir = dir.path().join("log");
    let config = LogConfig {
        segment_bytes: 64 << 20,
        ..LogConfig::default()
    };
    let t = Instant::now();
    let (mut log, _) = PartitionLog::open(&log_dir, config, 0).expect("open");
    let mut written = 0;
    while written < records {
        let n = 100.min(records - written);
        log.append(&batch(written, n, keys), 0).expect("append");
        written += n;
    }
    log.roll_if_due(i64::MAX).expect("roll");
    log.flush().expect("seal");
    let segments = log.closed_segments();
    let bytes: u64 = segments.iter().map(|s| s.size_bytes).sum();
    let mb = bytes as f64 / 1e6;
    println!(
        "log: {records} records over {keys} keys, {mb:.0} MB in {} segments, written in {:.1} s",
        segments.len(),
        t.elapsed().as_secs_f64()
    );

    // The disk reference: what reading and rewriting the same bytes costs.
    let copies = dir.path().join("copies");
    std::fs::create_dir_all(&copies).expect("mkdir");
    let t = Instant::now();
    for s in &segments {
        let data = std::fs::read(&s.path).expect("read");
        let name = s.path.file_name().expect("a file name");
        let mut f = std::fs::File::create(copies.join(name)).expect("create");
        f.write_all(&data).expect("write");
        f.sync_all().expect("fsync");
    }
    let disk = mb / t.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&copies).expect("rm copies");
    println!("disk reference (read + write + fsync): {disk:.0} MB/s");

    let policy = CompactionPolicy {
        min_cleanable_dirty_ratio: 0.0,
        min_compaction_lag_ms: 0,
        max_compaction_lag_ms: i64::MAX,
        delete_retention_ms: i64::MAX,
    };
    let writing_hwm = vm_hwm_kib();
    // Resets VmHWM to the current RSS (Linux 4.0+), so the peak below is compaction's.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let start = vm_hwm_kib();
    let t = Instant::now();
    let (mut passes, mut removed, mut after) = (0, 0, 0);
    loop {
        let segments = log.closed_segments();
        // After the records' timestamps (2023), as a real clock would be.
        let now = 2_000_000_000_000;
        let no_aborts = |_: i64, _: i64| false;
        let txns = strata_compactor::compaction::Txns::Known(&no_aborts);
        let done = compact(&log_dir, &segments, policy, key_map, now, txns, |rw| {
            log.swap_compacted(rw, now)
        })
        .expect("compaction pass");
        let Some(d) = done else { break };
        passes += 1;
        removed += d.records_removed;
        after = d.bytes_after;
    }
    let secs = t.elapsed().as_secs_f64();
    let rate = mb / secs;
    println!(
        "compaction: {passes} pass(es), {removed} records removed, {mb:.0} MB -> {:.0} MB in {secs:.1} s: {rate:.0} MB/s = {:.2} x the disk reference",
        after as f64 / 1e6,
        rate / disk
    );
    println!(
        "peak memory during compaction: {:.0} MiB (VmHWM; {:.0} MiB when it began; {:.0} MiB peak while writing the log)",
        vm_hwm_kib() as f64 / 1024.0,
        start as f64 / 1024.0,
        writing_hwm as f64 / 1024.0
    );
}
