//! The produce and fetch hot paths of the log: batch validation (CRC32C and a decode of
//! every record), appending to a segment, and reading from one.
//!
//! `cargo bench -p strata-log --bench log_hot_path`

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kafka_protocol::records::Compression;
use strata_log::batch::{example_batch, validate_produced};
use strata_log::{LogConfig, PartitionLog};

/// 100 records of 100 B: about what a librdkafka producer sends per partition request.
fn batch(compression: Compression) -> Vec<u8> {
    example_batch(100, 100, 1_700_000_000_000, compression)
}

fn validation(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate");
    for (name, compression) in [("none", Compression::None), ("lz4", Compression::Lz4)] {
        let bytes = batch(compression);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(format!("batch_100x100B_{name}"), |b| {
            b.iter(|| validate_produced(std::hint::black_box(&bytes), 1 << 20).expect("valid"))
        });
    }
    let bytes = batch(Compression::None);
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("crc32c_only_100x100B", |b| {
        b.iter(|| crc32c::crc32c(std::hint::black_box(&bytes[21..])))
    });
    group.finish();
}

fn append(c: &mut Criterion) {
    let bytes = batch(Compression::None);
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("batch_100x100B", |b| {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            segment_bytes: 256 << 20,
            ..LogConfig::default()
        };
        let (mut log, _) = PartitionLog::open(dir.path(), config, 0).expect("open");
        // Appends go to the page cache; fsync is the flusher's, measured apart.
        b.iter(|| log.append(&bytes, 0).expect("append"))
    });
    group.finish();
}

fn read(c: &mut Criterion) {
    let bytes = batch(Compression::None);
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default(), 0).expect("open");
    let batches = 2_000;
    for _ in 0..batches {
        log.append(&bytes, 0).expect("append");
    }
    let end = log.log_end_offset();
    let mut group = c.benchmark_group("read");
    group.throughput(Throughput::Bytes(1 << 20));
    group.bench_function("1MiB_at_random_offsets", |b| {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        b.iter_batched(
            || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % (end as u64 / 2)) as i64
            },
            |offset| log.read(offset, 1 << 20).expect("read"),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, validation, append, read);
criterion_main!(benches);
