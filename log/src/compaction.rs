//! The mechanics of log compaction: reading the records of a sealed segment, writing a
//! copy that holds only the records a caller keeps (in their batches, at their
//! offsets), and the cleaner's checkpoint. What to keep is the caller's rule (strata's
//! is in `strata-compactor`); swapping a copy in is [`crate::PartitionLog::swap_compacted`].
//!
//! A batch keeps its producer id, epoch, leader epoch, codec and timestamp type; a
//! batch whose records all stay is copied byte for byte, one whose records all go is
//! dropped, and the others are re-encoded with the records kept (their base offset
//! becomes the first one kept; offsets never change). Control batches are kept as they
//! are. Reading and writing happen without the log's lock: sealed segments do not
//! change, except by a swap or a deletion, which the swap checks for.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::BytesMut;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

use crate::TimestampType;
use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::error::{Error, IoContext, Result};
use crate::segment::ClosedSegmentInfo;

/// The extension of a rewritten segment not swapped in yet (removed when a log opens).
pub const CLEANED: &str = "cleaned";
/// The cleaner's checkpoint in a partition's directory.
const CHECKPOINT: &str = "cleaner-checkpoint";

/// One record, as a keep rule sees it.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    /// A null value: a delete marker for its key.
    pub tombstone: bool,
    /// The record's batch is transactional, from this producer.
    pub transactional: bool,
    pub producer_id: i64,
}

/// A segment's rewritten copy, ready for [`crate::PartitionLog::swap_compacted`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub base_offset: i64,
    /// The size of the segment it was written from (the swap checks it has not changed).
    pub source_bytes: u64,
    pub path: PathBuf,
    pub bytes: u64,
    pub records_in: u64,
    pub records_kept: u64,
}

/// Calls `f` with every record of the sealed segment at `path`, in offset order, and
/// with each batch's header; control batches are skipped. Memory: one batch at a time.
pub fn for_each_record(path: &Path, mut f: impl FnMut(&BatchHeader, &Record)) -> Result<()> {
    for_each_batch(path, |header, bytes| {
        if header.is_control() {
            return Ok(());
        }
        for r in batch::decode_records(bytes)? {
            f(header, &r);
        }
        Ok(())
    })
}

fn for_each_batch(path: &Path, mut f: impl FnMut(&BatchHeader, &[u8]) -> Result<()>) -> Result<()> {
    let file = File::open(path).context("open segment", path)?;
    let size = file.metadata().context("stat segment", path)?.len();
    let mut position = 0u64;
    let mut header_buf = [0u8; HEADER_BYTES];
    let mut buf = Vec::new();
    while position + HEADER_BYTES as u64 <= size {
        file.read_exact_at(&mut header_buf, position)
            .context("read segment", path)?;
        let header = BatchHeader::parse(&header_buf)
            .ok_or_else(|| Error::corrupt("short batch header".to_string()))?;
        let total = header.total_bytes();
        if total < HEADER_BYTES || position + total as u64 > size {
            return Err(Error::CorruptSegment {
                path: path.to_path_buf(),
                reason: format!("impossible batch length at position {position}"),
            });
        }
        buf.resize(total, 0);
        file.read_exact_at(&mut buf, position)
            .context("read segment", path)?;
        header.verify(&buf)?;
        f(&header, &buf)?;
        position += total as u64;
    }
    Ok(())
}

fn compression_of(header: &BatchHeader) -> Compression {
    match header.compression_code() {
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        _ => Compression::None,
    }
}

/// Writes `<segment>.log.cleaned` beside `segment`, holding the records `keep` keeps
/// (asked once per record, in offset order), and fsyncs it.
pub fn rewrite_segment(
    segment: &ClosedSegmentInfo,
    mut keep: impl FnMut(&Seen) -> bool,
) -> Result<Rewritten> {
    let path = segment.path.with_extension(format!("log.{CLEANED}"));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .context("create cleaned segment", &path)?;
    let mut out = BufWriter::new(file);
    let (mut records_in, mut records_kept, mut bytes) = (0u64, 0u64, 0u64);
    for_each_batch(&segment.path, |header, batch_bytes| {
        let filtered = filter_batch(header, batch_bytes, &mut keep)?;
        records_in += filtered.records_in;
        records_kept += filtered.records_kept;
        if let Some(written) = filtered.bytes {
            out.write_all(&written)
                .context("write cleaned segment", &path)?;
            bytes += written.len() as u64;
        }
        Ok(())
    })?;
    let file = out.into_inner().map_err(|e| Error::Io {
        context: "write cleaned segment",
        path: path.clone(),
        source: e.into_error(),
    })?;
    file.sync_all().context("fsync cleaned segment", &path)?;
    Ok(Rewritten {
        base_offset: segment.base_offset,
        source_bytes: segment.size_bytes,
        path,
        bytes,
        records_in,
        records_kept,
    })
}

/// What [`filter_batch`] left of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    /// The batch as it stays (the same bytes if every record stays); `None` if none did.
    pub bytes: Option<Vec<u8>>,
    pub records_in: u64,
    pub records_kept: u64,
}

/// The records of one batch that `keep` keeps, as a batch: the same bytes when all stay,
/// none when none do, else re-encoded (see the module docs). Control batches stay.
pub fn filter_batch(
    header: &BatchHeader,
    batch_bytes: &[u8],
    mut keep: impl FnMut(&Seen) -> bool,
) -> Result<Filtered> {
    if header.is_control() {
        return Ok(Filtered {
            bytes: Some(batch_bytes.to_vec()),
            records_in: 0,
            records_kept: 0,
        });
    }
    let records = batch::decode_records(batch_bytes)?;
    let kept: Vec<Record> = records
        .iter()
        .filter(|r| {
            keep(&Seen {
                offset: r.offset,
                key: r.key.as_deref(),
                tombstone: r.value.is_none(),
                transactional: header.is_transactional(),
                producer_id: header.producer_id,
            })
        })
        .cloned()
        .collect();
    let bytes = if kept.len() == records.len() {
        Some(batch_bytes.to_vec())
    } else if kept.is_empty() {
        None
    } else {
        Some(reencode(header, &kept)?)
    };
    Ok(Filtered {
        bytes,
        records_in: records.len() as u64,
        records_kept: kept.len() as u64,
    })
}

