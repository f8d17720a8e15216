//! Idempotent-producer state of one partition: for each producer id, its epoch and the
//! sequence ranges and offsets of its last five batches.
//!
//! It protects DESIGN.md invariant 4: a retried batch with the same (producer id, epoch,
//! sequence range) is appended once and answered with its original offsets. The state is
//! derived from the log (batch headers carry producer id, epoch and base sequence), so it
//! is rebuilt on open from the newest snapshot plus the batches after it; snapshots are
//! written when a segment is sealed and on close, and only shorten that replay.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::batch::BatchHeader;
use crate::error::{Error, IoContext, Result};
use crate::reader::Reader;
use crate::txn::{ControlRecord, Transactions};

/// How many batches per producer are remembered for duplicate detection (Kafka's 5,
/// which is also the most `max.in.flight.requests.per.connection` allows).
pub const BATCHES_KEPT: usize = 5;

/// One remembered batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRange {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// What the partition knows of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchRange>,
    /// Max timestamp of its last batch, for expiry.
    pub last_timestamp_ms: i64,
    /// The coordinator epoch of the last marker written for it (-1 before any):
    /// markers from an older coordinator are refused.
    pub coordinator_epoch: i32,
}

/// What checking a batch against the state decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Not from an idempotent producer, or the next batch in sequence: append it.
    Append,
    /// A retry of a batch already in the log: answer with these offsets, append nothing.
    Duplicate { first_offset: i64, last_offset: i64 },
}

/// The sequence number after `seq`, wrapping as Kafka's do.
fn next_sequence(seq: i32) -> i32 {
    if seq == i32::MAX { 0 } else { seq + 1 }
}

