//! Kafka record batches to Parquet and back.
//!
//! One row per record. Besides what analytics engines want (offset, timestamp, key,
//! value, headers), every row keeps what is needed to rebuild the batch it came from
//! exactly: the batch's base and last offset, attributes (codec, transactional, control),
//! producer id, epoch and base sequence, and leader epoch. Rebuilt batches carry the
//! original offsets, timestamps (and timestamp type), keys, values, headers and producer
//! fields; their CRC is computed afresh.
//!
//! Integrity: a rebuilt batch's CRC protects nothing read from the archive, so every row
//! also carries `crc32c`, a CRC32C over every field the rebuild uses ([`row_digest`]),
//! computed at upload from batches whose own CRC was just verified. A rebuild checks it
//! row by row; a batch with a row that fails is returned damaged (no bytes), so a
//! reader answers an error for those offsets and never wrong bytes. (arrow-rs writes no
//! Parquet page checksums; pages that have them, from other writers, are verified on
//! read.) Files written before the column existed are rebuilt unchecked.
//!
//! Files are zstd-compressed, a row group ends at the first Kafka batch boundary after
//! [`ROW_GROUP_ROWS`] rows (so no batch spans two row groups), and offset
//! and timestamp have page-level statistics (the column and offset index), so a reader
//! can fetch only the row groups and pages it needs.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Int8Builder, Int16Builder, Int32Builder, Int64Builder, ListBuilder,
    NullBufferBuilder, StringBuilder, StructBuilder, TimestampMillisecondBuilder, UInt32Builder,
};
use arrow_array::{
    Array, ArrayRef, BinaryArray, Int8Array, Int16Array, Int32Array, Int64Array, ListArray,
    RecordBatch, StringArray, StructArray, TimestampMillisecondArray, UInt32Array,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType as WireTs,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use strata_log::batch::{BatchHeader, BatchIter};

use crate::error::{Error, Result};

/// Rows after which a row group ends (at the next batch boundary): bounds the memory a
/// reader needs for one.
pub const ROW_GROUP_ROWS: usize = 16 * 1024;
/// Rows per data page, so the page index narrows reads within a row group.
const PAGE_ROWS: usize = 1024;

const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

/// The archive's schema, one row per record.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("offset", DataType::Int64, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new("timestamp_type", DataType::Int8, false),
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new(
            "headers",
            DataType::List(Arc::new(Field::new(
                "item",
                DataType::Struct(header_fields()),
                false,
            ))),
            false,
        ),
        Field::new("producer_id", DataType::Int64, false),
        Field::new("producer_epoch", DataType::Int16, false),
        Field::new("base_sequence", DataType::Int32, false),
        Field::new("leader_epoch", DataType::Int32, false),
        Field::new("batch_attributes", DataType::Int16, false),
        Field::new("batch_base_offset", DataType::Int64, false),
        Field::new("batch_last_offset", DataType::Int64, false),
        Field::new("crc32c", DataType::UInt32, false),
    ]))
}

/// One row's fields, as written and as read back.
struct Row<'a> {
    offset: i64,
    timestamp: i64,
    timestamp_type: i8,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    leader_epoch: i32,
    attributes: i16,
    batch_base: i64,
    batch_last: i64,
}

/// The checksum of a row: CRC32C over every field in a fixed order, lengths and null
/// markers included, so that no two different rows share an encoding.
fn row_digest(r: &Row) -> u32 {
    let mut d = Digest::default();
    for n in [
        r.offset,
        r.timestamp,
        r.producer_id,
        r.batch_base,
        r.batch_last,
    ] {
        d.put(&n.to_le_bytes());
    }
    for n in [r.base_sequence, r.leader_epoch] {
        d.put(&n.to_le_bytes());
    }
    for n in [r.producer_epoch, r.attributes] {
        d.put(&n.to_le_bytes());
    }
    d.put(&r.timestamp_type.to_le_bytes());
    d.opt(r.key);
    d.opt(r.value);
    d.put(&(r.headers.len() as u64).to_le_bytes());
    for (k, v) in &r.headers {
        d.opt(Some(k));
        d.opt(*v);
    }
    d.finish()
}

/// CRC32C over a sequence of fields, the small ones gathered first: one call for a
/// row's fixed fields instead of one a field (a call on a few bytes costs as much as
/// one on a hundred). The same as appending each field in turn.
struct Digest {
    crc: u32,
    pending: [u8; 96],
    len: usize,
}

impl Default for Digest {
    fn default() -> Digest {
        Digest {
            crc: 0,
            pending: [0; 96],
            len: 0,
        }
    }
}

