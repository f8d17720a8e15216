//! One segment: a file of record batches named by its base offset, and its sparse index.
//!
//! Appends go to the end of the file at a known position; a failed write is cut back off,
//! so the file never holds a partial batch that the segment counts. Reads use positional
//! reads and never see past the size the segment had when the read started.
//!
//! Only the active segment keeps its file open. A sealed segment closes it and opens it
//! again for each read, so an agent's open files grow with its partitions, not with
//! their segments (see `docs/log-format.md`, "Open files").

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{BatchHeader, HEADER_BYTES};
use crate::error::{Error, IoContext, Result};
use crate::index::{self, IndexEntry, SegmentTrailer};

/// A sealed segment, as tiering and retention see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedSegmentInfo {
    pub base_offset: i64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub size_bytes: u64,
    pub path: PathBuf,
}

/// Batches up to this size, given in parts ([`Segment::append_parts`]), are joined and
/// written with one call; larger ones with one call per part, rather than copied.
const ONE_WRITE_BYTES: usize = 64 * 1024;

/// Removes a file; one already gone is fine.
fn remove_if_present(path: PathBuf, context: &'static str) -> Result<()> {
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io {
            context,
            path,
            source,
        }),
    }
}

/// File name of a segment or index for `base_offset`, Kafka style (20 digits).
pub fn file_name(base_offset: i64, extension: &str) -> String {
    format!("{base_offset:020}.{extension}")
}

/// What scanning a segment file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Bytes of valid, contiguous batches from the start of the file.
    pub valid_bytes: u64,
    /// Bytes after them that were not a valid continuation (a torn or corrupt tail).
    pub invalid_bytes: u64,
    /// Why the scan stopped early, when it did.
    pub reason: Option<&'static str>,
    /// Whether the segment was opened from its index files (sealed) rather than scanned.
    pub from_index: bool,
}

#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    path: PathBuf,
    /// Open while the segment is active; `None` once sealed (reads open it anew).
    file: Option<Arc<File>>,
    size: u64,
    next_offset: i64,
    max_timestamp: i64,
    index: Vec<IndexEntry>,
    bytes_since_index: u64,
    index_interval_bytes: u64,
    created_ms: i64,
}

