//! The log of one partition: an ordered run of segments in one directory.
//!
//! Invariants it protects: offsets are dense and strictly increasing across segments;
//! nothing that failed validation is ever written; a segment is fsynced before the next
//! one is created, so after a crash only the active (last) segment can have a torn tail,
//! and opening the log cuts that tail off.
//!
//! Durability is the caller's to request: [`PartitionLog::flush_target`] hands out the
//! active file and the offset it covers so that one fsync outside any lock can cover
//! every batch appended so far (group commit).

use bytes::Bytes;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{self, BatchIter, BatchSummary, TimestampType};
use crate::epochs::EpochHistory;
use crate::error::{Error, IoContext, Result};
use crate::producer_state::{self, Check, ProducerState};
use crate::segment::{ScanOutcome, Segment, SegmentReader};

mod txn;

/// The topic settings the log obeys; changeable while the log is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: a segment is rolled before it would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: a non-empty segment older than this is rolled at the next append.
    pub segment_ms: i64,
    /// `index.interval.bytes`: bytes between two index entries.
    pub index_interval_bytes: u64,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: usize,
    /// The most a produced batch may decompress to (the agent's `max_request_bytes`).
    pub max_decompressed_bytes: usize,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// Every record needs a key (`cleanup.policy` includes `compact`).
    pub keys_required: bool,
    /// Whether what is written counts as durable only once fsynced (strata's default),
    /// or as soon as it is in the page cache (Kafka's default, with `flush.messages` and
    /// `flush.ms` unset); the log itself does not decide this, its owner does.
    pub ack_after_fsync: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            max_decompressed_bytes: batch::MAX_DECOMPRESSED_BYTES,
            timestamp_type: TimestampType::CreateTime,
            keys_required: false,
            ack_after_fsync: true,
        }
    }
}

pub use crate::segment::ClosedSegmentInfo;

/// What opening the log found and repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub segments: usize,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// Bytes cut from the end of the active segment, and why.
    pub truncated_bytes: u64,
    pub truncation_reason: Option<&'static str>,
}

/// The offsets a produce was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker's timestamp for `LogAppendTime` topics, else -1.
    pub log_append_time_ms: i64,
    pub batches: usize,
    /// The batch was a producer's retry of one already in the log: nothing was appended
    /// and the offsets are the original ones.
    pub duplicate: bool,
}

#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    segments: BTreeMap<i64, Segment>,
    leader_epoch: i32,
    producers: ProducerState,
    epochs: EpochHistory,
    /// Segments closed for appends whose data no fsync has covered yet, oldest first:
    /// the flusher syncs them, then [`PartitionLog::seal`] writes their index files.
    unsealed: Vec<Unsealed>,
    /// Bumped whenever the log is cut back or loses segments, so that work begun
    /// without the lock (a read, a roll) can tell the log it planned on changed.
    generation: u64,
    /// A segment was created since the directory was last fsynced.
    dir_unsynced: bool,
    /// The log start set by retention or DeleteRecords ([`PartitionLog::advance_start`]),
    /// which may lie inside the first segment; the owner keeps it (strata: in the
    /// metastore) and sets it again after opening.
    start_floor: i64,
}

/// A segment closed for appends and not sealed yet (see `docs/log-format.md`, "Rolls").
#[derive(Debug)]
struct Unsealed {
    base: i64,
    next: i64,
    /// The producer state as of `next`, for the snapshot sealing writes (unknown for a
    /// segment found unsealed at recovery).
    producers: Option<ProducerState>,
}

/// A read planned under the log's lock ([`PartitionLog::read_plan`]) and done without
/// it ([`ReadPlan::read`]).
#[derive(Debug, Clone)]
pub struct ReadPlan {
    reader: SegmentReader,
    start: u64,
    offset: i64,
    max_bytes: usize,
    generation: u64,
}

impl ReadPlan {
    /// The log's generation when the read was planned: if it differs afterwards, the
    /// log was cut back meanwhile and what was read may be stale.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Reads whole batches starting with the one that holds the planned offset, up to
    /// the planned bytes (always at least one batch).
    pub fn read(self) -> Result<Vec<u8>> {
        self.read_into(Vec::new())
    }

