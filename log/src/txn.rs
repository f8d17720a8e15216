//! Transactions as one partition sees them: the open transaction of each producer, the
//! control batches (commit and abort markers) that end them, the last stable offset, and
//! the index of aborted transactions that read_committed fetches return.
//!
//! Everything here is derived from the log, like the idempotent-producer state it lives
//! beside ([`crate::producer_state`]): a transactional data batch opens its producer's
//! transaction at its base offset, and a marker closes it. It is snapshotted with that
//! state and rebuilt from the batches after the snapshot, so it survives restarts,
//! truncation and replication unchanged.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, TimestampType};

use crate::batch::{self, BatchHeader};
use crate::reader::Reader;

/// How a transaction ended on this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

impl Marker {
    /// The control record type Kafka writes in the marker's key (0 abort, 1 commit).
    fn control_type(self) -> i16 {
        match self {
            Marker::Abort => 0,
            Marker::Commit => 1,
        }
    }
}

/// A marker as its control batch carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlRecord {
    pub marker: Marker,
    pub coordinator_epoch: i32,
}

/// The control batch that ends `producer_id`'s transaction with `marker`, as Kafka
/// writes it: transactional and control attributes, no sequence, one record whose key
/// is (version 0, type) and whose value is (version 0, coordinator epoch).
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    control: ControlRecord,
    timestamp_ms: i64,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&control.marker.control_type().to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&control.coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: timestamp_ms,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: Vec::new(),
    };
    batch::encode_records(&[record], Compression::None)
}

/// The marker a control batch carries; `None` for a batch that is not a marker (Kafka
/// has other control types, which end no transaction) or cannot be decoded.
pub fn parse_marker(bytes: &[u8]) -> Option<ControlRecord> {
    let header = BatchHeader::parse(bytes)?;
    if !header.is_control() {
        return None;
    }
    let records = batch::decode_records(bytes).ok()?;
    let record = records.first()?;
    let key = record.key.as_ref()?;
    let marker = match i16::from_be_bytes([*key.get(2)?, *key.get(3)?]) {
        0 => Marker::Abort,
        1 => Marker::Commit,
        _ => return None,
    };
    let value = record.value.as_deref().unwrap_or_default();
    let coordinator_epoch = match value.get(2..6) {
        Some(b) => i32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    };
    Some(ControlRecord {
        marker,
        coordinator_epoch,
    })
}

/// One aborted transaction, as Kafka's transaction index keeps it: its producer, its
/// first offset here, the offset of its abort marker, and the last stable offset right
/// after the marker (which lets a reader stop collecting: every transaction that began
/// below it has ended by then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

/// A transaction that has ended here but whose marker the high watermark may not cover
/// yet: until it does, the transaction still holds the last stable offset back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub producer_id: i64,
    pub first_offset: i64,
    pub marker_offset: i64,
}

/// The transactions of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transactions {
    /// Open transactions: producer id → first offset.
    open: BTreeMap<i64, i64>,
    /// The same, ordered by first offset, for the last stable offset.
    by_first: BTreeSet<(i64, i64)>,
    ended: VecDeque<Ended>,
    /// Aborted transactions by marker offset, oldest first.
    aborted: VecDeque<AbortedTxn>,
}

impl Transactions {
    /// The first offset of `producer_id`'s open transaction here, if it has one.
    pub fn open_first_offset(&self, producer_id: i64) -> Option<i64> {
        self.open.get(&producer_id).copied()
    }

    /// Open transactions as (producer id, first offset).
    pub fn open(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.open.iter().map(|(&p, &f)| (p, f))
    }

    /// Notes a transactional data batch (offsets assigned): it opens its producer's
    /// transaction, unless one is open already.
    pub fn note_data(&mut self, header: &BatchHeader) {
        if let std::collections::btree_map::Entry::Vacant(e) = self.open.entry(header.producer_id) {
            e.insert(header.base_offset);
            self.by_first
                .insert((header.base_offset, header.producer_id));
        }
    }

    /// Notes a marker at `offset` ending `producer_id`'s transaction.
    pub fn note_marker(&mut self, producer_id: i64, marker: Marker, offset: i64) {
        let first = match self.open.remove(&producer_id) {
            Some(first) => {
                self.by_first.remove(&(first, producer_id));
                first
            }
            // A marker for a transaction that wrote nothing here (or whose data lies
            // below where this replica's log begins): it ends nothing.
            None => offset,
        };
        self.ended.push_back(Ended {
            producer_id,
            first_offset: first,
            marker_offset: offset,
        });
        if marker == Marker::Abort && first < offset {
            let lso = self.first_open().map_or(offset + 1, |f| f.min(offset + 1));
            self.aborted.push_back(AbortedTxn {
                producer_id,
                first_offset: first,
                last_offset: offset,
                last_stable_offset: lso,
            });
        }
    }

    fn first_open(&self) -> Option<i64> {
        self.by_first.iter().next().map(|&(f, _)| f)
    }

    /// The last stable offset for a high watermark of `high_watermark`: below the first
    /// offset of every transaction still open, or ended by a marker the watermark does
    /// not cover yet; at most the watermark. Forgets ended transactions it covers.
    pub fn last_stable_offset(&mut self, high_watermark: i64) -> i64 {
        while self
            .ended
            .front()
            .is_some_and(|e| e.marker_offset < high_watermark)
        {
            self.ended.pop_front();
        }
        let ended = self.ended.iter().map(|e| e.first_offset).min();
        [Some(high_watermark), self.first_open(), ended]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(high_watermark)
    }

