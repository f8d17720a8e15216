//! The sparse offset index and time index of one segment.
//!
//! An entry is taken at the first batch of a segment and then at the first batch after
//! every `index.interval.bytes`. In memory both indexes are one vector; on disk they are
//! two files written whole when the segment is sealed (after its data was fsynced):
//!
//! - `{base}.index`: `(relative_offset: u32, position: u32)` per entry, big-endian;
//! - `{base}.timeindex`: `(max_timestamp_before: i64, relative_offset: u32)` per entry,
//!   then one trailer `(segment_max_timestamp: i64, next_offset - base: u32,
//!   segment_bytes: u64, crc32c: u32)`, the CRC over both files' bytes before it.
//!
//! The active segment has no index files: it is scanned on start anyway. Indexes are
//! derived data; a missing, torn (CRC) or inconsistent file, or one that describes a
//! segment of another size, is rebuilt from the segment. (Files of the format before
//! the CRC fail that check, and are rebuilt once.)

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::error::{IoContext, Result};

/// One index entry: a batch start and what lies before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// The batch's base offset minus the segment's base offset.
    pub relative_offset: u32,
    /// Byte position of the batch in the segment file.
    pub position: u32,
    /// The largest batch max-timestamp of all batches before this one in the segment
    /// (`i64::MIN` for none): every batch before `position` has a smaller timestamp.
    pub max_timestamp_before: i64,
}

/// What the closing trailer of a time index records about its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentTrailer {
    pub max_timestamp: i64,
    pub next_relative_offset: u32,
    /// The segment file's size: an index describes only the file it was written for.
    pub segment_bytes: u64,
}

const OFFSET_ENTRY: usize = 8;
const TIME_ENTRY: usize = 12;
/// max timestamp, next relative offset, segment bytes, CRC.
const TRAILER: usize = 8 + 4 + 8 + 4;

/// Writes both index files of a closed segment, without fsyncing them; returns them
/// for the caller to fsync.
pub fn write(
    offset_path: &Path,
    time_path: &Path,
    entries: &[IndexEntry],
    trailer: SegmentTrailer,
) -> Result<[fs::File; 2]> {
    let mut offsets = Vec::with_capacity(entries.len() * OFFSET_ENTRY);
    let mut times = Vec::with_capacity((entries.len() + 1) * TIME_ENTRY);
    for e in entries {
        offsets.extend_from_slice(&e.relative_offset.to_be_bytes());
        offsets.extend_from_slice(&e.position.to_be_bytes());
        times.extend_from_slice(&e.max_timestamp_before.to_be_bytes());
        times.extend_from_slice(&e.relative_offset.to_be_bytes());
    }
    times.extend_from_slice(&trailer.max_timestamp.to_be_bytes());
    times.extend_from_slice(&trailer.next_relative_offset.to_be_bytes());
    times.extend_from_slice(&trailer.segment_bytes.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&offsets), &times);
    times.extend_from_slice(&crc.to_be_bytes());
    let mut files = Vec::with_capacity(2);
    for (path, bytes) in [(offset_path, offsets), (time_path, times)] {
        let mut f = fs::File::create(path).context("create index", path)?;
        f.write_all(&bytes).context("write index", path)?;
        files.push(f);
    }
    let [offsets, times] = <[fs::File; 2]>::try_from(files).expect("two files");
    Ok([offsets, times])
}

/// Reads both index files; `None` when either is missing or the two disagree, in which
/// case the caller rebuilds them from the segment.
pub fn read(offset_path: &Path, time_path: &Path) -> Option<(Vec<IndexEntry>, SegmentTrailer)> {
    let offsets = fs::read(offset_path).ok()?;
    let times = fs::read(time_path).ok()?;
    if offsets.len() % OFFSET_ENTRY != 0 || times.len() < TRAILER {
        return None;
    }
    let n = offsets.len() / OFFSET_ENTRY;
    if times.len() != n * TIME_ENTRY + TRAILER || n == 0 {
        return None;
    }
    let (body, crc) = times.split_at(times.len() - 4);
    if crc32c::crc32c_append(crc32c::crc32c(&offsets), body).to_be_bytes() != crc {
        return None;
    }
    let u32_at = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let i64_at = |b: &[u8], at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        i64::from_be_bytes(a)
    };
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        let o = i * OFFSET_ENTRY;
        let t = i * TIME_ENTRY;
        let relative_offset = u32_at(&offsets, o);
        if u32_at(&times, t + 8) != relative_offset {
            return None;
        }
        entries.push(IndexEntry {
            relative_offset,
            position: u32_at(&offsets, o + 4),
            max_timestamp_before: i64_at(&times, t),
        });
    }
    let t = n * TIME_ENTRY;
    let trailer = SegmentTrailer {
        max_timestamp: i64_at(&times, t),
        next_relative_offset: u32_at(&times, t + 8),
        segment_bytes: i64_at(&times, t + 12) as u64,
    };
    Some((entries, trailer))
}

/// The entry to start scanning from for `relative_offset`: the last one at or before it.
pub fn lookup_offset(entries: &[IndexEntry], relative_offset: u32) -> Option<&IndexEntry> {
    let after = entries.partition_point(|e| e.relative_offset <= relative_offset);
    after.checked_sub(1).map(|i| &entries[i])
}

/// The entry to start scanning from for the first batch whose max timestamp reaches
/// `target_ms`: the last entry before which every batch is older than the target.
pub fn lookup_timestamp(entries: &[IndexEntry], target_ms: i64) -> Option<&IndexEntry> {
    let after = entries.partition_point(|e| e.max_timestamp_before < target_ms);
    after.checked_sub(1).map(|i| &entries[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<IndexEntry> {
        vec![
            IndexEntry {
                relative_offset: 0,
                position: 0,
                max_timestamp_before: i64::MIN,
            },
            IndexEntry {
                relative_offset: 10,
                position: 4100,
                max_timestamp_before: 100,
            },
            IndexEntry {
                relative_offset: 20,
                position: 8300,
                max_timestamp_before: 200,
            },
        ]
    }

    #[test]
    fn round_trips_through_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (o, t) = (dir.path().join("0.index"), dir.path().join("0.timeindex"));
        let trailer = SegmentTrailer {
            max_timestamp: 300,
            next_relative_offset: 30,
            segment_bytes: 9000,
        };
        write(&o, &t, &entries(), trailer).expect("write");
        assert_eq!(read(&o, &t), Some((entries(), trailer)));
        // A torn write (one byte of an entry flipped) fails the CRC.
        let mut times = fs::read(&t).expect("read");
        times[3] ^= 0x10;
        fs::write(&t, &times).expect("damage");
        assert_eq!(read(&o, &t), None);
        fs::write(&t, b"short").expect("damage");
        assert_eq!(read(&o, &t), None);
    }

    #[test]
    fn lookups() {
        let e = entries();
        assert_eq!(lookup_offset(&e, 0).map(|e| e.position), Some(0));
        assert_eq!(lookup_offset(&e, 15).map(|e| e.position), Some(4100));
        assert_eq!(lookup_offset(&e, 99).map(|e| e.position), Some(8300));
        assert_eq!(lookup_timestamp(&e, 50).map(|e| e.position), Some(0));
        assert_eq!(lookup_timestamp(&e, 100).map(|e| e.position), Some(0));
        assert_eq!(lookup_timestamp(&e, 101).map(|e| e.position), Some(4100));
        assert_eq!(lookup_timestamp(&e, 1000).map(|e| e.position), Some(8300));
    }
}