fn last_sequence(header: &BatchHeader) -> i32 {
    let last = i64::from(header.base_sequence) + i64::from(header.last_offset_delta);
    if last > i64::from(i32::MAX) {
        (last - i64::from(i32::MAX) - 1) as i32
    } else {
        last as i32
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerState {
    producers: BTreeMap<i64, ProducerEntry>,
    txns: Transactions,
}

impl ProducerState {
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Every producer known, by id.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(&p, e)| (p, e))
    }

    /// The partition's transactions.
    pub fn transactions(&self) -> &Transactions {
        &self.txns
    }

    pub fn transactions_mut(&mut self) -> &mut Transactions {
        &mut self.txns
    }

    /// Whether a marker from `producer_epoch` and `coordinator_epoch` may end
    /// `producer_id`'s transaction: not from an epoch older than the producer's
    /// (INVALID_PRODUCER_EPOCH), nor from a coordinator older than the last one that
    /// wrote a marker for it (TRANSACTION_COORDINATOR_FENCED).
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<()> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if producer_epoch < entry.epoch {
            return Err(Error::InvalidProducerEpoch {
                producer_id,
                current: entry.epoch,
                got: producer_epoch,
            });
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(Error::CoordinatorFenced {
                producer_id,
                current: entry.coordinator_epoch,
                got: coordinator_epoch,
            });
        }
        Ok(())
    }

    /// The entry of the batch's producer, new (no batches yet) if it has none.
    fn entry(&mut self, header: &BatchHeader) -> &mut ProducerEntry {
        self.producers
            .entry(header.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: header.producer_epoch,
                batches: VecDeque::new(),
                last_timestamp_ms: header.max_timestamp,
                coordinator_epoch: -1,
            })
    }

    /// Records a marker now in the log (`header` with its offset assigned): the
    /// producer's transaction ends here, and its epoch is the marker's from now on.
    pub fn record_marker(&mut self, header: &BatchHeader, control: ControlRecord) {
        let entry = self.entry(header);
        if header.producer_epoch > entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = entry.coordinator_epoch.max(control.coordinator_epoch);
        entry.last_timestamp_ms = entry.last_timestamp_ms.max(header.max_timestamp);
        self.txns
            .note_marker(header.producer_id, control.marker, header.base_offset);
    }

    /// Decides what to do with a produced batch (its header as sent, before offsets
    /// are assigned). Errors are OUT_OF_ORDER_SEQUENCE_NUMBER or INVALID_PRODUCER_EPOCH.
    pub fn check(&self, header: &BatchHeader) -> Result<Check> {
        if header.producer_id < 0 {
            return Ok(Check::Append);
        }
        let first = header.base_sequence;
        if first < 0 {
            return Err(Error::InvalidRecord {
                reason: format!(
                    "producer {} sent a batch without a sequence",
                    header.producer_id
                ),
            });
        }
        let last = last_sequence(header);
        let Some(entry) = self.producers.get(&header.producer_id) else {
            return if first == 0 {
                Ok(Check::Append)
            } else {
                Err(Error::OutOfOrderSequence {
                    producer_id: header.producer_id,
                    expected: 0,
                    got: first,
                })
            };
        };
        if header.producer_epoch < entry.epoch {
            return Err(Error::InvalidProducerEpoch {
                producer_id: header.producer_id,
                current: entry.epoch,
                got: header.producer_epoch,
            });
        }
        if header.producer_epoch > entry.epoch {
            // A new epoch starts its sequences again at 0.
            return if first == 0 {
                Ok(Check::Append)
            } else {
                Err(Error::OutOfOrderSequence {
                    producer_id: header.producer_id,
                    expected: 0,
                    got: first,
                })
            };
        }
        if let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_sequence == first && b.last_sequence == last)
        {
            return Ok(Check::Duplicate {
                first_offset: b.first_offset,
                last_offset: b.last_offset,
            });
        }
        let expected = entry
            .batches
            .back()
            .map_or(0, |b| next_sequence(b.last_sequence));
        if first != expected {
            return Err(Error::OutOfOrderSequence {
                producer_id: header.producer_id,
                expected,
                got: first,
            });
        }
        Ok(Check::Append)
    }

    /// Records a batch that is now in the log (its header with offsets assigned).
    pub fn record(&mut self, header: &BatchHeader) {
        if header.producer_id < 0 || header.is_control() {
            return;
        }
        let range = BatchRange {
            first_sequence: header.base_sequence,
            last_sequence: last_sequence(header),
            first_offset: header.base_offset,
            last_offset: header.last_offset(),
        };
        let entry = self.entry(header);
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(range);
        while entry.batches.len() > BATCHES_KEPT {
            entry.batches.pop_front();
        }
        entry.last_timestamp_ms = entry.last_timestamp_ms.max(header.max_timestamp);
        if header.is_transactional() {
            self.txns.note_data(header);
        }
    }

    /// Forgets producers whose last batch is older than `cutoff_ms`
    /// (`producer.id.expiration.ms`). Returns how many were forgotten.
    pub fn expire(&mut self, cutoff_ms: i64) -> usize {
        let before = self.producers.len();
        let txns = &self.txns;
        self.producers.retain(|&pid, e| {
            e.last_timestamp_ms >= cutoff_ms || txns.open_first_offset(pid).is_some()
        });
        before - self.producers.len()
    }

    /// Forgets every batch at or above `offset` (after the log was cut back to it).
    pub fn truncate_to(&mut self, offset: i64) {
        for entry in self.producers.values_mut() {
            entry.batches.retain(|b| b.last_offset < offset);
        }
        self.producers.retain(|_, e| !e.batches.is_empty());
    }

    /// Forgets what lies wholly below the log start `log_start`.
    pub fn forget_below(&mut self, log_start: i64) {
        self.txns.forget_below(log_start);
    }
}

/// File name of the snapshot taken at log offset `offset`.
pub fn snapshot_name(offset: i64) -> String {
    format!("{offset:020}.snapshot")
}

/// Version 2 adds each producer's coordinator epoch and the transactions; version 1
/// snapshots (no transactions) are still read.
const SNAPSHOT_MAGIC: &[u8; 8] = b"STRPS002";
const SNAPSHOT_MAGIC_V1: &[u8; 8] = b"STRPS001";