    /// [`ReadPlan::read`] into `buf` (emptied first; a reused buffer).
    pub fn read_into(mut self, buf: Vec<u8>) -> Result<Vec<u8>> {
        let offset = self.offset;
        match self
            .reader
            .find_batch(self.start, |h| h.last_offset() >= offset)?
        {
            Some((position, _)) => self.reader.read_from(position, self.max_bytes, buf),
            None => Ok(buf),
        }
    }

    /// The same read, taking only what the page cache holds: where the disk would be
    /// waited for, it fails at once ([`Error::would_block`]), so that a caller on an
    /// async runtime's thread can do it again where waiting is allowed.
    pub fn cached_only(mut self) -> ReadPlan {
        self.reader = self.reader.cached_only();
        self
    }

    /// The most [`ReadPlan::read`] reads (the first batch aside, if larger).
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The header of the batch holding the planned offset, without reading the batch.
    pub fn header(mut self) -> Result<Option<batch::BatchHeader>> {
        let offset = self.offset;
        let found = self
            .reader
            .find_batch(self.start, |h| h.last_offset() >= offset)?;
        Ok(found.map(|(_, header)| header))
    }
}

/// What one fsync pass makes durable, from [`PartitionLog::flush_target`]: the
/// segments closed since the last pass, the directory (if they created files), and the
/// active segment.
#[derive(Debug)]
pub struct FlushTarget {
    file: Arc<File>,
    /// Everything below this offset is durable once [`FlushTarget::sync`] returns.
    pub end: i64,
    dir: Option<PathBuf>,
    closed: Vec<(i64, Arc<File>)>,
    generation: u64,
}

impl FlushTarget {
    /// Whether the pass has more to do than the active segment: segments to seal, or
    /// the directory.
    pub fn has_closed_segments(&self) -> bool {
        !self.closed.is_empty() || self.dir.is_some()
    }

    /// Fsyncs the closed segments, then the directory, then the active segment. Runs
    /// without the log's lock.
    pub fn sync(&self) -> std::io::Result<()> {
        for (_, file) in &self.closed {
            file.sync_data()?;
        }
        if let Some(dir) = &self.dir {
            File::open(dir)?.sync_all()?;
        }
        self.file.sync_data()
    }
}

/// Files [`PartitionLog::seal`] wrote and that still want an fsync (outside the lock):
/// index files and producer snapshots, which recovery verifies before trusting.
#[derive(Debug, Default)]
pub struct Sealed {
    files: Vec<File>,
}

impl Sealed {
    /// Whether nothing was sealed (no fsync needed).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn sync(&self) -> std::io::Result<()> {
        self.files.iter().try_for_each(File::sync_data)
    }
}

/// Whether the segment at `base` in `dir` has index files that describe it (it was
/// sealed).
fn sealed(dir: &Path, base: i64) -> bool {
    let path = dir.join(crate::segment::file_name(base, "log"));
    let size = fs::metadata(&path).map(|m| m.len()).ok();
    crate::index::read(
        &path.with_extension("index"),
        &path.with_extension("timeindex"),
    )
    .is_some_and(|(_, trailer)| Some(trailer.segment_bytes) == size)
}

