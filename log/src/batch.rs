//! Kafka RecordBatch v2 headers: parsing, validation of produced batches, and the two
//! header fields the broker rewrites (base offset and partition leader epoch).
//!
//! The batch bytes are stored exactly as the producer sent them except for those two
//! fields, which lie outside the CRC, and, for `LogAppendTime` topics, the attributes and
//! max timestamp, after which the CRC is recomputed. Records are decoded (through the
//! `kafka-protocol` crate) only to validate them and to answer timestamp look-ups.

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};

use crate::error::{Error, Result};

/// Bytes before the records in a v2 batch.
pub const HEADER_BYTES: usize = 61;
/// Bytes of `baseOffset` + `batchLength`, the part not counted by `batchLength`.
pub const LOG_OVERHEAD: usize = 12;

const BASE_OFFSET: usize = 0;
const BATCH_LENGTH: usize = 8;
const LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const BASE_TIMESTAMP: usize = 27;
const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORD_COUNT: usize = 57;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The fixed-size header of one record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Length of the batch after the `batchLength` field.
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Parses the header at the start of `bytes`, which must hold at least
    /// [`HEADER_BYTES`]; says nothing yet about whether the batch is valid.
    pub fn parse(bytes: &[u8]) -> Option<BatchHeader> {
        if bytes.len() < HEADER_BYTES {
            return None;
        }
        Some(BatchHeader {
            base_offset: i64_at(bytes, BASE_OFFSET),
            batch_length: i32_at(bytes, BATCH_LENGTH),
            partition_leader_epoch: i32_at(bytes, LEADER_EPOCH),
            magic: bytes[MAGIC] as i8,
            crc: u32::from_be_bytes([bytes[CRC], bytes[CRC + 1], bytes[CRC + 2], bytes[CRC + 3]]),
            attributes: i16_at(bytes, ATTRIBUTES),
            last_offset_delta: i32_at(bytes, LAST_OFFSET_DELTA),
            base_timestamp: i64_at(bytes, BASE_TIMESTAMP),
            max_timestamp: i64_at(bytes, MAX_TIMESTAMP),
            producer_id: i64_at(bytes, PRODUCER_ID),
            producer_epoch: i16_at(bytes, PRODUCER_EPOCH),
            base_sequence: i32_at(bytes, BASE_SEQUENCE),
            record_count: i32_at(bytes, RECORD_COUNT),
        })
    }

    /// Total bytes of the batch on the wire and on disk.
    pub fn total_bytes(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    pub fn compression_code(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_TIMESTAMP_TYPE != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Checks the parts of the header that a torn or corrupted write would break:
    /// length, magic and CRC of `bytes`, which must be exactly this batch.
    pub fn verify(&self, bytes: &[u8]) -> Result<()> {
        if self.batch_length < (HEADER_BYTES - LOG_OVERHEAD) as i32 {
            return Err(Error::corrupt(format!(
                "batch length {} is too small",
                self.batch_length
            )));
        }
        if bytes.len() != self.total_bytes() {
            return Err(Error::corrupt(format!(
                "batch length {} does not match the {} bytes given",
                self.batch_length,
                bytes.len() - LOG_OVERHEAD.min(bytes.len())
            )));
        }
        if self.magic != 2 {
            return Err(Error::corrupt(format!(
                "unsupported record batch magic {}",
                self.magic
            )));
        }
        let actual = crc32c::crc32c(&bytes[ATTRIBUTES..]);
        if actual != self.crc {
            return Err(Error::corrupt(format!(
                "CRC mismatch: header says {:#010x}, content has {actual:#010x}",
                self.crc
            )));
        }
        if self.last_offset_delta < 0 || self.record_count < 0 {
            return Err(Error::corrupt(
                "negative record count or offset delta".to_string(),
            ));
        }
        Ok(())
    }
}

/// Splits a buffer of concatenated batches into `(header, bytes)` pairs. Stops at the first
/// incomplete batch; [`BatchIter::remainder`] then says how many bytes were left over.
pub struct BatchIter<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> BatchIter<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        BatchIter { bytes, position: 0 }
    }

    /// Position of the next batch in the buffer.
    pub fn position(&self) -> usize {
        self.position
    }

    /// Bytes after the last complete batch.
    pub fn remainder(&self) -> usize {
        self.bytes.len() - self.position
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = (BatchHeader, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.bytes[self.position..];
        let header = BatchHeader::parse(rest)?;
        if header.batch_length < 0 {
            return None;
        }
        let total = header.total_bytes();
        if total < HEADER_BYTES || rest.len() < total {
            return None;
        }
        self.position += total;
        Some((header, &rest[..total]))
    }
}