impl ProducerState {
    /// Writes the state as of log offset `offset` (every batch below it is included),
    /// atomically (temp file, fsync, rename), and removes older snapshots.
    pub fn write_snapshot(&self, dir: &Path, offset: i64) -> Result<()> {
        self.write_snapshot_file(dir, offset, true).map(|_| ())
    }

    /// [`ProducerState::write_snapshot`] without the fsync, which is left to the caller
    /// (a torn snapshot fails its CRC and is ignored at recovery); returns the file.
    pub fn write_snapshot_unsynced(&self, dir: &Path, offset: i64) -> Result<fs::File> {
        self.write_snapshot_file(dir, offset, false)
    }

    fn write_snapshot_file(&self, dir: &Path, offset: i64, sync: bool) -> Result<fs::File> {
        let mut body = Vec::with_capacity(16 + self.producers.len() * 64);
        body.extend_from_slice(SNAPSHOT_MAGIC);
        body.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        for (pid, e) in &self.producers {
            body.extend_from_slice(&pid.to_be_bytes());
            body.extend_from_slice(&e.epoch.to_be_bytes());
            body.extend_from_slice(&e.last_timestamp_ms.to_be_bytes());
            body.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            body.push(e.batches.len() as u8);
            for b in &e.batches {
                body.extend_from_slice(&b.first_sequence.to_be_bytes());
                body.extend_from_slice(&b.last_sequence.to_be_bytes());
                body.extend_from_slice(&b.first_offset.to_be_bytes());
                body.extend_from_slice(&b.last_offset.to_be_bytes());
            }
        }
        self.txns.encode(&mut body);
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(&crc.to_be_bytes());
        let path = dir.join(snapshot_name(offset));
        let tmp = path.with_extension("snapshot.tmp");
        let mut f = fs::File::create(&tmp).context("create producer snapshot", &tmp)?;
        f.write_all(&body)
            .context("write producer snapshot", &tmp)?;
        if sync {
            f.sync_data().context("fsync producer snapshot", &tmp)?;
        }
        fs::rename(&tmp, &path).context("publish producer snapshot", &path)?;
        for (old, p) in list_snapshots(dir)? {
            if old < offset {
                let _ = fs::remove_file(p);
            }
        }
        Ok(f)
    }

    /// Reads a snapshot; `None` if it is damaged (the caller then replays from further back).
    pub fn read_snapshot(path: &Path) -> Option<ProducerState> {
        let bytes = fs::read(path).ok()?;
        let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        let (v1, rest) = match body.strip_prefix(SNAPSHOT_MAGIC) {
            Some(rest) => (false, rest),
            None => (true, body.strip_prefix(SNAPSHOT_MAGIC_V1)?),
        };
        let mut r = Reader { b: rest };
        let n = r.u32()?;
        let mut producers = BTreeMap::new();
        for _ in 0..n {
            let pid = r.i64()?;
            let epoch = r.i16()?;
            let last_timestamp_ms = r.i64()?;
            let coordinator_epoch = if v1 { -1 } else { r.i32()? };
            let count = r.u8()?;
            let mut batches = VecDeque::with_capacity(usize::from(count).min(BATCHES_KEPT));
            for _ in 0..count {
                batches.push_back(BatchRange {
                    first_sequence: r.i32()?,
                    last_sequence: r.i32()?,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                });
            }
            producers.insert(
                pid,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp_ms,
                    coordinator_epoch,
                },
            );
        }
        let txns = if v1 {
            Transactions::default()
        } else {
            Transactions::decode(&mut r)?
        };
        Some(ProducerState { producers, txns })
    }
}