impl PartitionLog {
    /// Opens (or creates) the log in `dir`, recovering the active segment (and any
    /// closed segment a crash left unsealed).
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<(PartitionLog, Recovery)> {
        fs::create_dir_all(dir).context("create log directory", dir)?;
        let mut bases = Vec::new();
        for entry in fs::read_dir(dir).context("list log directory", dir)? {
            let entry = entry.context("list log directory", dir)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            // A compacted copy a crash left before it was swapped in.
            if name.ends_with(&format!(".log.{}", crate::compaction::CLEANED)) {
                fs::remove_file(entry.path()).context("remove cleaned copy", &entry.path())?;
                continue;
            }
            if let Some(stem) = name.strip_suffix(".log")
                && let Ok(base) = stem.parse::<i64>()
            {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        let mut segments = BTreeMap::new();
        let mut outcome = ScanOutcome {
            valid_bytes: 0,
            invalid_bytes: 0,
            reason: None,
            from_index: false,
        };
        let mut unsealed = Vec::new();
        let mut expected_next: Option<i64> = None;
        for (i, &base) in bases.iter().enumerate() {
            let path = dir.join(crate::segment::file_name(base, "log"));
            let active = i + 1 == bases.len();
            let opened = Segment::open(&path, base, config.index_interval_bytes, active, now_ms);
            let (segment, scanned, last) = match opened {
                Ok((segment, scanned)) => (segment, scanned, active),
                // A closed segment that is torn, with no sealed segment after it: the
                // agent stopped (a machine crash) before the flusher sealed it, so
                // nothing from its tear on was ever counted durable. The log ends at
                // the tear, as it would in the active segment; later segments go.
                Err(Error::CorruptSegment { .. })
                    if !active && bases[i + 1..].iter().all(|&b| !sealed(dir, b)) =>
                {
                    let (segment, scanned) =
                        Segment::open(&path, base, config.index_interval_bytes, true, now_ms)?;
                    for &later in &bases[i + 1..] {
                        Segment::remove_files(dir, later)?;
                    }
                    (segment, scanned, true)
                }
                Err(e) => return Err(e),
            };
            // A compacted segment may end before the next one begins; never after.
            if let Some(next) = expected_next
                && next > base
            {
                return Err(Error::CorruptSegment {
                    path,
                    reason: format!("segment starts at {base} but the one before ends at {next}"),
                });
            }
            expected_next = Some(segment.next_offset());
            if last {
                outcome = scanned;
            } else if !scanned.from_index {
                // Closed but not sealed (no valid index): the flusher's first pass
                // fsyncs it and writes its index.
                unsealed.push(Unsealed {
                    base,
                    next: segment.next_offset(),
                    producers: None,
                });
            }
            segments.insert(base, segment);
            if last {
                break;
            }
        }
        if segments.is_empty() {
            segments.insert(
                0,
                Segment::create(dir, 0, config.index_interval_bytes, now_ms)?,
            );
        }
        let mut log = PartitionLog {
            dir: dir.to_path_buf(),
            config,
            segments,
            leader_epoch: 0,
            producers: ProducerState::default(),
            epochs: EpochHistory::default(),
            unsealed,
            generation: 0,
            dir_unsynced: false,
            start_floor: 0,
        };
        log.rebuild_producer_state()?;
        log.rebuild_epochs()?;
        let recovery = Recovery {
            segments: log.segments.len(),
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.log_end_offset(),
            truncated_bytes: outcome.invalid_bytes,
            truncation_reason: outcome.reason,
        };
        Ok((log, recovery))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    /// The epoch stamped into every batch appended from now on.
    pub fn set_leader_epoch(&mut self, epoch: i32) {
        self.leader_epoch = epoch;
    }

    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// The first offset that may be read: the first segment's base, or the start set by
    /// [`PartitionLog::advance_start`] if that is higher (never beyond the log end).
    pub fn log_start_offset(&self) -> i64 {
        self.first_base()
            .max(self.start_floor)
            .min(self.log_end_offset())
    }

    /// The log start last set by [`PartitionLog::advance_start`] (0 if never).
    pub fn start_floor(&self) -> i64 {
        self.start_floor
    }

    /// The base offset of the oldest segment on disk.
    fn first_base(&self) -> i64 {
        self.segments
            .values()
            .next()
            .map_or(0, Segment::base_offset)
    }

    /// Moves the log start up to `offset` (at most the log end; never down), as
    /// retention and DeleteRecords do, and deletes the sealed segments wholly below it.
    /// Reads below the start are refused from now on, even where a segment still holds
    /// the records. Returns the number of segments deleted.
    pub fn advance_start(&mut self, offset: i64) -> Result<usize> {
        let offset = offset.min(self.log_end_offset());
        if offset > self.start_floor {
            self.start_floor = offset;
            self.generation += 1;
        }
        let floor = self.start_floor;
        self.delete_oldest_segments(|s| s.next_offset <= floor)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size_bytes).sum()
    }

    /// The bytes and the count of the segments holding offsets from `offset` on.
    pub fn segments_from(&self, offset: i64) -> (u64, usize) {
        let holding = self.segments.values().filter(|s| s.next_offset() > offset);
        holding.fold((0, 0), |(bytes, n), s| (bytes + s.size_bytes(), n + 1))
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Validates every batch in `records` and then appends them all, assigning offsets.
    /// Nothing is written unless every batch is valid.
    pub fn append(&mut self, records: &[u8], now_ms: i64) -> Result<AppendOutcome> {
        self.append_shared(&Bytes::copy_from_slice(records), now_ms)
    }

    /// [`PartitionLog::append`] of records the caller holds as [`Bytes`] (a slice of the
    /// request frame): neither validating nor stamping a batch copies it, so a produce
    /// request takes little more memory than its frame.
    pub fn append_shared(&mut self, records: &Bytes, now_ms: i64) -> Result<AppendOutcome> {
        let mut iter = BatchIter::new(records);
        let mut batches = Vec::new();
        for (_, bytes) in iter.by_ref() {
            batch::validate_shared(
                &records.slice_ref(bytes),
                self.config.max_message_bytes,
                self.config.max_decompressed_bytes,
                self.config.keys_required,
            )?;
            batches.push(bytes);
        }
        if iter.remainder() > 0 || batches.is_empty() {
            // A batch that does not fit in what was sent: too short, or its length field
            // lies. Validate it alone for the precise reason.
            let rest = &records[iter.position()..];
            batch::validate_produced(rest, self.config.max_message_bytes)?;
            return Err(Error::corrupt(
                "record set ends in a partial batch".to_string(),
            ));
        }
        let log_append_time_ms = match self.config.timestamp_type {
            TimestampType::LogAppendTime => now_ms,
            TimestampType::CreateTime => -1,
        };
        let mut first: Option<BatchSummary> = None;
        let mut last = None;
        for bytes in &batches {
            let header = batch::BatchHeader::parse(bytes).expect("validated");
            if header.is_transactional() && header.producer_id < 0 {
                return Err(Error::InvalidRecord {
                    reason: "a transactional batch needs a producer id".to_string(),
                });
            }
            if let Check::Duplicate {
                first_offset,
                last_offset,
            } = self.producers.check(&header)?
            {
                if batches.len() == 1 {
                    return Ok(AppendOutcome {
                        base_offset: first_offset,
                        last_offset,
                        log_append_time_ms,
                        batches: 1,
                        duplicate: true,
                    });
                }
                return Err(Error::InvalidRecord {
                    reason: "a retried batch may not share a request with other batches"
                        .to_string(),
                });
            }
            let (head, rest) = bytes
                .split_first_chunk::<{ batch::HEADER_BYTES }>()
                .expect("validated");
            let mut head = *head;
            let summary = batch::stamp(
                &mut head,
                rest,
                self.log_end_offset(),
                self.leader_epoch,
                self.config.timestamp_type,
                now_ms,
            );
            self.maybe_roll(bytes.len() as u64, now_ms)?;
            self.segments
                .values_mut()
                .next_back()
                .expect("active segment")
                .append_parts(&head, rest)?;
            self.producers
                .record(&batch::BatchHeader::parse(&head).expect("assigned"));
            self.epochs.note(self.leader_epoch, summary.base_offset);
            first.get_or_insert(summary);
            last = Some(summary);
        }
        let (first, last) = (first.expect("non-empty"), last.expect("non-empty"));
        Ok(AppendOutcome {
            base_offset: first.base_offset,
            last_offset: last.last_offset,
            log_append_time_ms,
            batches: batches.len(),
            duplicate: false,
        })
    }

    /// Appends batches copied from the leader, offsets and all, as they are. Each must
    /// start at or after the log end (after it where the leader's log was compacted)
    /// and pass its CRC; the batches before a bad one are kept. Returns the new log end
    /// offset.
    pub fn append_replicated(&mut self, records: &[u8], now_ms: i64) -> Result<i64> {
        for (header, bytes) in BatchIter::new(records) {
            header.verify(bytes)?;
            if header.base_offset < self.log_end_offset() {
                return Err(Error::corrupt(format!(
                    "replicated batch starts at {} but the log ends at {}",
                    header.base_offset,
                    self.log_end_offset()
                )));
            }
            self.maybe_roll(bytes.len() as u64, now_ms)?;
            self.segments
                .values_mut()
                .next_back()
                .expect("active segment")
                .append(bytes)?;
            match header
                .is_control()
                .then(|| crate::txn::parse_marker(bytes))
                .flatten()
            {
                Some(control) => self.producers.record_marker(&header, control),
                None => self.producers.record(&header),
            }
            self.epochs
                .note(header.partition_leader_epoch, header.base_offset);
        }
        Ok(self.log_end_offset())
    }

    /// The leader-epoch history (where each leader epoch begins).
    pub fn epochs(&self) -> &EpochHistory {
        &self.epochs
    }

    /// Cuts the log back so that it ends at `offset` (or at the start of the batch that
    /// holds `offset`, if a batch straddles it): the follower's repair of a divergent
    /// suffix. An `offset` below the log start empties the log, which then starts at
    /// `offset`. Producer state and the epoch history are cut back with it. Returns the
    /// new log end offset.
    pub fn truncate_to(&mut self, offset: i64, now_ms: i64) -> Result<i64> {
        if offset >= self.log_end_offset() {
            return Ok(self.log_end_offset());
        }
        self.generation += 1;
        let doomed: Vec<i64> = self
            .segments
            .range(offset..)
            .map(|(&base, _)| base)
            .collect();
        // Newest first: a crash halfway leaves a shorter log, never one with a gap.
        for base in doomed.into_iter().rev() {
            if let Some(segment) = self.segments.remove(&base) {
                segment.delete()?;
            }
        }
        match self.segments.last_entry() {
            None => {
                let start = offset.max(0);
                let segment =
                    Segment::create(&self.dir, start, self.config.index_interval_bytes, now_ms)?;
                self.segments.insert(start, segment);
            }
            Some(mut last) if last.get().next_offset() > offset => {
                let position =
                    last.get()
                        .position_of(offset)?
                        .ok_or_else(|| Error::CorruptSegment {
                            path: last.get().path().to_path_buf(),
                            reason: format!("no batch holds offset {offset}"),
                        })?;
                let cut =
                    last.get_mut()
                        .truncate(position, self.config.index_interval_bytes, now_ms)?;
                last.insert(cut);
            }
            Some(_) => {}
        }
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .context("fsync log directory", &self.dir)?;
        let end = self.log_end_offset();
        let active = self.active().base_offset();
        self.unsealed.retain(|u| u.base < active && u.next <= end);
        self.epochs.truncate_to(end);
        self.rebuild_producer_state()?;
        Ok(end)
    }

    /// Empties the log and starts it again at `offset` (Kafka's
    /// `truncateFullyAndStartAt`): a follower that fell behind the leader's log start
    /// copies on from there. Producer state and the epoch history start empty too.
    pub fn reset_to(&mut self, offset: i64, now_ms: i64) -> Result<i64> {
        self.generation += 1;
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for base in bases.into_iter().rev() {
            if let Some(segment) = self.segments.remove(&base) {
                segment.delete()?;
            }
        }
        for (_, path) in producer_state::list_snapshots(&self.dir)? {
            fs::remove_file(&path).context("remove producer snapshot", &path)?;
        }
        let start = offset.max(0);
        let segment = Segment::create(&self.dir, start, self.config.index_interval_bytes, now_ms)?;
        self.segments.insert(start, segment);
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .context("fsync log directory", &self.dir)?;
        self.epochs = EpochHistory::default();
        self.producers = ProducerState::default();
        self.unsealed.clear();
        crate::compaction::Checkpoint::remove(&self.dir)?;
        Ok(start)
    }

    /// Rebuilds the epoch history from the batch headers.
    fn rebuild_epochs(&mut self) -> Result<()> {
        let mut epochs = EpochHistory::default();
        for segment in self.segments.values() {
            segment.for_each_header(segment.base_offset(), |h| {
                epochs.note(h.partition_leader_epoch, h.base_offset)
            })?;
        }
        self.epochs = epochs;
        Ok(())
    }

    /// Rebuilds producer state: the newest snapshot at or below the log end, then every
    /// batch after it.
    fn rebuild_producer_state(&mut self) -> Result<()> {
        let end = self.log_end_offset();
        let mut from = self.first_base();
        let mut state = ProducerState::default();
        for (offset, path) in producer_state::list_snapshots(&self.dir)?.into_iter().rev() {
            if offset > end {
                // Taken before a crash cut the log back below it.
                let _ = fs::remove_file(&path);
                continue;
            }
            if let Some(s) = ProducerState::read_snapshot(&path) {
                state = s;
                from = offset;
                break;
            }
            tracing::warn!(snapshot = %path.display(), "ignoring a damaged producer snapshot");
        }
        for segment in self.segments.values().filter(|s| s.next_offset() > from) {
            segment.for_each_batch(from, |h, control| match control {
                Some(control) => state.record_marker(h, control),
                None => state.record(h),
            })?;
        }
        state.forget_below(self.log_start_offset());
        self.producers = state;
        Ok(())
    }

    /// The idempotent-producer state.
    pub fn producers(&self) -> &ProducerState {
        &self.producers
    }

    /// Forgets producers idle since before `cutoff_ms` (`producer.id.expiration.ms`).
    pub fn expire_producers(&mut self, cutoff_ms: i64) -> usize {
        self.producers.expire(cutoff_ms)
    }

    /// Writes a producer-state snapshot as of the log end (on shutdown, so the next
    /// open replays nothing).
    pub fn snapshot_producers(&self) -> Result<()> {
        self.producers
            .write_snapshot(&self.dir, self.log_end_offset())
    }

    /// Whether the active segment must be sealed and a new one started before
    /// `incoming_bytes` are appended: they would overfill it, or it is older than
    /// `segment.ms`, or its relative offsets could run out. An empty segment never rolls.
    fn needs_roll(&self, incoming_bytes: u64, now_ms: i64) -> bool {
        let active = self.active();
        if active.is_empty() {
            return false;
        }
        let full = active.size_bytes() + incoming_bytes > self.config.segment_bytes;
        let old = now_ms - active.created_ms() >= self.config.segment_ms;
        // Every record takes at least one byte, so this bounds the offsets to come.
        let span = active.next_offset() - active.base_offset();
        let offsets_exhausted = span.saturating_add(incoming_bytes as i64) > i64::from(i32::MAX);
        full || old || offsets_exhausted
    }

    /// Closes the active segment for appends and starts a new one, when
    /// `incoming_bytes` need it. Nothing here waits for the disk: the closed segment is
    /// sealed later, by the flusher's next pass (fsync outside the lock, then
    /// [`PartitionLog::seal`]), which also makes the new file's directory entry durable.
    fn maybe_roll(&mut self, incoming_bytes: u64, now_ms: i64) -> Result<()> {
        if !self.needs_roll(incoming_bytes, now_ms) {
            return Ok(());
        }
        let active = self.active();
        let (base, next) = (active.base_offset(), active.next_offset());
        let segment = Segment::create(&self.dir, next, self.config.index_interval_bytes, now_ms)?;
        self.segments.insert(next, segment);
        self.unsealed.push(Unsealed {
            base,
            next,
            producers: Some(self.producers.clone()),
        });
        self.dir_unsynced = true;
        Ok(())
    }

    /// Rolls the active segment if `segment.ms` has passed, without an append.
    pub fn roll_if_due(&mut self, now_ms: i64) -> Result<()> {
        self.maybe_roll(0, now_ms)
    }

    /// Seals what `synced` (a [`FlushTarget`] whose [`FlushTarget::sync`] succeeded)
    /// made durable: each closed segment's index files and a producer-state snapshot
    /// are written, and the segment closes its file. Their fsync is left to the
    /// caller, outside the lock ([`Sealed::sync`]); recovery checks both before
    /// trusting them, and a segment's data is durable before any index describes it.
    /// If the log was cut back since `synced` was taken, nothing is sealed: the next
    /// pass takes what is left.
    pub fn seal(&mut self, synced: &FlushTarget) -> Result<Sealed> {
        let mut sealed = Sealed::default();
        if synced.generation != self.generation {
            return Ok(sealed);
        }
        let mut left = Vec::new();
        for u in std::mem::take(&mut self.unsealed) {
            if !synced.closed.iter().any(|(base, _)| *base == u.base) {
                left.push(u);
                continue;
            }
            let Some(segment) = self.segments.get_mut(&u.base) else {
                continue;
            };
            sealed.files.extend(segment.write_index()?);
            segment.mark_sealed();
            if let Some(producers) = u.producers {
                sealed
                    .files
                    .push(producers.write_snapshot_unsynced(&self.dir, u.next)?);
            }
        }
        self.unsealed = left;
        Ok(sealed)
    }

    /// The log's generation: it changes whenever the log is cut back or loses
    /// segments.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// What an fsync pass now makes durable (see [`FlushTarget`]).
    pub fn flush_target(&mut self) -> Result<FlushTarget> {
        let mut closed = Vec::with_capacity(self.unsealed.len());
        for u in &self.unsealed {
            if let Some(segment) = self.segments.get(&u.base) {
                closed.push((u.base, segment.file()?));
            }
        }
        let dir = std::mem::take(&mut self.dir_unsynced).then(|| self.dir.clone());
        Ok(FlushTarget {
            file: self.active().file()?,
            end: self.log_end_offset(),
            dir,
            closed,
            generation: self.generation,
        })
    }

    /// How many segment files the log holds open: one, its active segment's.
    pub fn open_files(&self) -> usize {
        self.segments.values().filter(|s| s.holds_file()).count()
    }

    /// Reads whole batches starting with the one that holds `offset`, up to `max_bytes`
    /// (always at least one batch). Reading at the log end returns nothing.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<Vec<u8>> {
        match self.read_plan(offset, max_bytes)? {
            Some(plan) => plan.read(),
            None => Ok(Vec::new()),
        }
    }

    /// Plans [`PartitionLog::read`] without reading: which segment, from which index
    /// entry, up to which size. The read itself ([`ReadPlan::read`]) needs no lock.
    /// `None`: `offset` is the log end, there is nothing to read.
    pub fn read_plan(&self, offset: i64, max_bytes: usize) -> Result<Option<ReadPlan>> {
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        if offset == end {
            return Ok(None);
        }
        if offset < start || offset > end {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start: start,
                log_end: end,
            });
        }
        // The segment holding `offset`; where a compacted segment ends before the next
        // one begins and `offset` lies in between, the next one, from its first batch.
        let first = self
            .segments
            .range(..=offset)
            .next_back()
            .map_or(start, |(&base, _)| base);
        for segment in self.segments.range(first..).map(|(_, s)| s) {
            let from = offset.max(segment.base_offset());
            if let Some((start, reader)) = segment.read_start(from) {
                return Ok(Some(ReadPlan {
                    reader,
                    start,
                    offset: from,
                    max_bytes,
                    generation: self.generation,
                }));
            }
        }
        Ok(None)
    }