impl Digest {
    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > self.pending.len() {
            self.drain();
        }
        if bytes.len() > self.pending.len() / 2 {
            self.drain();
            self.crc = crc32c::crc32c_append(self.crc, bytes);
        } else {
            self.pending[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }

    /// A nullable field: a marker, then its length and bytes when present.
    fn opt(&mut self, v: Option<&[u8]>) {
        match v {
            None => self.put(&[0]),
            Some(b) => {
                self.put(&[1]);
                self.put(&(b.len() as u64).to_le_bytes());
                self.put(b);
            }
        }
    }

    fn drain(&mut self) {
        self.crc = crc32c::crc32c_append(self.crc, &self.pending[..self.len]);
        self.len = 0;
    }

    fn finish(mut self) -> u32 {
        self.drain();
        self.crc
    }
}

/// What an encoded segment covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub first_offset: i64,
    pub last_offset: i64,
    pub min_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
    pub record_count: i64,
}

/// A binary column (keys, values) built in buffers that outlive their row group: once
/// the writer has encoded a row group, its arrays come back ([`Binary::reclaim`]) and
/// their memory is filled again. With a fresh buffer per row group (16 MiB of 1 KiB
/// values, grown by doubling) every row group was fresh mappings, faulted in page by
/// page and unmapped after, and each unmap stops the process's other threads for a TLB
/// shootdown (docs/BENCHMARKS.md, the archive catching up).
struct Binary {
    /// `0`, then the end of each row.
    offsets: Vec<i32>,
    values: Vec<u8>,
    nulls: NullBufferBuilder,
}

impl Binary {
    fn new() -> Binary {
        Binary {
            offsets: vec![0],
            values: Vec::new(),
            nulls: NullBufferBuilder::new(0),
        }
    }

    fn append_option(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.values.extend_from_slice(v);
                self.nulls.append_non_null();
            }
            None => self.nulls.append_null(),
        }
        // As arrow's builder does: a row group past 2 GiB of one column is a bug here.
        let end = i32::try_from(self.values.len()).expect("byte array offset overflow");
        self.offsets.push(end);
    }

    fn finish(&mut self) -> Result<BinaryArray> {
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        BinaryArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(std::mem::take(&mut self.values)),
            self.nulls.finish(),
        )
        .map_err(|e| Error::Codec(format!("build arrow column: {e}")))
    }

    /// Keeps `written`'s buffers for the next row group, when nothing else holds them.
    fn reclaim(&mut self, written: ArrayRef) {
        let data = written.to_data();
        drop(written);
        let (offsets, values, _) = BinaryArray::from(data).into_parts();
        if let Ok(mut offsets) = offsets.into_inner().into_inner().into_vec::<i32>() {
            offsets.clear();
            offsets.push(0);
            self.offsets = offsets;
        }
        if let Ok(mut values) = values.into_vec::<u8>() {
            values.clear();
            self.values = values;
        }
    }
}

struct Builders {
    offset: Int64Builder,
    timestamp: TimestampMillisecondBuilder,
    timestamp_type: Int8Builder,
    key: Binary,
    value: Binary,
    headers: ListBuilder<StructBuilder>,
    producer_id: Int64Builder,
    producer_epoch: Int16Builder,
    base_sequence: Int32Builder,
    leader_epoch: Int32Builder,
    attributes: Int16Builder,
    batch_base: Int64Builder,
    batch_last: Int64Builder,
    crc: UInt32Builder,
    rows: usize,
}

impl Builders {
    fn new() -> Builders {
        let header = StructBuilder::from_fields(header_fields(), 0);
        let headers = ListBuilder::new(header).with_field(Arc::new(Field::new(
            "item",
            DataType::Struct(header_fields()),
            false,
        )));
        Builders {
            offset: Int64Builder::new(),
            timestamp: TimestampMillisecondBuilder::new(),
            timestamp_type: Int8Builder::new(),
            key: Binary::new(),
            value: Binary::new(),
            headers,
            producer_id: Int64Builder::new(),
            producer_epoch: Int16Builder::new(),
            base_sequence: Int32Builder::new(),
            leader_epoch: Int32Builder::new(),
            attributes: Int16Builder::new(),
            batch_base: Int64Builder::new(),
            batch_last: Int64Builder::new(),
            crc: UInt32Builder::new(),
            rows: 0,
        }
    }