/// What a validated, offset-assigned batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSummary {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub record_count: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// How the topic stamps record timestamps (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// Validates one produced batch completely (header, CRC, every record, offsets inside the
/// batch) without changing it. `bytes` must be exactly one batch.
pub fn validate_produced(bytes: &[u8], max_message_bytes: usize) -> Result<BatchHeader> {
    validate_produced_for(bytes, max_message_bytes, false)
}

/// [`validate_produced`], and with `keys_required` (compacted topics) every record must
/// have a key: otherwise [`Error::RecordsWithoutKey`] names each one, by its index in
/// the batch, as Kafka does.
pub fn validate_produced_for(
    bytes: &[u8],
    max_message_bytes: usize,
    keys_required: bool,
) -> Result<BatchHeader> {
    validate(bytes, max_message_bytes, keys_required, || {
        decode_bounded(&Bytes::copy_from_slice(bytes), MAX_DECOMPRESSED_BYTES)
    })
}

/// [`validate_produced_for`] of a batch the caller holds as [`Bytes`] (a slice of the
/// request frame): its records are decoded from it without copying it, and a compressed
/// batch is refused ([`Error::DecompressedTooLarge`]) as soon as it decompresses to more
/// than `max_decompressed` bytes.
pub fn validate_shared(
    batch: &Bytes,
    max_message_bytes: usize,
    max_decompressed: usize,
    keys_required: bool,
) -> Result<BatchHeader> {
    validate(batch, max_message_bytes, keys_required, || {
        decode_bounded(batch, max_decompressed)
    })
}

fn validate(
    bytes: &[u8],
    max_message_bytes: usize,
    keys_required: bool,
    decode: impl FnOnce() -> Result<Vec<Record>>,
) -> Result<BatchHeader> {
    let header = BatchHeader::parse(bytes).ok_or_else(|| {
        Error::corrupt(format!(
            "{} bytes is too short for a record batch",
            bytes.len()
        ))
    })?;
    if bytes.len() > max_message_bytes {
        return Err(Error::BatchTooLarge {
            size: bytes.len(),
            max: max_message_bytes,
        });
    }
    header.verify(bytes)?;
    if header.is_control() {
        return Err(Error::InvalidRecord {
            reason: "clients may not produce control batches".to_string(),
        });
    }
    if header.record_count == 0 {
        return Err(Error::InvalidRecord {
            reason: "batch holds no records".to_string(),
        });
    }
    if i64::from(header.record_count) != i64::from(header.last_offset_delta) + 1 {
        return Err(Error::InvalidRecord {
            reason: format!(
                "record count {} does not match last offset delta {}",
                header.record_count, header.last_offset_delta
            ),
        });
    }
    let records = decode()?;
    if records.len() != header.record_count as usize {
        return Err(Error::InvalidRecord {
            reason: format!(
                "header counts {} records, batch holds {}",
                header.record_count,
                records.len()
            ),
        });
    }
    for (i, record) in records.iter().enumerate() {
        if record.offset != header.base_offset + i as i64 {
            return Err(Error::InvalidRecord {
                reason: format!(
                    "record {i} has offset delta {}",
                    record.offset - header.base_offset
                ),
            });
        }
    }
    if keys_required {
        let keyless: Vec<i32> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.key.is_none())
            .map(|(i, _)| i as i32)
            .collect();
        if !keyless.is_empty() {
            return Err(Error::RecordsWithoutKey { records: keyless });
        }
    }
    Ok(header)
}

/// Decodes the records of one batch (decompressing them) from a copy of `bytes`.
pub fn decode_records(bytes: &[u8]) -> Result<Vec<Record>> {
    decode_shared(&Bytes::copy_from_slice(bytes))
}