    /// The first record with a timestamp at or after `target_ms`: `(offset, timestamp)`.
    pub fn offset_for_timestamp(&self, target_ms: i64) -> Result<Option<(i64, i64)>> {
        for segment in self.segments.values() {
            if let Some(found) = segment.offset_for_timestamp(target_ms)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The record with the largest timestamp (the earliest such segment wins ties).
    pub fn max_timestamp_record(&self) -> Result<Option<(i64, i64)>> {
        let best =
            self.segments
                .values()
                .filter(|s| !s.is_empty())
                .fold(None::<&Segment>, |best, s| match best {
                    Some(b) if b.max_timestamp() >= s.max_timestamp() => Some(b),
                    _ => Some(s),
                });
        match best {
            Some(s) => s.max_timestamp_record(),
            None => Ok(None),
        }
    }

    /// Sealed segments (every one but the active), oldest first:
    /// `(base offset, next offset, max timestamp, size, path)`.
    pub fn closed_segments(&self) -> Vec<ClosedSegmentInfo> {
        let n = self.segments.len();
        // A closed segment not sealed yet (its data not known durable) is left alone
        // by tiering and retention until it is.
        let unsealed = self.unsealed.first().map_or(i64::MAX, |u| u.base);
        self.segments
            .values()
            .take(n.saturating_sub(1))
            .filter(|s| s.base_offset() < unsealed)
            .map(|s| ClosedSegmentInfo {
                base_offset: s.base_offset(),
                next_offset: s.next_offset(),
                max_timestamp: s.max_timestamp(),
                size_bytes: s.size_bytes(),
                path: s.path().to_path_buf(),
            })
            .collect()
    }

    /// Deletes the oldest sealed segments while `delete` says so; the active segment is
    /// never deleted. The log start offset moves to the first segment kept. Returns the
    /// number of segments deleted.
    pub fn delete_oldest_segments(
        &mut self,
        mut delete: impl FnMut(&ClosedSegmentInfo) -> bool,
    ) -> Result<usize> {
        let mut deleted = 0;
        while let Some(oldest) = self.closed_segments().into_iter().next() {
            if !delete(&oldest) {
                break;
            }
            if let Some(segment) = self.segments.remove(&oldest.base_offset) {
                self.generation += 1;
                segment.delete()?;
                deleted += 1;
            }
        }
        // Producer state keeps its entries: a retried batch must still be recognised,
        // and answered with its original offsets, after its segment left the disk.
        // Aborted transactions below the start go: their markers are no longer here
        // (an archived object carries its own).
        let start = self.log_start_offset();
        self.producers.forget_below(start);
        Ok(deleted)
    }

    /// Swaps a compacted copy ([`crate::compaction::rewrite_segment`]) in for the sealed
    /// segment it was written from, if that segment is still here, sealed and unchanged;
    /// else the copy is removed and `false` returned. The rename is atomic, so a crash
    /// leaves the old segment or the new one; the new one's index files are written here
    /// (after a crash before that, recovery finds index files that do not match and
    /// rebuilds them). Reads planned before the swap read the old file, which stays
    /// open for them, and are planned again (the generation moves).
    pub fn swap_compacted(
        &mut self,
        rewritten: &crate::compaction::Rewritten,
        now_ms: i64,
    ) -> Result<bool> {
        let base = rewritten.base_offset;
        let unchanged = base != self.active().base_offset()
            && !self.unsealed.iter().any(|u| u.base == base)
            && self
                .segments
                .get(&base)
                .is_some_and(|s| s.size_bytes() == rewritten.source_bytes);
        let Some(segment) = self.segments.get(&base).filter(|_| unchanged) else {
            let _ = fs::remove_file(&rewritten.path);
            return Ok(false);
        };
        let path = segment.path().to_path_buf();
        fs::rename(&rewritten.path, &path).context("swap in a compacted segment", &path)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .context("fsync log directory", &self.dir)?;
        for ext in ["index", "timeindex"] {
            let index = path.with_extension(ext);
            match fs::remove_file(&index) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).context("remove stale index", &index);
                }
                _ => {}
            }
        }
        let (mut segment, _) =
            Segment::open(&path, base, self.config.index_interval_bytes, false, now_ms)?;
        for f in segment.write_index()? {
            f.sync_all().context("fsync index of", &path)?;
        }
        segment.mark_sealed();
        self.segments.insert(base, segment);
        self.generation += 1;
        Ok(true)
    }

    /// Makes everything appended durable and seals the closed segments, in place (with
    /// the lock held): for tools and tests. The agent's flusher does the same in steps,
    /// fsyncing without the lock ([`Self::flush_target`], [`Self::seal`]).
    pub fn flush(&mut self) -> Result<()> {
        let target = self.flush_target()?;
        let dir = self.dir.clone();
        let io = |source| Error::Io {
            context: "fsync log",
            path: dir.clone(),
            source,
        };
        target.sync().map_err(io)?;
        let sealed = self.seal(&target)?;
        sealed.sync().map_err(io)
    }

    /// Deletes the whole log from disk.
    pub fn delete(self) -> Result<()> {
        fs::remove_dir_all(&self.dir).context("delete log directory", &self.dir)
    }
}

#[cfg(test)]
mod tests;
