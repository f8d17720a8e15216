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

/// A sealed segment, as tiering and retention see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedSegmentInfo {
    pub base_offset: i64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub size_bytes: u64,
    pub path: PathBuf,
}

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
#[derive(Debug)]
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
    pub fn read(mut self) -> Result<Vec<u8>> {
        let offset = self.offset;
        match self
            .reader
            .find_batch(self.start, |h| h.last_offset() >= offset)?
        {
            Some((position, _)) => self.reader.read_from(position, self.max_bytes),
            None => Ok(Vec::new()),
        }
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
mod tests {
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
        let (follower, recovery) =
            PartitionLog::open(follower_dir.path(), small(), 0).expect("reopen");
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
                .map(|j| {
                    crate::batch::tests::record(j, 10_000 + (i * 4 + j) * 10, None, Some(b"v"))
                })
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
        let (mut log, rec) =
            PartitionLog::open(dir.path(), small(), 0).expect("reopen after crash");
        assert!(rec.truncated_bytes > 0);
        assert_eq!(log.log_end_offset(), 87);
        let again = log
            .append(&idempotent_batch(seq - 3, 3), 0)
            .expect("re-send of the lost batch");
        assert_eq!((again.base_offset, again.duplicate), (87, false));
    }
}