/// Decodes the records of one batch (decompressing them); the keys, values and headers
/// of an uncompressed batch are slices of `batch`, not copies.
pub fn decode_shared(batch: &Bytes) -> Result<Vec<Record>> {
    let mut buf = batch.clone();
    let set = RecordBatchDecoder::decode(&mut buf)
        .map_err(|e| Error::corrupt(format!("cannot decode records: {e:#}")))?;
    Ok(set.records)
}

/// The default bound on what one produced batch may decompress to: Kafka's default
/// `socket.request.max.bytes`, the agent's default `max_request_bytes`.
pub const MAX_DECOMPRESSED_BYTES: usize = 100 * 1024 * 1024;

/// [`decode_shared`], decompressing a compressed batch into at most `max_decompressed`
/// bytes: a batch of extreme compression ratio (a "compression bomb") is refused with
/// [`Error::DecompressedTooLarge`] once that much has come out, never held whole.
pub fn decode_bounded(batch: &Bytes, max_decompressed: usize) -> Result<Vec<Record>> {
    let mut buf = batch.clone();
    let bounded =
        |records: &mut Bytes, compression| decompress(records, compression, max_decompressed);
    let set = RecordBatchDecoder::decode_with_custom_compression(&mut buf, Some(bounded)).map_err(
        |e| match e.downcast_ref::<TooLarge>() {
            Some(TooLarge) => Error::DecompressedTooLarge {
                max: max_decompressed,
            },
            None => Error::corrupt(format!("cannot decode records: {e:#}")),
        },
    )?;
    Ok(set.records)
}

/// What [`decompress`] fails with past its bound.
#[derive(Debug)]
struct TooLarge;

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("decompresses past its bound")
    }
}

impl std::error::Error for TooLarge {}

/// Decompresses the records of a batch, reading at most `max` bytes out of the codec
/// (and one more, which tells that there are more). Gzip, zstd and LZ4 are streams, read
/// through their crates; Kafka's snappy (snappy-java's framing, or one raw block)
/// declares its lengths, which are added up before anything is decompressed.
fn decompress(records: &mut Bytes, compression: Compression, max: usize) -> anyhow::Result<Bytes> {
    use bytes::Buf;
    use kafka_protocol::compression::{Decompressor, Snappy};
    use std::io::Read;
    let input = records.clone().reader();
    let mut out = Vec::new();
    let limit = max as u64 + 1;
    match compression {
        Compression::None => return Ok(records.clone()),
        Compression::Gzip => {
            flate2::read::MultiGzDecoder::new(input)
                .take(limit)
                .read_to_end(&mut out)?;
        }
        Compression::Zstd => {
            zstd::stream::read::Decoder::new(input)?
                .take(limit)
                .read_to_end(&mut out)?;
        }
        Compression::Lz4 => {
            lz4::Decoder::new(input)?
                .take(limit)
                .read_to_end(&mut out)?;
        }
        Compression::Snappy => {
            if snappy_length(records)? > max {
                return Err(TooLarge.into());
            }
            return Snappy::decompress(records, |b| Ok(b.clone()));
        }
    }
    if out.len() > max {
        return Err(TooLarge.into());
    }
    Ok(out.into())
}

/// The length a snappy payload declares it decompresses to. Kafka's producers frame it
/// as snappy-java does (a magic header, then blocks each after its length), or send one
/// raw snappy block.
fn snappy_length(payload: &[u8]) -> anyhow::Result<usize> {
    const XERIAL_MAGIC: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
    let Some(mut rest) = payload.strip_prefix(XERIAL_MAGIC) else {
        return Ok(snap::raw::decompress_len(payload)?);
    };
    let mut total = 0usize;
    while let Some((len, after)) = rest.split_first_chunk::<4>() {
        let len = u32::from_be_bytes(*len) as usize;
        anyhow::ensure!(after.len() >= len, "a snappy block runs past the batch");
        let (block, next) = after.split_at(len);
        total = total.saturating_add(snap::raw::decompress_len(block)?);
        rest = next;
    }
    anyhow::ensure!(rest.is_empty(), "a snappy block length is cut short");
    Ok(total)
}