    fn push(&mut self, h: &BatchHeader, r: &Record) {
        let log_append = h.is_log_append_time();
        let timestamp = if log_append {
            h.max_timestamp
        } else {
            r.timestamp
        };
        self.crc.append_value(row_digest(&Row {
            offset: r.offset,
            timestamp,
            timestamp_type: i8::from(log_append),
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (k.as_bytes(), v.as_deref()))
                .collect(),
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            leader_epoch: h.partition_leader_epoch,
            attributes: h.attributes,
            batch_base: h.base_offset,
            batch_last: h.last_offset(),
        }));
        self.offset.append_value(r.offset);
        self.timestamp.append_value(timestamp);
        self.timestamp_type.append_value(i8::from(log_append));
        self.key.append_option(r.key.as_deref());
        self.value.append_option(r.value.as_deref());
        let hb = self.headers.values();
        for (k, v) in &r.headers {
            hb.field_builder::<StringBuilder>(0)
                .expect("key builder")
                .append_value(k.as_str());
            hb.field_builder::<BinaryBuilder>(1)
                .expect("value builder")
                .append_option(v.as_deref());
            hb.append(true);
        }
        self.headers.append(true);
        self.producer_id.append_value(h.producer_id);
        self.producer_epoch.append_value(h.producer_epoch);
        self.base_sequence.append_value(h.base_sequence);
        self.leader_epoch.append_value(h.partition_leader_epoch);
        self.attributes.append_value(h.attributes);
        self.batch_base.append_value(h.base_offset);
        self.batch_last.append_value(h.last_offset());
        self.rows += 1;
    }

    /// Takes back the buffers of a row group the writer has encoded (see [`Binary`]).
    fn reclaim(&mut self, written: RecordBatch) {
        let (_, columns, _) = written.into_parts();
        let mut columns = columns.into_iter();
        if let (Some(key), Some(value)) = (columns.nth(3), columns.next()) {
            self.key.reclaim(key);
            self.value.reclaim(value);
        }
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        self.rows = 0;
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(self.offset.finish()),
                Arc::new(self.timestamp.finish()),
                Arc::new(self.timestamp_type.finish()),
                Arc::new(self.key.finish()?),
                Arc::new(self.value.finish()?),
                Arc::new(self.headers.finish()),
                Arc::new(self.producer_id.finish()),
                Arc::new(self.producer_epoch.finish()),
                Arc::new(self.base_sequence.finish()),
                Arc::new(self.leader_epoch.finish()),
                Arc::new(self.attributes.finish()),
                Arc::new(self.batch_base.finish()),
                Arc::new(self.batch_last.finish()),
                Arc::new(self.crc.finish()),
            ],
        )
        .map_err(|e| Error::Codec(format!("build arrow batch: {e}")))
    }
}

fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(ParquetCompression::ZSTD(
            ZstdLevel::try_new(3).expect("valid zstd level"),
        ))
        .set_max_row_group_row_count(None)
        // Values and keys are mostly distinct: a dictionary would cost a hash and a
        // compare a row (a fifth of the encoder's time) and then be dropped for plain.
        .set_dictionary_enabled(false)
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_column_statistics_enabled(ColumnPath::from("offset"), EnabledStatistics::Page)
        .set_column_statistics_enabled(ColumnPath::from("timestamp"), EnabledStatistics::Page)
        .build()
}

/// Encodes the record batches of a closed segment as one Parquet file.
pub fn encode_segment(segment: &[u8]) -> Result<(Vec<u8>, Summary)> {
    let mut encoder = SegmentEncoder::new()?;
    let used = encoder.push(segment)?;
    if used < segment.len() {
        return Err(Error::Codec(format!(
            "segment ends in {} bytes of a partial batch",
            segment.len() - used
        )));
    }
    encoder.finish()
}

/// Encodes a closed segment as one Parquet file a piece at a time, so that a segment
/// (1 GiB by default) is never in memory whole, and its encoding can be spread over
/// several turns of the background pool (each piece charged to the tiering rate).
pub struct SegmentEncoder {
    writer: ArrowWriter<Vec<u8>>,
    builders: Builders,
    summary: Option<Summary>,
}

impl std::fmt::Debug for SegmentEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentEncoder")
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

impl SegmentEncoder {
    pub fn new() -> Result<SegmentEncoder> {
        Ok(SegmentEncoder {
            writer: ArrowWriter::try_new(Vec::new(), schema(), Some(writer_properties()))
                .map_err(|e| Error::Codec(format!("start parquet writer: {e}")))?,
            builders: Builders::new(),
            summary: None,
        })
    }

    /// Encodes the whole batches at the start of `bytes` (the segment's next bytes);
    /// returns how many bytes they took. The rest is the start of a batch that
    /// continues in the next piece: pass it again with what follows.
    pub fn push(&mut self, bytes: &[u8]) -> Result<usize> {
        let b = &mut self.builders;
        let mut iter = BatchIter::new(bytes);
        for (header, bytes) in iter.by_ref() {
            // What the row checksums vouch for must itself be right: the decoder checks
            // the batch's CRC.
            let mut buf = Bytes::copy_from_slice(bytes);
            let set = RecordBatchDecoder::decode(&mut buf).map_err(|e| {
                Error::Codec(format!(
                    "decode batch at offset {}: {e:#}",
                    header.base_offset
                ))
            })?;
            for r in &set.records {
                b.push(&header, r);
                let ts = if header.is_log_append_time() {
                    header.max_timestamp
                } else {
                    r.timestamp
                };
                let s = self.summary.get_or_insert(Summary {
                    first_offset: r.offset,
                    last_offset: r.offset,
                    min_timestamp_ms: ts,
                    max_timestamp_ms: ts,
                    record_count: 0,
                });
                s.last_offset = r.offset;
                s.min_timestamp_ms = s.min_timestamp_ms.min(ts);
                s.max_timestamp_ms = s.max_timestamp_ms.max(ts);
                s.record_count += 1;
            }
            // Row groups end only between Kafka batches, so a reader can rebuild every
            // batch from one row group.
            if b.rows >= ROW_GROUP_ROWS {
                let group = b.finish()?;
                self.writer
                    .write(&group)
                    .and_then(|_| self.writer.flush())
                    .map_err(|e| Error::Codec(format!("write parquet: {e}")))?;
                b.reclaim(group);
            }
        }
        Ok(iter.position())
    }