impl Segment {
    /// Creates an empty segment file; fails if one exists.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<Segment> {
        let path = dir.join(file_name(base_offset, "log"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .context("create segment", &path)?;
        Ok(Segment::empty(
            base_offset,
            path,
            file,
            index_interval_bytes,
            now_ms,
        ))
    }

    /// A segment with nothing counted yet (before appends or a scan fill it in).
    fn empty(
        base_offset: i64,
        path: PathBuf,
        file: File,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Segment {
        Segment {
            base_offset,
            path,
            file: Some(Arc::new(file)),
            size: 0,
            next_offset: base_offset,
            max_timestamp: i64::MIN,
            index: Vec::new(),
            bytes_since_index: 0,
            index_interval_bytes,
            created_ms: now_ms,
        }
    }

    /// Opens a segment file. A closed segment is trusted up to its index trailer (it was
    /// fsynced before the next segment was created); the active one (`scan_all`) is
    /// scanned batch by batch, and a torn or corrupt tail is cut off and reported.
    pub fn open(
        path: &Path,
        base_offset: i64,
        index_interval_bytes: u64,
        scan_all: bool,
        now_ms: i64,
    ) -> Result<(Segment, ScanOutcome)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .context("open segment", path)?;
        let file_size = file.metadata().context("stat segment", path)?.len();
        let mut segment = Segment::empty(
            base_offset,
            path.to_path_buf(),
            file,
            index_interval_bytes,
            now_ms,
        );
        if !scan_all
            && let Some((entries, trailer)) = index::read(
                &segment.index_path("index"),
                &segment.index_path("timeindex"),
            )
            && entries
                .last()
                .is_some_and(|e| u64::from(e.position) < file_size)
            && trailer.segment_bytes == file_size
        {
            segment.index = entries;
            segment.size = file_size;
            segment.next_offset = base_offset + i64::from(trailer.next_relative_offset);
            segment.max_timestamp = trailer.max_timestamp;
            segment.file = None;
            return Ok((
                segment,
                ScanOutcome {
                    valid_bytes: file_size,
                    invalid_bytes: 0,
                    reason: None,
                    from_index: true,
                },
            ));
        }
        let outcome = segment.scan(file_size)?;
        if outcome.invalid_bytes > 0 {
            if !scan_all {
                return Err(Error::CorruptSegment {
                    path: path.to_path_buf(),
                    reason: format!(
                        "closed segment has {} bad bytes after position {} ({})",
                        outcome.invalid_bytes,
                        outcome.valid_bytes,
                        outcome.reason.unwrap_or("unknown")
                    ),
                });
            }
            let file = segment.handle()?;
            file.set_len(outcome.valid_bytes)
                .context("truncate torn tail of", path)?;
            file.sync_all().context("fsync truncated", path)?;
        }
        if !scan_all {
            segment.file = None;
        }
        Ok((segment, outcome))
    }

    /// The segment's file: the one held open while active, or for a sealed segment a
    /// handle opened now (closed again when the caller drops it).
    fn handle(&self) -> Result<Arc<File>> {
        match &self.file {
            Some(f) => Ok(Arc::clone(f)),
            None => OpenOptions::new()
                .read(true)
                .write(true)
                .open(&self.path)
                .map(Arc::new)
                .context("open segment", &self.path),
        }
    }

    /// Rebuilds the in-memory state by reading every batch header from the start.
    fn scan(&mut self, file_size: u64) -> Result<ScanOutcome> {
        let file = self.handle()?;
        let mut position = 0u64;
        let mut header_buf = [0u8; HEADER_BYTES];
        let mut batch_buf = Vec::new();
        let mut reason = None;
        while position < file_size {
            if file_size - position < HEADER_BYTES as u64 {
                reason = Some("short batch header");
                break;
            }
            file.read_exact_at(&mut header_buf, position)
                .context("read segment", &self.path)?;
            let Some(header) = BatchHeader::parse(&header_buf) else {
                reason = Some("short batch header");
                break;
            };
            let total = header.total_bytes() as u64;
            if header.batch_length < (HEADER_BYTES - 12) as i32 || position + total > file_size {
                reason = Some("short or impossible batch length");
                break;
            }
            // Offsets only rise; a compacted log has gaps between batches.
            if header.base_offset < self.next_offset {
                reason = Some("batch offset goes back");
                break;
            }
            batch_buf.resize(total as usize, 0);
            file.read_exact_at(&mut batch_buf, position)
                .context("read segment", &self.path)?;
            if header.verify(&batch_buf).is_err() {
                reason = Some("bad CRC or magic");
                break;
            }
            self.note_appended(&header, position, total);
            position += total;
        }
        Ok(ScanOutcome {
            valid_bytes: position,
            invalid_bytes: file_size - position,
            reason,
            from_index: false,
        })
    }

    fn note_appended(&mut self, header: &BatchHeader, position: u64, len: u64) {
        if self.index.is_empty() || self.bytes_since_index >= self.index_interval_bytes {
            self.index.push(IndexEntry {
                relative_offset: (header.base_offset - self.base_offset) as u32,
                position: position as u32,
                max_timestamp_before: self.max_timestamp,
            });
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += len;
        self.size = position + len;
        self.next_offset = header.next_offset();
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
    }

    /// Appends one batch whose offsets the caller already assigned to continue this
    /// segment. On a failed write the file is cut back to its previous size.
    pub fn append(&mut self, batch: &[u8]) -> Result<()> {
        self.append_parts(batch, &[])
    }

    /// [`Segment::append`] of a batch given in two parts, its header and the rest, so
    /// that a large batch need not be copied to change its header. Small batches are
    /// still written with one call.
    pub fn append_parts(&mut self, head: &[u8], rest: &[u8]) -> Result<()> {
        let header =
            BatchHeader::parse(head).ok_or_else(|| Error::corrupt("short batch".to_string()))?;
        debug_assert!(header.base_offset >= self.next_offset, "offsets only rise");
        let position = self.size;
        let len = (head.len() + rest.len()) as u64;
        let file = self.handle()?;
        let written = if rest.is_empty() {
            file.write_all_at(head, position)
        } else if rest.len() <= ONE_WRITE_BYTES {
            file.write_all_at(&[head, rest].concat(), position)
        } else {
            file.write_all_at(head, position)
                .and_then(|()| file.write_all_at(rest, position + head.len() as u64))
        };
        if let Err(source) = written {
            let _ = file.set_len(position);
            return Err(Error::Io {
                context: "append to segment",
                path: self.path.clone(),
                source,
            });
        }
        self.note_appended(&header, position, len);
        Ok(())
    }

    /// Writes the index files of this closed segment (not fsynced: the caller does
    /// that, outside the log's lock) and returns them.
    pub fn write_index(&self) -> Result<[File; 2]> {
        index::write(
            &self.index_path("index"),
            &self.index_path("timeindex"),
            &self.index,
            SegmentTrailer {
                max_timestamp: self.max_timestamp,
                next_relative_offset: (self.next_offset - self.base_offset) as u32,
                segment_bytes: self.size,
            },
        )
    }

    /// The segment takes no more appends: it closes its file (reads open it anew).
    pub fn mark_sealed(&mut self) {
        self.file = None;
    }

    /// A handle and the size as of now, for reads without the log's lock.
    pub(crate) fn reader(&self) -> SegmentReader {
        SegmentReader {
            path: self.path.clone(),
            file: self.file.clone(),
            size: self.size,
            cached_only: false,
        }
    }

    /// Whether the segment holds its file open (only the active one does).
    pub fn holds_file(&self) -> bool {
        self.file.is_some()
    }

    /// Cuts the file back to `position` (a batch boundary) and returns the segment
    /// reopened as the active one: its index files go, since they describe more.
    pub fn truncate(
        &self,
        position: u64,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<Segment> {
        for p in [self.index_path("index"), self.index_path("timeindex")] {
            remove_if_present(p, "delete index of truncated segment")?;
        }
        let file = self.handle()?;
        file.set_len(position)
            .context("truncate segment", &self.path)?;
        file.sync_all()
            .context("fsync truncated segment", &self.path)?;
        drop(file);
        let (segment, _) = Segment::open(
            &self.path,
            self.base_offset,
            index_interval_bytes,
            true,
            now_ms,
        )?;
        Ok(segment)
    }

    fn index_path(&self, extension: &str) -> PathBuf {
        self.path.with_extension(extension)
    }

    /// Deletes the files of the segment at `base` in `dir` (recovery, for segments past
    /// a tear).
    pub fn remove_files(dir: &Path, base: i64) -> Result<()> {
        let path = dir.join(file_name(base, "log"));
        for p in [
            path.with_extension("index"),
            path.with_extension("timeindex"),
            path,
        ] {
            remove_if_present(p, "delete segment past a tear")?;
        }
        Ok(())
    }

    /// Deletes the segment's files.
    pub fn delete(&self) -> Result<()> {
        for p in [
            self.path.clone(),
            self.index_path("index"),
            self.index_path("timeindex"),
        ] {
            remove_if_present(p, "delete segment file")?;
        }
        Ok(())
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn size_bytes(&self) -> u64 {
        self.size
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// A handle for fsync outside the log's lock.
    pub fn file(&self) -> Result<Arc<File>> {
        self.handle()
    }

    /// Walks batch headers from the index entry at or before `start` and returns the
    /// first batch matching `wanted`, as `(position, header)`.
    fn find_batch(
        &self,
        start: Option<&IndexEntry>,
        wanted: impl FnMut(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>> {
        self.reader()
            .find_batch(start.map_or(0, |e| u64::from(e.position)), wanted)
    }

    /// Calls `f` with the header of every batch whose base offset is at least `from`,
    /// and for a transaction marker the marker it carries (read from its batch).
    pub fn for_each_batch(
        &self,
        from: i64,
        mut f: impl FnMut(&BatchHeader, Option<crate::txn::ControlRecord>),
    ) -> Result<()> {
        let file = self.handle()?;
        let mut positions = self.reader();
        let mut position = self.index_start(from);
        let mut failed = None;
        positions.find_batch(position, |h| {
            let at = position;
            position += h.total_bytes() as u64;
            if h.base_offset < from {
                return false;
            }
            let control = if h.is_control() {
                let mut buf = vec![0u8; h.total_bytes()];
                if let Err(e) = file.read_exact_at(&mut buf, at) {
                    failed = Some(e);
                    return true;
                }
                crate::txn::parse_marker(&buf)
            } else {
                None
            };
            f(h, control);
            false
        })?;
        match failed {
            Some(e) => Err(e).context("read segment", &self.path),
            None => Ok(()),
        }
    }

    /// Where a walk of the batches at or after `from` may start: the position of the
    /// index entry at or below it.
    fn index_start(&self, from: i64) -> u64 {
        if from <= self.base_offset {
            return 0;
        }
        index::lookup_offset(
            &self.index,
            (from - self.base_offset).min(i64::from(u32::MAX)) as u32,
        )
        .map_or(0, |e| u64::from(e.position))
    }

    /// Calls `f` with the header of every batch whose base offset is at least `from`.
    pub fn for_each_header(&self, from: i64, mut f: impl FnMut(&BatchHeader)) -> Result<()> {
        let start = if from <= self.base_offset {
            None
        } else {
            index::lookup_offset(
                &self.index,
                (from - self.base_offset).min(i64::from(u32::MAX)) as u32,
            )
            .copied()
        };
        self.find_batch(start.as_ref(), |h| {
            if h.base_offset >= from {
                f(h);
            }
            false
        })?;
        Ok(())
    }

    /// Position of the batch that holds `offset`, if this segment has it.
    pub fn position_of(&self, offset: i64) -> Result<Option<u64>> {
        if offset < self.base_offset || offset >= self.next_offset {
            return Ok(None);
        }
        let rel = (offset - self.base_offset) as u32;
        Ok(self
            .find_batch(index::lookup_offset(&self.index, rel), |h| {
                h.last_offset() >= offset
            })?
            .map(|(p, _)| p))
    }

    /// Where a read of `offset` starts looking, and with what: the index entry at or
    /// before it, and a reader. `None` if this segment does not hold `offset`.
    pub(crate) fn read_start(&self, offset: i64) -> Option<(u64, SegmentReader)> {
        if offset < self.base_offset || offset >= self.next_offset {
            return None;
        }
        let rel = (offset - self.base_offset) as u32;
        let start = index::lookup_offset(&self.index, rel).map_or(0, |e| u64::from(e.position));
        Some((start, self.reader()))
    }

    /// Reads whole batches from `position`: at most `max_bytes`, but always the first
    /// batch in full, however large (KIP-74), so a consumer can always make progress.
    pub fn read_from(&self, position: u64, max_bytes: usize) -> Result<Vec<u8>> {
        self.reader().read_from(position, max_bytes, Vec::new())
    }

    /// Reads the single batch at `position`.
    fn read_batch(&self, position: u64, header: &BatchHeader) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; header.total_bytes()];
        self.handle()?
            .read_exact_at(&mut buf, position)
            .context("read segment", &self.path)?;
        Ok(buf)
    }

    /// The first record with a timestamp at or after `target_ms`, as `(offset, timestamp)`.
    pub fn offset_for_timestamp(&self, target_ms: i64) -> Result<Option<(i64, i64)>> {
        if self.max_timestamp < target_ms {
            return Ok(None);
        }
        let mut start = index::lookup_timestamp(&self.index, target_ms).copied();
        loop {
            let Some((position, header)) =
                self.find_batch(start.as_ref(), |h| h.max_timestamp >= target_ms)?
            else {
                return Ok(None);
            };
            let batch = self.read_batch(position, &header)?;
            if let Some(found) = crate::batch::first_record_at_or_after(&batch, target_ms)? {
                return Ok(Some(found));
            }
            // A batch whose header max timestamp reaches the target but whose records do
            // not (a producer may set it so); go on after it.
            start = Some(IndexEntry {
                relative_offset: 0,
                position: (position + header.total_bytes() as u64) as u32,
                max_timestamp_before: i64::MIN,
            });
        }
    }

    /// The record holding this segment's largest timestamp, as `(offset, timestamp)`.
    pub fn max_timestamp_record(&self) -> Result<Option<(i64, i64)>> {
        let max = self.max_timestamp;
        match self.find_batch(None, |h| h.max_timestamp == max)? {
            Some((position, header)) => {
                crate::batch::record_with_max_timestamp(&self.read_batch(position, &header)?)
            }
            None => Ok(None),
        }
    }
}

/// Reads one segment's batches without the log's lock: a handle (the active segment's
/// own, or one opened on first use) and the size the segment had when the reader was
/// taken, which no read goes past.
#[derive(Debug, Clone)]
pub(crate) struct SegmentReader {
    path: PathBuf,
    file: Option<Arc<File>>,
    size: u64,
    /// Reads only what the page cache holds, failing with `WouldBlock` where the disk
    /// would be waited for ([`cached_read_exact_at`]).
    cached_only: bool,
}

/// `pread` of exactly `buf.len()` bytes at `position`, taking only what the page cache
/// holds: `preadv2` with `RWF_NOWAIT`, which fails with `EAGAIN` (here `WouldBlock`)
/// rather than wait (for the disk, or on some file systems for the inode's lock while an
/// append holds it). Where the file system, the kernel or a sandbox cannot read so
/// (`EOPNOTSUPP`, `ENOSYS`, `EINVAL`, `EPERM`), the read is done as usual.
#[allow(unsafe_code)]
fn cached_read_exact_at(file: &File, mut buf: &mut [u8], mut position: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let offset = libc::off_t::try_from(position)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: one iovec over `buf`, which lives and is borrowed mutably for the
        // call; the descriptor is `file`'s, open for the call.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        match n {
            0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            n if n > 0 => {
                let n = n as usize;
                buf = &mut buf[n..];
                position += n as u64;
            }
            _ => {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    // The file system, the kernel or a sandbox cannot read without
                    // waiting: read as usual.
                    Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL | libc::EPERM) => {
                        return file.read_exact_at(buf, position);
                    }
                    _ => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// Appends exactly `len` bytes read at `position` to `buf`, into its spare capacity:
/// not zeroed first (a pooled buffer of a megabyte was zeroed for every fetch, 15% of
/// the agent's CPU while a consumer read), since the kernel writes every byte it
/// reports. With `cached_only`, as [`cached_read_exact_at`]. On an error `buf` is as
/// it was.
#[allow(unsafe_code)]
fn read_append_at(
    file: &File,
    buf: &mut Vec<u8>,
    len: usize,
    mut position: u64,
    cached_only: bool,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (start, end) = (buf.len(), buf.len() + len);
    buf.reserve(len);
    let mut no_wait = cached_only;
    while buf.len() < end {
        let want = end - buf.len();
        let spare = &mut buf.spare_capacity_mut()[..want];
        let Ok(offset) = libc::off_t::try_from(position) else {
            buf.truncate(start);
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        // SAFETY: the pointer and length are the vector's spare capacity (reserved
        // above), which lives and is borrowed mutably for the call; the descriptor is
        // `file`'s, open for the call.
        let n = unsafe {
            if no_wait {
                let iov = libc::iovec {
                    iov_base: spare.as_mut_ptr().cast(),
                    iov_len: want,
                };
                libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT)
            } else {
                libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), want, offset)
            }
        };
        match n {
            0 => {
                buf.truncate(start);
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            n if n > 0 => {
                let n = n as usize;
                // SAFETY: the kernel wrote `n` (at most `want`) bytes at the start of
                // the spare capacity, so they are initialized.
                unsafe { buf.set_len(buf.len() + n) };
                position += n as u64;
            }
            _ => {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    // The file system, the kernel or a sandbox cannot read without
                    // waiting: read as usual.
                    Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL | libc::EPERM)
                        if no_wait =>
                    {
                        no_wait = false;
                    }
                    _ => {
                        buf.truncate(start);
                        return Err(e);
                    }
                }
            }
        }
    }
    Ok(())
}

impl SegmentReader {
    /// Reads `buf.len()` bytes at `position`: from the page cache only when the reader
    /// is [`cached_only`](SegmentReader::cached_only).
    fn read_exact_at(&self, file: &File, buf: &mut [u8], position: u64) -> Result<()> {
        let read = if self.cached_only {
            cached_read_exact_at(file, buf, position)
        } else {
            file.read_exact_at(buf, position)
        };
        read.context("read segment", &self.path)
    }

    /// The same reader, reading only what the page cache holds.
    pub(crate) fn cached_only(mut self) -> SegmentReader {
        self.cached_only = true;
        self
    }

    fn file(&mut self) -> Result<Arc<File>> {
        if let Some(f) = &self.file {
            return Ok(Arc::clone(f));
        }
        let f = Arc::new(File::open(&self.path).context("open segment", &self.path)?);
        self.file = Some(Arc::clone(&f));
        Ok(f)
    }

    /// Walks batch headers from `position` and returns the first batch matching
    /// `wanted`, as `(position, header)`.
    pub(crate) fn find_batch(
        &mut self,
        mut position: u64,
        mut wanted: impl FnMut(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>> {
        let mut header_buf = [0u8; HEADER_BYTES];
        let file = self.file()?;
        while position + HEADER_BYTES as u64 <= self.size {
            self.read_exact_at(&file, &mut header_buf, position)?;
            let header = BatchHeader::parse(&header_buf).ok_or_else(|| Error::CorruptSegment {
                path: self.path.clone(),
                reason: format!("short header at {position}"),
            })?;
            if wanted(&header) {
                return Ok(Some((position, header)));
            }
            position += header.total_bytes() as u64;
        }
        Ok(None)
    }

    /// Reads whole batches from `position`: at most `max_bytes`, but always the first
    /// batch in full, however large (KIP-74).
    pub(crate) fn read_from(
        &mut self,
        position: u64,
        max_bytes: usize,
        mut buf: Vec<u8>,
    ) -> Result<Vec<u8>> {
        buf.clear();
        if position >= self.size {
            return Ok(buf);
        }
        let available = (self.size - position) as usize;
        let mut header_buf = [0u8; HEADER_BYTES];
        let file = self.file()?;
        self.read_exact_at(&file, &mut header_buf, position)?;
        let first = BatchHeader::parse(&header_buf)
            .map(|h| h.total_bytes())
            .ok_or_else(|| Error::CorruptSegment {
                path: self.path.clone(),
                reason: format!("short header at {position}"),
            })?;
        let want = available.min(max_bytes.max(first));
        read_append_at(&file, &mut buf, want, position, self.cached_only)
            .context("read segment", &self.path)?;
        let mut iter = crate::batch::BatchIter::new(&buf);
        let _ = iter.by_ref().count();
        let whole = iter.position();
        buf.truncate(whole);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use kafka_protocol::records::Compression;

    use super::*;
    use crate::batch::tests::encode_batch;

    /// Drops `file`'s clean pages from the page cache.
    #[allow(unsafe_code)]
    fn drop_cached(file: &File) {
        file.sync_all().unwrap();
        // SAFETY: advice on an open descriptor; no memory is touched.
        let dropped =
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(dropped, 0);
    }

    /// Whether, in `dir`, a no-wait read of pages just dropped from the page cache fails
    /// with `EAGAIN`: the file system tells, and the cache can be dropped here. Probed on
    /// a file of its own, so that the readahead the probe starts caches nothing the test
    /// then reads.
    #[allow(unsafe_code)]
    fn tells_would_block(dir: &Path) -> bool {
        let path = dir.join("probe");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = File::open(&path).unwrap();
        drop_cached(&file);
        let mut b = [0u8; 1];
        let iov = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // SAFETY: one iovec over a local buffer, the descriptor open for the call.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, 0, libc::RWF_NOWAIT) };
        n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
    }

    #[test]
    fn a_cached_only_read_refuses_to_wait_for_the_disk_and_reads_what_is_cached() {
        let dir = tempfile::tempdir().unwrap();
        let mut segment = Segment::create(dir.path(), 0, 4096, 0).unwrap();
        for i in 0..8 {
            let mut batch = encode_batch(100, i * 100, Compression::None);
            batch[..8].copy_from_slice(&(i * 100).to_be_bytes());
            segment.append(&batch).unwrap();
        }
        let everything = segment
            .reader()
            .read_from(0, usize::MAX, Vec::new())
            .unwrap();
        assert!(!everything.is_empty());

        // In the page cache: read alike either way.
        let cached = segment.reader().cached_only();
        assert_eq!(
            cached.clone().read_from(0, usize::MAX, Vec::new()).unwrap(),
            everything
        );

        if !tells_would_block(dir.path()) {
            eprintln!("here a read cannot tell it would wait for the disk: not checked");
            return;
        }
        drop_cached(&File::open(segment.path()).unwrap());
        let refused = cached
            .clone()
            .read_from(0, usize::MAX, Vec::new())
            .unwrap_err();
        assert!(refused.would_block(), "{refused}");
        // A read that may wait reads it (and caches it).
        assert_eq!(
            segment
                .reader()
                .read_from(0, usize::MAX, Vec::new())
                .unwrap(),
            everything
        );
        assert_eq!(
            cached.clone().read_from(0, usize::MAX, Vec::new()).unwrap(),
            everything
        );
    }
}