/// Stamps a validated batch for the log: its base offset, the leader epoch, and for
/// `LogAppendTime` topics the append time (which changes the CRC, so it is recomputed).
pub fn assign(
    bytes: &mut [u8],
    base_offset: i64,
    leader_epoch: i32,
    timestamp_type: TimestampType,
    now_ms: i64,
) -> BatchSummary {
    let (head, records) = bytes
        .split_first_chunk_mut::<HEADER_BYTES>()
        .expect("a validated batch is at least a header long");
    stamp(
        head,
        records,
        base_offset,
        leader_epoch,
        timestamp_type,
        now_ms,
    )
}

/// [`assign`] on a copy of the batch's header (`head`, its first [`HEADER_BYTES`]) with
/// the records that follow it left where they are: only read, for the CRC.
pub fn stamp(
    head: &mut [u8; HEADER_BYTES],
    records: &[u8],
    base_offset: i64,
    leader_epoch: i32,
    timestamp_type: TimestampType,
    now_ms: i64,
) -> BatchSummary {
    head[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    head[LEADER_EPOCH..LEADER_EPOCH + 4].copy_from_slice(&leader_epoch.to_be_bytes());
    if timestamp_type == TimestampType::LogAppendTime {
        let attributes = i16_at(head, ATTRIBUTES) | ATTR_TIMESTAMP_TYPE;
        head[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
        head[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head[ATTRIBUTES..]), records);
        head[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }
    let header = BatchHeader::parse(head).expect("a header");
    BatchSummary {
        base_offset,
        last_offset: header.last_offset(),
        max_timestamp: header.max_timestamp,
        record_count: header.record_count,
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        base_sequence: header.base_sequence,
    }
}

/// The first record in the batch whose timestamp is at or after `target_ms`, as
/// `(offset, timestamp)`.
pub fn first_record_at_or_after(bytes: &[u8], target_ms: i64) -> Result<Option<(i64, i64)>> {
    let header =
        BatchHeader::parse(bytes).ok_or_else(|| Error::corrupt("short batch".to_string()))?;
    if header.is_log_append_time() {
        return Ok((header.max_timestamp >= target_ms)
            .then_some((header.base_offset, header.max_timestamp)));
    }
    Ok(decode_records(bytes)?
        .into_iter()
        .find(|r| r.timestamp >= target_ms)
        .map(|r| (r.offset, r.timestamp)))
}

/// The record holding the batch's maximum timestamp, as `(offset, timestamp)`.
pub fn record_with_max_timestamp(bytes: &[u8]) -> Result<Option<(i64, i64)>> {
    let header =
        BatchHeader::parse(bytes).ok_or_else(|| Error::corrupt("short batch".to_string()))?;
    if header.is_log_append_time() {
        return Ok(Some((header.base_offset, header.max_timestamp)));
    }
    let records = decode_records(bytes)?;
    let mut best: Option<(i64, i64)> = None;
    for r in records {
        if best.is_none_or(|(_, ts)| r.timestamp > ts) {
            best = Some((r.offset, r.timestamp));
        }
    }
    Ok(best)
}

/// A record as a non-idempotent producer sends it (no producer id, no headers), at
/// `offset` of its batch: for building batches in tests and benchmarks. Its sequence
/// follows on from -1, which keeps records of consecutive offsets in one batch (the
/// encoder starts a new one unless sequences follow on) with base sequence -1.
pub fn plain_record(
    offset: i64,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset,
        sequence: offset as i32 - 1,
        timestamp,
        key,
        value,
        headers: Vec::new(),
    }
}

/// Encodes `records` as v2 batches (one, where their fields allow), as a producer would
/// send them; for tests and benchmarks.
pub fn encode_records(
    records: &[Record],
    compression: kafka_protocol::records::Compression,
) -> Vec<u8> {
    use kafka_protocol::records::{RecordBatchEncoder, RecordEncodeOptions};
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encoding records in memory cannot fail");
    buf.to_vec()
}

/// A batch of `n` records with `value_bytes`-byte values (keys `k0`, `k1`, …, one header
/// each) and timestamps `ts0, ts0 + 1, …`, as a producer would send it; for benchmarks
/// and tests.
pub fn example_batch(
    n: usize,
    value_bytes: usize,
    ts0: i64,
    compression: kafka_protocol::records::Compression,
) -> Vec<u8> {
    use kafka_protocol::protocol::StrBytes;
    let value = Bytes::from(vec![b'v'; value_bytes]);
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            headers: vec![(
                StrBytes::from_static_str("h"),
                Some(Bytes::from_static(b"v")),
            )],
            ..plain_record(
                i as i64,
                ts0 + i as i64,
                Some(Bytes::from(format!("k{i}"))),
                Some(value.clone()),
            )
        })
        .collect();
    encode_records(&records, compression)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};
    use proptest::prelude::*;

    pub(crate) fn record(offset: i64, ts: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Record {
        Record {
            headers: vec![(
                StrBytes::from_static_str("h"),
                Some(Bytes::from_static(b"v")),
            )],
            ..plain_record(
                offset,
                ts,
                key.map(Bytes::copy_from_slice),
                value.map(Bytes::copy_from_slice),
            )
        }
    }

    /// Encodes `n` records starting at offset 0 with timestamps `ts0, ts0+1, ...`.
    pub(crate) fn encode_batch(n: usize, ts0: i64, compression: Compression) -> Vec<u8> {
        let records: Vec<Record> = (0..n)
            .map(|i| {
                record(
                    i as i64,
                    ts0 + i as i64,
                    Some(format!("k{i}").as_bytes()),
                    Some(b"value"),
                )
            })
            .collect();
        encode_records(&records, compression)
    }

    #[test]
    fn accepts_every_codec() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let b = encode_batch(10, 1000, c);
            let h = validate_produced(&b, 1 << 20).expect("valid");
            assert_eq!(h.record_count, 10);
        }
    }

    #[test]
    fn rejects_bad_crc() {
        let mut b = encode_batch(3, 1000, Compression::None);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(matches!(
            validate_produced(&b, 1 << 20),
            Err(Error::CorruptBatch { .. })
        ));
    }

    #[test]
    fn rejects_oversized() {
        let b = encode_batch(3, 1000, Compression::None);
        assert!(matches!(
            validate_produced(&b, 10),
            Err(Error::BatchTooLarge { .. })
        ));
    }

    /// A compressed batch is decompressed into at most the bound it is given: one record
    /// of a mebibyte of one byte repeated (kilobytes compressed, in every codec) decodes
    /// under a 2 MiB bound and is refused under a 64 KiB one, with the error that is
    /// MESSAGE_TOO_LARGE, not as a corrupt batch. An uncompressed batch is not held to
    /// it: its size is the frame's, bounded already.
    #[test]
    fn decompression_is_bounded() {
        for compression in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let b = Bytes::from(example_batch(1, 1 << 20, 1000, compression));
            assert!(b.len() < 64 << 10, "{compression:?}: {} bytes", b.len());
            let records = decode_bounded(&b, 2 << 20).expect("within the bound");
            let value = records[0].value.as_ref().expect("value");
            assert_eq!(value.len(), 1 << 20, "{compression:?}");
            match validate_shared(&b, 1 << 20, 64 << 10, false) {
                Err(Error::DecompressedTooLarge { max }) => assert_eq!(max, 64 << 10),
                other => panic!("{compression:?}: {other:?}"),
            }
        }
        let plain = Bytes::from(example_batch(1, 1 << 20, 1000, Compression::None));
        assert!(validate_shared(&plain, 2 << 20, 64 << 10, false).is_ok());
    }

    #[test]
    fn assign_keeps_crc_valid_for_log_append_time() {
        let mut b = encode_batch(3, 1000, Compression::None);
        let s = assign(&mut b, 42, 7, TimestampType::LogAppendTime, 99_999);
        assert_eq!(
            (s.base_offset, s.last_offset, s.max_timestamp),
            (42, 44, 99_999)
        );
        let h = BatchHeader::parse(&b).expect("header");
        h.verify(&b).expect("crc still valid");
        assert_eq!(h.partition_leader_epoch, 7);
        assert_eq!(
            first_record_at_or_after(&b, 5).expect("decode"),
            Some((42, 99_999))
        );
    }

    #[test]
    fn timestamp_lookup_within_batch() {
        let mut b = encode_batch(5, 1000, Compression::Zstd);
        assign(&mut b, 10, 0, TimestampType::CreateTime, 0);
        assert_eq!(
            first_record_at_or_after(&b, 1002).expect("decode"),
            Some((12, 1002))
        );
        assert_eq!(first_record_at_or_after(&b, 2000).expect("decode"), None);
        assert_eq!(
            record_with_max_timestamp(&b).expect("decode"),
            Some((14, 1004))
        );
    }

    /// A compacted topic takes only keyed records; each keyless one is named by its
    /// index in the batch (librdkafka's test 0011 expects INVALID_RECORD for each).
    #[test]
    fn keys_are_required_where_asked() {
        let records = vec![
            record(0, 1000, Some(b"k"), Some(b"v")),
            record(1, 1000, None, Some(b"v")),
            record(2, 1000, Some(b"k"), None),
            record(3, 1000, None, None),
        ];
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::Lz4,
            },
        )
        .expect("encode");
        assert!(validate_produced(&buf, 1 << 20).is_ok());
        match validate_produced_for(&buf, 1 << 20, true) {
            Err(Error::RecordsWithoutKey { records }) => assert_eq!(records, vec![1, 3]),
            other => panic!("keyless records accepted: {other:?}"),
        }
        let keyed = encode_batch(5, 1000, Compression::None);
        assert!(validate_produced_for(&keyed, 1 << 20, true).is_ok());
    }

    proptest! {
        /// Validation never panics, whatever the bytes, and anything it accepts carries
        /// the CRC of its own bytes.
        #[test]
        fn validation_total_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(h) = validate_produced(&bytes, 1 << 20) {
                prop_assert_eq!(crc32c::crc32c(&bytes[ATTRIBUTES..h.total_bytes()]), h.crc);
            }
        }

        /// A batch that is well framed (length and magic right) but whose CRC does not
        /// match its bytes is refused as corrupt, whatever the rest holds.
        #[test]
        fn wrong_crc_is_refused(
            body in proptest::collection::vec(any::<u8>(), HEADER_BYTES - ATTRIBUTES..400),
            crc in any::<u32>(),
        ) {
            let mut b = vec![0u8; ATTRIBUTES];
            b.extend_from_slice(&body);
            let len = (b.len() - LOG_OVERHEAD) as i32;
            b[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&len.to_be_bytes());
            b[MAGIC] = 2;
            prop_assume!(crc != crc32c::crc32c(&b[ATTRIBUTES..]));
            b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
            let refused = validate_produced(&b, 1 << 20);
            prop_assert!(matches!(refused, Err(Error::CorruptBatch { .. })), "{:?}", refused);
        }

        /// Flipping any bit of a valid batch after the offset/epoch fields is always caught.
        #[test]
        fn any_bit_flip_is_rejected(n in 1usize..20, bit in 0usize..10_000) {
            let mut b = encode_batch(n, 1000, Compression::None);
            let protected = b.len() - MAGIC;
            let at = MAGIC + (bit / 8) % protected;
            b[at] ^= 1 << (bit % 8);
            prop_assert!(validate_produced(&b, 1 << 20).is_err());
        }

        /// Flipping bytes inside the records of a batch whose CRC was then fixed up is
        /// either rejected or decodes to the declared number of records: never a panic.
        #[test]
        fn recrc_garbage_records_never_panic(n in 1usize..10, at in 0usize..1000, byte in any::<u8>()) {
            let mut b = encode_batch(n, 1000, Compression::None);
            let i = HEADER_BYTES + at % (b.len() - HEADER_BYTES);
            b[i] = byte;
            let crc = crc32c::crc32c(&b[ATTRIBUTES..]);
            b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
            if let Ok(h) = validate_produced(&b, 1 << 20) {
                prop_assert_eq!(decode_records(&b).expect("validated").len(), h.record_count as usize);
            }
        }
    }
}