    /// The Parquet file, and what it covers.
    pub fn finish(mut self) -> Result<(Vec<u8>, Summary)> {
        if self.builders.rows > 0 {
            self.writer
                .write(&self.builders.finish()?)
                .map_err(|e| Error::Codec(format!("write parquet: {e}")))?;
        }
        let out = self
            .writer
            .into_inner()
            .map_err(|e| Error::Codec(format!("finish parquet: {e}")))?;
        let summary = self
            .summary
            .ok_or_else(|| Error::Codec("segment holds no records".to_string()))?;
        Ok((out, summary))
    }
}

/// Calls `f` with each row group of an archived object as one Arrow batch (a Kafka
/// batch never spans two), one in memory at a time.
fn for_each_row_group(file: &Bytes, mut f: impl FnMut(&RecordBatch) -> Result<()>) -> Result<()> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file.clone())
        .map_err(|e| Error::Codec(format!("open archived object: {e}")))?;
    for g in 0..builder.metadata().num_row_groups() {
        let rows = builder.metadata().row_group(g).num_rows().max(1) as usize;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file.clone())
            .and_then(|b| b.with_row_groups(vec![g]).with_batch_size(rows).build())
            .map_err(|e| Error::Codec(format!("read archived object: {e}")))?;
        for batch in reader {
            f(&batch.map_err(|e| Error::Codec(format!("read archived object: {e}")))?)?;
        }
    }
    Ok(())
}

/// Merges archived objects (adjacent in offsets, oldest first) into one: their rows as
/// they are, checksums included, in row groups that still end at Kafka batch
/// boundaries. Every batch is rebuilt and checked first: objects with a damaged batch,
/// or written before the row checksums existed, are not merged.
pub fn merge_objects(files: &[Bytes]) -> Result<(Vec<u8>, Summary)> {
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema(), Some(writer_properties()))
        .map_err(|e| Error::Codec(format!("start parquet writer: {e}")))?;
    let mut summary: Option<Summary> = None;
    let mut rows_in_group = 0;
    for file in files {
        let schema_of =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file.clone())
                .map_err(|e| Error::Codec(format!("open archived object: {e}")))?
                .schema()
                .clone();
        if schema_of.as_ref() != schema().as_ref() {
            return Err(Error::Codec(
                "an archived object of another schema (no row checksums) is not merged".to_string(),
            ));
        }
        for_each_row_group(file, |batch| {
            if let Some(damaged) = rebuild(batch)?.into_iter().find(|b| b.damage.is_some()) {
                return Err(Error::Codec(format!(
                    "batch {}..={} is damaged, not merged: {}",
                    damaged.base_offset,
                    damaged.last_offset,
                    damaged.damage.unwrap_or_default()
                )));
            }
            let offsets = column::<Int64Array>(batch, "offset")?;
            let times = column::<TimestampMillisecondArray>(batch, "timestamp")?;
            for i in 0..batch.num_rows() {
                let (o, t) = (offsets.value(i), times.value(i));
                let s = summary.get_or_insert(Summary {
                    first_offset: o,
                    last_offset: o,
                    min_timestamp_ms: t,
                    max_timestamp_ms: t,
                    record_count: 0,
                });
                s.last_offset = o;
                s.min_timestamp_ms = s.min_timestamp_ms.min(t);
                s.max_timestamp_ms = s.max_timestamp_ms.max(t);
                s.record_count += 1;
            }
            writer
                .write(batch)
                .map_err(|e| Error::Codec(format!("write parquet: {e}")))?;
            rows_in_group += batch.num_rows();
            // Input row groups end at Kafka batch boundaries: so may the output's.
            if rows_in_group >= ROW_GROUP_ROWS {
                writer
                    .flush()
                    .map_err(|e| Error::Codec(format!("write parquet: {e}")))?;
                rows_in_group = 0;
            }
            Ok(())
        })?;
    }
    writer
        .close()
        .map_err(|e| Error::Codec(format!("finish parquet: {e}")))?;
    let summary = summary.ok_or_else(|| Error::Codec("nothing to merge".to_string()))?;
    Ok((out, summary))
}

/// Calls `f` with every Kafka batch of an archived object, rebuilt and checked, in
/// offset order (one row group in memory at a time). A damaged batch is an error.
pub fn for_each_archived_batch(
    file: &Bytes,
    mut f: impl FnMut(&BatchHeader, &[u8]) -> Result<()>,
) -> Result<()> {
    for_each_row_group(file, |batch| {
        for b in rebuild(batch)? {
            if let Some(damage) = &b.damage {
                return Err(Error::Codec(format!(
                    "batch {}..={} is damaged: {damage}",
                    b.base_offset, b.last_offset
                )));
            }
            let header = BatchHeader::parse(&b.bytes)
                .ok_or_else(|| Error::Codec("rebuilt batch too short".to_string()))?;
            f(&header, &b.bytes)?;
        }
        Ok(())
    })
}

