//! Tiering's codec: a closed segment to Parquet, and a row group back to Kafka batches
//! (the archive replay path).
//!
//! `cargo bench -p strata-tiering --bench parquet_codec`

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kafka_protocol::records::Compression;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use strata_log::batch::example_batch;
use strata_log::{LogConfig, PartitionLog};
use strata_tiering::codec::{encode_segment, rebuild};

/// A closed segment of 1 000 batches of 100 records of 100 B (about 13 MB), written by
/// the real log so offsets and headers are as the broker stores them.
fn segment() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 14 << 20,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(dir.path(), config, 0).expect("open");
    let batch = example_batch(100, 100, 1_700_000_000_000, Compression::None);
    while log.closed_segments().is_empty() {
        log.append(&batch, 0).expect("append");
        log.flush().expect("flush");
    }
    std::fs::read(&log.closed_segments()[0].path).expect("read segment")
}

fn codec(c: &mut Criterion) {
    let segment = segment();
    let (file, summary) = encode_segment(&segment).expect("encode");
    let file = Bytes::from(file);
    let mut group = c.benchmark_group("parquet");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(segment.len() as u64));
    group.bench_function(format!("encode_segment_{}MB", segment.len() >> 20), |b| {
        b.iter(|| encode_segment(std::hint::black_box(&segment)).expect("encode"))
    });
    let meta = ParquetRecordBatchReaderBuilder::try_new(file.clone())
        .expect("open")
        .metadata()
        .clone();
    let rows = meta.row_group(0).num_rows() as usize;
    group.throughput(Throughput::Elements(rows as u64));
    group.bench_function("read_and_rebuild_one_row_group", |b| {
        b.iter(|| {
            let reader = ParquetRecordBatchReaderBuilder::try_new(file.clone())
                .expect("open")
                .with_row_groups(vec![0])
                .with_batch_size(rows)
                .build()
                .expect("reader");
            let mut batches = 0;
            for b in reader {
                batches += rebuild(&b.expect("read")).expect("rebuild").len();
            }
            batches
        })
    });
    group.finish();
    eprintln!(
        "segment {} B, parquet {} B, {} records",
        segment.len(),
        file.len(),
        summary.record_count
    );
}

criterion_group!(benches, codec);
criterion_main!(benches);