/// Snapshots in `dir` by offset.
pub fn list_snapshots(dir: &Path) -> Result<Vec<(i64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).context("list log directory", dir)? {
        let entry = entry.context("list log directory", dir)?;
        let name = entry.file_name();
        if let Some(offset) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".snapshot"))
            .and_then(|s| s.parse().ok())
        {
            out.push((offset, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset: offset,
            batch_length: 100,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 1000,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn duplicates_gaps_and_epochs() {
        let mut s = ProducerState::default();
        assert_eq!(
            s.check(&header(-1, -1, -1, 3, 0)).expect("plain"),
            Check::Append
        );
        assert!(matches!(
            s.check(&header(7, 0, 5, 3, 0)),
            Err(Error::OutOfOrderSequence { expected: 0, .. })
        ));
        assert_eq!(
            s.check(&header(7, 0, 0, 3, 0)).expect("first"),
            Check::Append
        );
        s.record(&header(7, 0, 0, 3, 10));
        s.record(&header(7, 0, 3, 2, 13));
        assert_eq!(
            s.check(&header(7, 0, 0, 3, 0)).expect("retry"),
            Check::Duplicate {
                first_offset: 10,
                last_offset: 12
            }
        );
        assert_eq!(
            s.check(&header(7, 0, 5, 1, 0)).expect("next"),
            Check::Append
        );
        assert!(matches!(
            s.check(&header(7, 0, 6, 1, 0)),
            Err(Error::OutOfOrderSequence {
                expected: 5,
                got: 6,
                ..
            })
        ));
        assert!(matches!(
            s.check(&header(7, -1, 5, 1, 0)),
            Err(Error::InvalidProducerEpoch { .. })
        ));
        assert!(matches!(
            s.check(&header(7, 1, 5, 1, 0)),
            Err(Error::OutOfOrderSequence { expected: 0, .. })
        ));
        assert_eq!(
            s.check(&header(7, 1, 0, 1, 0)).expect("new epoch"),
            Check::Append
        );
        s.record(&header(7, 1, 0, 1, 15));
        assert_eq!(s.get(7).map(|e| (e.epoch, e.batches.len())), Some((1, 1)));
    }

    #[test]
    fn keeps_five_batches_and_wraps_sequences() {
        let mut s = ProducerState::default();
        for i in 0..8 {
            s.record(&header(1, 0, i * 2, 2, i64::from(i) * 2));
        }
        assert_eq!(s.get(1).map(|e| e.batches.len()), Some(BATCHES_KEPT));
        assert!(
            matches!(
                s.check(&header(1, 0, 0, 2, 0)),
                Err(Error::OutOfOrderSequence { .. })
            ),
            "too old to dedupe"
        );
        let mut w = ProducerState::default();
        w.record(&header(2, 0, i32::MAX - 1, 2, 0));
        assert_eq!(
            w.check(&header(2, 0, 0, 1, 0)).expect("wrapped"),
            Check::Append
        );
    }

    #[test]
    fn snapshot_round_trip_and_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = ProducerState::default();
        s.record(&header(1, 0, 0, 2, 0));
        s.record(&header(9, 3, 0, 1, 2));
        s.write_snapshot(dir.path(), 3).expect("write");
        s.write_snapshot(dir.path(), 5).expect("write newer");
        let snaps = list_snapshots(dir.path()).expect("list");
        assert_eq!(
            snaps.iter().map(|s| s.0).collect::<Vec<_>>(),
            [5],
            "older snapshots removed"
        );
        assert_eq!(ProducerState::read_snapshot(&snaps[0].1), Some(s));
        let mut bytes = fs::read(&snaps[0].1).expect("read");
        bytes[10] ^= 1;
        fs::write(&snaps[0].1, bytes).expect("damage");
        assert_eq!(ProducerState::read_snapshot(&snaps[0].1), None);
    }

    #[test]
    fn expiry_and_truncation() {
        let mut s = ProducerState::default();
        s.record(&header(1, 0, 0, 2, 0));
        s.record(&header(1, 0, 2, 2, 2));
        s.truncate_to(2);
        assert_eq!(s.get(1).map(|e| e.batches.len()), Some(1));
        assert_eq!(s.expire(999), 0);
        assert_eq!(s.expire(1001), 1);
        assert!(s.is_empty());
    }
}