/// What [`compact_object`] made of an object.
#[derive(Debug)]
pub struct Compacted {
    /// The new object and what it covers; `None` if no record stays.
    pub object: Option<(Vec<u8>, Summary)>,
    pub records_in: u64,
    pub records_kept: u64,
}

/// The records of an archived object that `keep` keeps (asked once per record, in
/// offset order), as a new object: the rebuilt batches filtered as the log's
/// compaction filters them ([`strata_log::compaction::filter_batch`]) and encoded
/// again, with row checksums computed afresh from CRC-checked batches.
pub fn compact_object(
    file: &Bytes,
    mut keep: impl FnMut(&strata_log::compaction::Seen) -> bool,
) -> Result<Compacted> {
    let mut segment = Vec::new();
    let (mut records_in, mut records_kept) = (0, 0);
    for_each_archived_batch(file, |header, bytes| {
        let filtered = strata_log::compaction::filter_batch(header, bytes, &mut keep)
            .map_err(|e| Error::Codec(e.to_string()))?;
        records_in += filtered.records_in;
        records_kept += filtered.records_kept;
        if let Some(b) = filtered.bytes {
            segment.extend_from_slice(&b);
        }
        Ok(())
    })?;
    let object = if segment.is_empty() {
        None
    } else {
        Some(encode_segment(&segment)?)
    };
    Ok(Compacted {
        object,
        records_in,
        records_kept,
    })
}

/// One rebuilt Kafka record batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuiltBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp_ms: i64,
    /// Empty if `damage` is set.
    pub bytes: Bytes,
    /// Why the batch could not be rebuilt as archived (a row failed its checksum).
    pub damage: Option<String>,
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| {
            Error::Codec(format!(
                "archive file lacks column {name} of the expected type"
            ))
        })
}

fn compression_of(attributes: i16) -> Compression {
    match attributes & 0x07 {
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        _ => Compression::None,
    }
}