    /// The aborted transactions a read_committed fetch of `[from, upto)` must return:
    /// those with records in that range (first offset below `upto`, marker at or after
    /// `from`).
    pub fn aborted_between(&self, from: i64, upto: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        self.aborted
            .range(start..)
            .filter(|a| a.first_offset < upto)
            .copied()
            .collect()
    }

    /// Every aborted transaction remembered, oldest marker first.
    pub fn aborted(&self) -> impl Iterator<Item = &AbortedTxn> {
        self.aborted.iter()
    }

    /// Forgets aborted transactions whose marker lies below `log_start`: nothing a
    /// reader can fetch any more.
    pub fn forget_below(&mut self, log_start: i64) {
        while self
            .aborted
            .front()
            .is_some_and(|a| a.last_offset < log_start)
        {
            self.aborted.pop_front();
        }
    }

    /// Whether `offset` of `producer_id` lies in a transaction that was aborted.
    pub fn is_aborted(&self, producer_id: i64, offset: i64) -> bool {
        let start = self.aborted.partition_point(|a| a.last_offset < offset);
        self.aborted
            .range(start..)
            .any(|a| a.producer_id == producer_id && a.first_offset <= offset)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.open.len() as u32).to_be_bytes());
        for (&pid, &first) in &self.open {
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(&first.to_be_bytes());
        }
        out.extend_from_slice(&(self.ended.len() as u32).to_be_bytes());
        for e in &self.ended {
            for v in [e.producer_id, e.first_offset, e.marker_offset] {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        out.extend_from_slice(&(self.aborted.len() as u32).to_be_bytes());
        for a in &self.aborted {
            for v in [
                a.producer_id,
                a.first_offset,
                a.last_offset,
                a.last_stable_offset,
            ] {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Option<Transactions> {
        let mut t = Transactions::default();
        for _ in 0..r.u32()? {
            let (pid, first) = (r.i64()?, r.i64()?);
            t.open.insert(pid, first);
            t.by_first.insert((first, pid));
        }
        for _ in 0..r.u32()? {
            t.ended.push_back(Ended {
                producer_id: r.i64()?,
                first_offset: r.i64()?,
                marker_offset: r.i64()?,
            });
        }
        for _ in 0..r.u32()? {
            t.aborted.push_back(AbortedTxn {
                producer_id: r.i64()?,
                first_offset: r.i64()?,
                last_offset: r.i64()?,
                last_stable_offset: r.i64()?,
            });
        }
        Some(t)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn data(pid: i64, offset: i64) -> BatchHeader {
        let mut h =
            BatchHeader::parse(&batch::example_batch(1, 1, 0, Compression::None)).expect("header");
        h.producer_id = pid;
        h.base_offset = offset;
        h
    }

    #[test]
    fn markers_round_trip() {
        for marker in [Marker::Abort, Marker::Commit] {
            let control = ControlRecord {
                marker,
                coordinator_epoch: 7,
            };
            let bytes = marker_batch(42, 3, control, 1_000);
            let header = BatchHeader::parse(&bytes).expect("header");
            assert!(header.is_control() && header.is_transactional());
            assert_eq!((header.producer_id, header.producer_epoch), (42, 3));
            assert_eq!(header.record_count, 1);
            header.verify(&bytes).expect("crc");
            assert_eq!(parse_marker(&bytes), Some(control));
        }
        assert_eq!(
            parse_marker(&batch::example_batch(1, 1, 0, Compression::None)),
            None
        );
    }

    /// The last stable offset stops at the first open transaction and at an ended one
    /// whose marker the watermark does not cover; aborted transactions are found by
    /// range and carry the stable offset after their marker.
    #[test]
    fn last_stable_offset_and_aborted_index() {
        let mut t = Transactions::default();
        t.note_data(&data(1, 10));
        t.note_data(&data(2, 12));
        t.note_data(&data(1, 14));
        assert_eq!(t.open_first_offset(1), Some(10));
        assert_eq!(t.last_stable_offset(20), 10);
        t.note_marker(1, Marker::Abort, 20);
        assert_eq!(t.last_stable_offset(20), 10, "marker not replicated yet");
        assert_eq!(t.last_stable_offset(21), 12, "producer 2 still open");
        t.note_marker(2, Marker::Commit, 21);
        assert_eq!(t.last_stable_offset(22), 22);
        assert_eq!(
            t.aborted_between(0, 11),
            vec![AbortedTxn {
                producer_id: 1,
                first_offset: 10,
                last_offset: 20,
                last_stable_offset: 12,
            }]
        );
        assert!(t.aborted_between(21, 30).is_empty());
        assert!(t.aborted_between(0, 10).is_empty());
        assert!(t.is_aborted(1, 14) && !t.is_aborted(2, 14) && !t.is_aborted(1, 21));
        let mut encoded = Vec::new();
        t.encode(&mut encoded);
        let decoded = Transactions::decode(&mut Reader { b: &encoded }).expect("decode");
        assert_eq!(decoded, t);
        t.forget_below(21);
        assert_eq!(t.aborted().count(), 0);
    }
}