/// Encodes `kept` (records of the batch `header` describes) as one batch with the same
/// producer fields, codec, leader epoch and timestamp type.
fn reencode(header: &BatchHeader, kept: &[Record]) -> Result<Vec<u8>> {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        kept,
        &RecordEncodeOptions {
            version: 2,
            compression: compression_of(header),
        },
    )
    .map_err(|e| Error::corrupt(format!("re-encode batch at {}: {e:#}", header.base_offset)))?;
    let mut bytes = buf.to_vec();
    let (kind, max_ts) = if header.is_log_append_time() {
        (TimestampType::LogAppendTime, header.max_timestamp)
    } else {
        (TimestampType::CreateTime, -1)
    };
    let first = kept.first().map_or(header.base_offset, |r| r.offset);
    batch::assign(
        &mut bytes,
        first,
        header.partition_leader_epoch,
        kind,
        max_ts,
    );
    let check = BatchHeader::parse(&bytes)
        .ok_or_else(|| Error::corrupt("re-encoded batch too short".to_string()))?;
    let last = kept.last().map_or(first, |r| r.offset);
    if check.last_offset() != last || check.producer_id != header.producer_id {
        return Err(Error::corrupt(format!(
            "re-encoded batch {}..={} differs from its records {first}..={last}",
            check.base_offset,
            check.last_offset()
        )));
    }
    Ok(bytes)
}

/// What the cleaner remembers of a partition between passes (a file in its directory;
/// each replica cleans its own log, as in Kafka).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Everything below was cleaned at least once: the dirty part starts here.
    pub first_dirty: i64,
    /// `(upto, at_ms)`: a pass at `at_ms` cleaned everything below `upto`, oldest
    /// first. A tombstone's delete horizon counts from the first pass that covered it.
    pub passes: Vec<(i64, i64)>,
    /// When the last pass ran (-1: never), whether it moved `first_dirty` or not.
    pub last_pass_ms: i64,
}

/// Passes remembered at most; older ones are merged, which only moves horizons later.
const PASSES: usize = 64;

impl Default for Checkpoint {
    fn default() -> Self {
        Checkpoint {
            first_dirty: 0,
            passes: Vec::new(),
            last_pass_ms: -1,
        }
    }
}

impl Checkpoint {
    /// The checkpoint in `dir`; none (clean nothing yet) if it is missing or unreadable.
    /// The file is text: `first_dirty <offset>`, `last_pass <at_ms>`, then
    /// `pass <upto> <at_ms>` per pass.
    pub fn load(dir: &Path) -> Checkpoint {
        let Ok(text) = fs::read_to_string(dir.join(CHECKPOINT)) else {
            return Checkpoint::default();
        };
        let mut c = Checkpoint::default();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["first_dirty", n] => match n.parse() {
                    Ok(n) => c.first_dirty = n,
                    Err(_) => return Checkpoint::default(),
                },
                ["last_pass", n] => match n.parse() {
                    Ok(n) => c.last_pass_ms = n,
                    Err(_) => return Checkpoint::default(),
                },
                ["pass", upto, at] => match (upto.parse(), at.parse()) {
                    (Ok(u), Ok(t)) => c.passes.push((u, t)),
                    _ => return Checkpoint::default(),
                },
                _ => return Checkpoint::default(),
            }
        }
        c
    }

    /// Written to a temporary file, fsynced, renamed over the old one.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join(CHECKPOINT);
        let tmp = dir.join(format!("{CHECKPOINT}.tmp"));
        let mut text = format!(
            "first_dirty {}\nlast_pass {}\n",
            self.first_dirty, self.last_pass_ms
        );
        for (upto, at) in &self.passes {
            text.push_str(&format!("pass {upto} {at}\n"));
        }
        let bytes = text.into_bytes();
        let mut f = File::create(&tmp).context("create cleaner checkpoint", &tmp)?;
        f.write_all(&bytes)
            .context("write cleaner checkpoint", &tmp)?;
        f.sync_all().context("fsync cleaner checkpoint", &tmp)?;
        fs::rename(&tmp, &path).context("rename cleaner checkpoint", &path)?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .context("fsync log directory", dir)
    }

    /// Removes the checkpoint (the log was emptied and started again).
    pub fn remove(dir: &Path) -> Result<()> {
        match fs::remove_file(dir.join(CHECKPOINT)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).context("remove cleaner checkpoint", dir)
            }
            _ => Ok(()),
        }
    }

    /// When the first pass that covered `offset` ran, if one did.
    pub fn first_cleaned_ms(&self, offset: i64) -> Option<i64> {
        self.passes
            .iter()
            .find(|(upto, _)| offset < *upto)
            .map(|(_, at)| *at)
    }

    /// Notes a pass at `at_ms` that cleaned everything below `upto`.
    pub fn passed(&mut self, upto: i64, at_ms: i64) {
        self.last_pass_ms = at_ms;
        self.first_dirty = self.first_dirty.max(upto);
        if self.passes.last().is_none_or(|(u, _)| *u < upto) {
            self.passes.push((upto, at_ms));
        }
        while self.passes.len() > PASSES {
            // (u0, t0), (u1, t1) -> (u1, t1): offsets below u0 get the later time.
            self.passes.remove(0);
        }
    }
}