/// Rebuilds the Kafka batches of the rows in `batch`, which must hold whole Kafka batches:
/// read a row group as one Arrow batch (no batch spans two row groups).
pub fn rebuild(batch: &RecordBatch) -> Result<Vec<RebuiltBatch>> {
    let offset = column::<Int64Array>(batch, "offset")?;
    let timestamp = column::<TimestampMillisecondArray>(batch, "timestamp")?;
    let ts_type = column::<Int8Array>(batch, "timestamp_type")?;
    let key = column::<BinaryArray>(batch, "key")?;
    let value = column::<BinaryArray>(batch, "value")?;
    let headers = column::<ListArray>(batch, "headers")?;
    let producer_id = column::<Int64Array>(batch, "producer_id")?;
    let producer_epoch = column::<Int16Array>(batch, "producer_epoch")?;
    let base_sequence = column::<Int32Array>(batch, "base_sequence")?;
    let leader_epoch = column::<Int32Array>(batch, "leader_epoch")?;
    let attributes = column::<Int16Array>(batch, "batch_attributes")?;
    let batch_base = column::<Int64Array>(batch, "batch_base_offset")?;
    let batch_last = column::<Int64Array>(batch, "batch_last_offset")?;
    // Absent from files written before it existed: those rows are not checked.
    let crc = batch
        .column_by_name("crc32c")
        .map(|c| {
            c.as_any()
                .downcast_ref::<UInt32Array>()
                .ok_or_else(|| Error::Codec("column crc32c is not uint32".to_string()))
        })
        .transpose()?;

    let mut out = Vec::new();
    let mut row = 0;
    while row < batch.num_rows() {
        let base = batch_base.value(row);
        let end = (row..batch.num_rows())
            .find(|&i| batch_base.value(i) != base)
            .unwrap_or(batch.num_rows());
        let attrs = attributes.value(row);
        let log_append = ts_type.value(row) == 1;
        let mut records = Vec::with_capacity(end - row);
        let mut damage = None;
        for i in row..end {
            let hs = headers.value(i);
            let hs = hs
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| Error::Codec("headers are not a list of structs".to_string()))?;
            let hk = hs
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| Error::Codec("header keys are not strings".to_string()))?;
            let hv = hs
                .column(1)
                .as_any()
                .downcast_ref::<BinaryArray>()
                .ok_or_else(|| Error::Codec("header values are not binary".to_string()))?;
            let key_i = (!key.is_null(i)).then(|| key.value(i));
            let value_i = (!value.is_null(i)).then(|| value.value(i));
            if let Some(crc) = crc {
                let digest = row_digest(&Row {
                    offset: offset.value(i),
                    timestamp: timestamp.value(i),
                    timestamp_type: ts_type.value(i),
                    key: key_i,
                    value: value_i,
                    headers: (0..hs.len())
                        .map(|j| {
                            (
                                hk.value(j).as_bytes(),
                                (!hv.is_null(j)).then(|| hv.value(j)),
                            )
                        })
                        .collect(),
                    producer_id: producer_id.value(i),
                    producer_epoch: producer_epoch.value(i),
                    base_sequence: base_sequence.value(i),
                    leader_epoch: leader_epoch.value(i),
                    attributes: attributes.value(i),
                    batch_base: batch_base.value(i),
                    batch_last: batch_last.value(i),
                });
                if digest != crc.value(i) {
                    damage = Some(format!(
                        "the row at offset {} fails its checksum (stored {:08x}, computed {digest:08x})",
                        offset.value(i),
                        crc.value(i)
                    ));
                    break;
                }
            }
            let mut h = Vec::new();
            for j in 0..hs.len() {
                let v = (!hv.is_null(j)).then(|| Bytes::copy_from_slice(hv.value(j)));
                h.push((StrBytes::from_string(hk.value(j).to_string()), v));
            }
            let delta = (offset.value(i) - base) as i32;
            records.push(Record {
                transactional: attrs & ATTR_TRANSACTIONAL != 0,
                control: attrs & ATTR_CONTROL != 0,
                delete_horizon: false,
                partition_leader_epoch: leader_epoch.value(i),
                producer_id: producer_id.value(i),
                producer_epoch: producer_epoch.value(i),
                timestamp_type: WireTs::Creation,
                offset: offset.value(i),
                sequence: base_sequence.value(i).wrapping_add(delta),
                timestamp: timestamp.value(i),
                key: key_i.map(Bytes::copy_from_slice),
                value: value_i.map(Bytes::copy_from_slice),
                headers: h,
            });
        }
        if let Some(reason) = damage {
            // Its offsets as archived (the base is what grouped the rows).
            out.push(RebuiltBatch {
                base_offset: base,
                last_offset: batch_last.value(row),
                max_timestamp_ms: -1,
                bytes: Bytes::new(),
                damage: Some(reason),
            });
            row = end;
            continue;
        }
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: compression_of(attrs),
            },
        )
        .map_err(|e| Error::Codec(format!("rebuild batch at {base}: {e:#}")))?;
        let mut bytes = buf.to_vec();
        let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(-1);
        let header = BatchHeader::parse(&bytes)
            .ok_or_else(|| Error::Codec("rebuilt batch too short".to_string()))?;
        if header.last_offset() != batch_last.value(row) || header.base_offset != base {
            return Err(Error::Codec(format!(
                "rebuilt batch {}..={} differs from the archived {base}..={}",
                header.base_offset,
                header.last_offset(),
                batch_last.value(row)
            )));
        }
        let epoch = leader_epoch.value(row);
        let ts_kind = if log_append && attrs & ATTR_TIMESTAMP_TYPE != 0 {
            strata_log::TimestampType::LogAppendTime
        } else {
            strata_log::TimestampType::CreateTime
        };
        strata_log::batch::assign(&mut bytes, base, epoch, ts_kind, max_ts);
        out.push(RebuiltBatch {
            base_offset: base,
            last_offset: batch_last.value(row),
            max_timestamp_ms: max_ts,
            bytes: Bytes::from(bytes),
            damage: None,
        });
        row = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    /// The row checksum as archived objects were first written: one CRC append a field.
    /// Objects already in archives hold it, so the gathered digest must equal it.
    fn digest_field_by_field(r: &Row) -> u32 {
        fn opt(crc: u32, v: Option<&[u8]>) -> u32 {
            match v {
                None => crc32c::crc32c_append(crc, &[0]),
                Some(b) => {
                    let crc = crc32c::crc32c_append(crc, &[1]);
                    let crc = crc32c::crc32c_append(crc, &(b.len() as u64).to_le_bytes());
                    crc32c::crc32c_append(crc, b)
                }
            }
        }
        let mut crc = 0;
        for n in [
            r.offset,
            r.timestamp,
            r.producer_id,
            r.batch_base,
            r.batch_last,
        ] {
            crc = crc32c::crc32c_append(crc, &n.to_le_bytes());
        }
        for n in [r.base_sequence, r.leader_epoch] {
            crc = crc32c::crc32c_append(crc, &n.to_le_bytes());
        }
        for n in [r.producer_epoch, r.attributes] {
            crc = crc32c::crc32c_append(crc, &n.to_le_bytes());
        }
        crc = crc32c::crc32c_append(crc, &r.timestamp_type.to_le_bytes());
        crc = opt(crc, r.key);
        crc = opt(crc, r.value);
        crc = crc32c::crc32c_append(crc, &(r.headers.len() as u64).to_le_bytes());
        for (k, v) in &r.headers {
            crc = opt(crc, Some(k));
            crc = opt(crc, *v);
        }
        crc
    }

    #[test]
    fn the_row_digest_is_the_one_archived_objects_hold() {
        let big = vec![7u8; 5000];
        let sizes: [&[u8]; 6] = [b"", b"k", &[3; 47], &[4; 48], &[5; 49], &big];
        for (i, key) in sizes.iter().enumerate() {
            for value in sizes {
                let headers = match i % 3 {
                    0 => vec![],
                    1 => vec![(&b"h"[..], None)],
                    _ => vec![
                        (&b"trace"[..], Some(&value[..value.len().min(60)])),
                        (&big[..], None),
                    ],
                };
                let row = Row {
                    offset: 1 << 40,
                    timestamp: 1_700_000_000_000,
                    timestamp_type: 1,
                    key: (i != 1).then_some(*key),
                    value: Some(value),
                    headers,
                    producer_id: 42,
                    producer_epoch: 3,
                    base_sequence: 9,
                    leader_epoch: 5,
                    attributes: 0x10,
                    batch_base: 7,
                    batch_last: 99,
                };
                assert_eq!(
                    row_digest(&row),
                    digest_field_by_field(&row),
                    "key {i}, value of {} bytes",
                    value.len()
                );
            }
        }
    }

    fn record(
        offset: i64,
        ts: i64,
        key: Option<&str>,
        value: Option<&str>,
        pid: i64,
        seq: i32,
    ) -> Record {
        let mut headers = Vec::new();
        headers.push((
            StrBytes::from_static_str("h1"),
            Some(Bytes::from_static(b"x")),
        ));
        headers.push((StrBytes::from_static_str("nul"), None));
        headers.push((
            StrBytes::from_static_str("h1"),
            Some(Bytes::from_static(b"again")),
        ));
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: if pid >= 0 { 2 } else { -1 },
            timestamp_type: WireTs::Creation,
            offset,
            sequence: seq,
            timestamp: ts,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers,
        }
    }

    /// A segment of batches in every codec, with an idempotent and a LogAppendTime batch.
    fn segment() -> (Vec<u8>, Vec<Record>) {
        let mut seg = Vec::new();
        let mut all = Vec::new();
        let mut next = 0i64;
        let codecs = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ];
        for (i, c) in codecs.into_iter().enumerate() {
            let pid = if i == 2 { 77 } else { -1 };
            let recs: Vec<Record> = (0..4)
                .map(|j| {
                    let seq = if pid >= 0 { 10 + j } else { j - 1 };
                    let key = (j != 1).then(|| format!("k{i}{j}"));
                    let value = (j != 2).then(|| format!("v{i}{j}"));
                    record(
                        j as i64,
                        1000 + 10 * (i as i64) + j as i64,
                        key.as_deref(),
                        value.as_deref(),
                        pid,
                        seq,
                    )
                })
                .collect();
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut buf,
                &recs,
                &RecordEncodeOptions {
                    version: 2,
                    compression: c,
                },
            )
            .expect("encode");
            let mut bytes = buf.to_vec();
            let kind = if i == 4 {
                strata_log::TimestampType::LogAppendTime
            } else {
                strata_log::TimestampType::CreateTime
            };
            strata_log::batch::assign(&mut bytes, next, 3, kind, 5555);
            let mut b = Bytes::from(bytes.clone());
            all.extend(RecordBatchDecoder::decode(&mut b).expect("decode").records);
            seg.extend_from_slice(&bytes);
            next += 4;
        }
        (seg, all)
    }

    /// Read back the way the archive reader does: each row group as one Arrow batch.
    fn read_back(file: Vec<u8>) -> Vec<RebuiltBatch> {
        let file = Bytes::from(file);
        let meta = ParquetRecordBatchReaderBuilder::try_new(file.clone())
            .expect("open")
            .metadata()
            .clone();
        let mut out = Vec::new();
        for (i, rg) in meta.row_groups().iter().enumerate() {
            let reader = ParquetRecordBatchReaderBuilder::try_new(file.clone())
                .expect("open")
                .with_row_groups(vec![i])
                .with_batch_size(rg.num_rows() as usize)
                .build()
                .expect("reader");
            for b in reader {
                out.extend(rebuild(&b.expect("read")).expect("rebuild"));
            }
        }
        out
    }

    #[test]
    fn batches_larger_than_a_row_group_stay_whole() {
        let mut seg = Vec::new();
        let mut next = 0i64;
        for _ in 0..4 {
            let recs: Vec<Record> = (0..7000)
                .map(|j| record(j, 1000, None, Some("v"), -1, j as i32 - 1))
                .collect();
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut buf,
                &recs,
                &RecordEncodeOptions {
                    version: 2,
                    compression: Compression::Lz4,
                },
            )
            .expect("encode");
            let mut bytes = buf.to_vec();
            strata_log::batch::assign(
                &mut bytes,
                next,
                0,
                strata_log::TimestampType::CreateTime,
                0,
            );
            seg.extend_from_slice(&bytes);
            next += 7000;
        }
        let (file, summary) = encode_segment(&seg).expect("encode");
        assert_eq!(summary.record_count, 28_000);
        let rebuilt = read_back(file);
        let bases: Vec<(i64, i64)> = rebuilt
            .iter()
            .map(|b| (b.base_offset, b.last_offset))
            .collect();
        assert_eq!(
            bases,
            [
                (0, 6999),
                (7000, 13_999),
                (14_000, 20_999),
                (21_000, 27_999)
            ]
        );
    }

    #[test]
    fn row_groups_after_the_first_reuse_its_key_and_value_buffers() {
        // Four batches of 7,000 rows: the first row group ends after the third.
        let mut seg = Vec::new();
        let mut sent = Vec::new();
        for b in 0..4i64 {
            let recs: Vec<Record> = (0..7000i64)
                .map(|j| {
                    let n = b * 7000 + j;
                    let text = format!("value {n:0>100}");
                    let key = (n % 3 != 0).then(|| format!("k{n}"));
                    let value = (n % 5 != 0).then_some(text.as_str());
                    record(j, 1000, key.as_deref(), value, -1, j as i32 - 1)
                })
                .collect();
            let mut buf = BytesMut::new();
            let options = RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            };
            RecordBatchEncoder::encode(&mut buf, &recs, &options).expect("encode");
            let mut bytes = buf.to_vec();
            let ts = strata_log::TimestampType::CreateTime;
            strata_log::batch::assign(&mut bytes, b * 7000, 0, ts, 0);
            seg.extend_from_slice(&bytes);
            sent.extend(recs.into_iter().map(|r| (r.key, r.value)));
        }
        let mut encoder = SegmentEncoder::new().expect("encoder");
        assert_eq!(encoder.push(&seg).expect("push"), seg.len());
        // The last batch's 7,000 values went into the first row group's 21,000 values'
        // buffer, taken back from the writer (without it: a fresh one, a third the size).
        assert!(
            encoder.builders.value.values.capacity() >= 21_000 * 100,
            "{}",
            encoder.builders.value.values.capacity()
        );
        assert!(encoder.builders.key.offsets.capacity() >= 21_000);
        let (file, summary) = encoder.finish().expect("finish");
        assert_eq!(summary.record_count, 28_000);
        let mut read = Vec::new();
        for batch in read_back(file) {
            let mut bytes = batch.bytes.clone();
            let set = RecordBatchDecoder::decode(&mut bytes).expect("decode");
            read.extend(set.records.into_iter().map(|r| (r.key, r.value)));
        }
        assert_eq!(read, sent);
    }

    #[test]
    fn a_segment_encoded_in_pieces_is_the_segment_encoded_whole() {
        let (seg, _) = segment();
        let (whole, summary) = encode_segment(&seg).expect("encode");
        for piece in [1, 7, 100, 4096, seg.len() / 3] {
            let mut encoder = SegmentEncoder::new().expect("encoder");
            let mut pending: Vec<u8> = Vec::new();
            for chunk in seg.chunks(piece) {
                pending.extend_from_slice(chunk);
                let used = encoder.push(&pending).expect("push");
                pending.drain(..used);
            }
            assert!(pending.is_empty(), "{} bytes left over", pending.len());
            let (file, s) = encoder.finish().expect("finish");
            assert_eq!(s, summary, "pieces of {piece} bytes");
            assert_eq!(file, whole, "pieces of {piece} bytes");
        }
        let mut cut = SegmentEncoder::new().expect("encoder");
        let used = cut.push(&seg[..seg.len() - 1]).expect("push");
        assert!(
            used < seg.len() - 1,
            "a partial last batch is left for the next piece"
        );
        assert!(encode_segment(&seg[..seg.len() - 1]).is_err());
    }

    #[test]
    fn segments_round_trip_through_parquet() {
        let (seg, original) = segment();
        let (file, summary) = encode_segment(&seg).expect("encode");
        assert_eq!(
            (
                summary.first_offset,
                summary.last_offset,
                summary.record_count
            ),
            (0, 19, 20)
        );
        let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file))
            .expect("open")
            .build()
            .expect("reader");
        let mut rebuilt = Vec::new();
        for b in reader {
            rebuilt.extend(rebuild(&b.expect("read")).expect("rebuild"));
        }
        assert_eq!(rebuilt.len(), 5, "one batch per original batch");
        let bytes: Vec<u8> = rebuilt.iter().flat_map(|b| b.bytes.to_vec()).collect();
        let mut headers_seen = Vec::new();
        for (h, batch) in BatchIter::new(&bytes) {
            h.verify(batch).expect("valid CRC");
            headers_seen.push(h);
        }
        assert!(headers_seen[4].is_log_append_time());
        assert_eq!(headers_seen[4].max_timestamp, 5555);
        assert_eq!(headers_seen[2].producer_id, 77);
        assert_eq!(headers_seen[2].base_sequence, 10);
        assert_eq!(headers_seen[1].compression_code(), 1);
        // Records of a LogAppendTime batch carry the append time, whatever they were sent with.
        let mut original = original;
        for r in original.iter_mut().skip(16) {
            r.timestamp = 5555;
        }
        let mut b = Bytes::from(bytes);
        let decoded: Vec<Record> = RecordBatchDecoder::decode_all(&mut b)
            .expect("decode")
            .into_iter()
            .flat_map(|s| s.records)
            .collect();
        assert_eq!(decoded, original);
    }
}
