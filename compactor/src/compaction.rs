//! Log compaction (`cleanup.policy=compact`) of a replica's local log, as Kafka's cleaner
//! does it: the newest record of each key stays, at its offset; older ones go;
//! tombstones (null values) stay for `delete.retention.ms` after the first pass that
//! covered them, then go too.
//!
//! - **What may be cleaned**: the sealed segments below the high watermark, from the
//!   oldest, up to the first one holding a record younger than `min.compaction.lag.ms`;
//!   the active segment never.
//! - **When**: once the dirty part (what no pass cleaned yet) is at least
//!   `min.cleanable.dirty.ratio` of that, or a dirty record is older than
//!   `max.compaction.lag.ms`; and, to remove tombstones whose horizon passed, when the
//!   last pass is more than `delete.retention.ms` old (so a tombstone goes between one
//!   and two `delete.retention.ms` after the first pass that covered it).
//! - **A pass** maps each key of the dirty part to its newest offset, in a [`KeyMap`]
//!   bounded in bytes (Kafka's dedupe buffer); if it fills, the pass cleans up to the
//!   record it filled at, and the next pass goes on from there (so memory is bounded
//!   for any partition, a segment holding more keys than fit included). Then it
//!   rewrites every segment up to there, keeping a record unless the map holds a newer
//!   offset for its key, or it is a tombstone whose horizon passed; each copy is swapped
//!   in by the caller (under the log's lock), then the checkpoint moves.
//!
//! Dropping a record is safe against any map: a record goes only for a newer one of its
//! key, which is the newest the map knows, so it is kept (or is a tombstone past its
//! horizon: the key is deleted). A crash leaves each segment old or new (the swap is a
//! rename) and the checkpoint behind, so the next pass cleans again what was cleaned.
//!
//! Records without a key are kept (compacted topics refuse them on produce; older ones
//! may exist from before the policy changed). Producer state is unaffected: it is
//! rebuilt from snapshots taken at segment rolls, which compaction does not touch.

use std::collections::HashMap;
use std::path::Path;

use strata_log::compaction::{Checkpoint, Rewritten, Seen, for_each_record, rewrite_segment};
use strata_log::partition_log::ClosedSegmentInfo;

use crate::retention::Unit;

/// A topic's compaction settings (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionPolicy {
    pub min_cleanable_dirty_ratio: f64,
    pub min_compaction_lag_ms: i64,
    pub max_compaction_lag_ms: i64,
    pub delete_retention_ms: i64,
}

/// The newest offset of each key, bounded in bytes.
#[derive(Debug)]
pub struct KeyMap {
    latest: HashMap<Vec<u8>, i64>,
    bytes: usize,
    budget: usize,
}

/// What an entry costs beyond its key's bytes (hash table slot, vector header, offset).
const ENTRY_OVERHEAD: usize = 48;

impl KeyMap {
    pub fn with_budget(budget: usize) -> KeyMap {
        KeyMap {
            latest: HashMap::new(),
            bytes: 0,
            budget,
        }
    }

    /// Notes `offset` as the newest of `key`. `false` if the key is new and does not fit.
    pub fn offer(&mut self, key: &[u8], offset: i64) -> bool {
        if let Some(o) = self.latest.get_mut(key) {
            *o = (*o).max(offset);
            return true;
        }
        let cost = key.len() + ENTRY_OVERHEAD;
        if self.bytes + cost > self.budget {
            return false;
        }
        self.bytes += cost;
        self.latest.insert(key.to_vec(), offset);
        true
    }

    pub fn latest(&self, key: &[u8]) -> Option<i64> {
        self.latest.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

/// What compaction knows of the transactions of what it cleans.
#[derive(Clone, Copy)]
pub enum Txns<'a> {
    /// Every transaction below the cleanable end has ended, and this says which
    /// records were aborted (`(producer id, offset)`): a local log cleaned below its
    /// last stable offset. Aborted records go and never shadow a key; committed ones
    /// are like any other.
    Known(&'a dyn Fn(i64, i64) -> bool),
    /// Some markers may lie beyond what is cleaned (an archive): transactional records
    /// all stay, and none shadows a key.
    Unknown,
}

impl std::fmt::Debug for Txns<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Txns::Known(_) => "Known",
            Txns::Unknown => "Unknown",
        })
    }
}

impl Txns<'_> {
    /// Whether the record may enter the key map (shadow older records of its key).
    pub fn may_map(&self, transactional: bool, producer_id: i64, offset: i64) -> bool {
        match self {
            _ if !transactional => true,
            Txns::Known(aborted) => !aborted(producer_id, offset),
            Txns::Unknown => false,
        }
    }
}

/// Whether a record stays, given the newest offsets of the keys (`map`), when passes
/// first covered each offset (`checkpoint`), the time, and the transactions (`txns`).
pub fn keep(
    seen: &Seen,
    map: &KeyMap,
    checkpoint: &Checkpoint,
    now_ms: i64,
    delete_retention_ms: i64,
    txns: Txns<'_>,
) -> bool {
    if seen.transactional {
        match txns {
            Txns::Known(aborted) if aborted(seen.producer_id, seen.offset) => return false,
            Txns::Known(_) => {}
            Txns::Unknown => return true,
        }
    }
    let Some(key) = seen.key else {
        return true;
    };
    if map.latest(key).is_some_and(|newest| newest > seen.offset) {
        return false;
    }
    if seen.tombstone {
        let passed = checkpoint.first_cleaned_ms(seen.offset);
        return passed.is_none_or(|at| now_ms.saturating_sub(at) <= delete_retention_ms);
    }
    true
}

/// What may be cleaned now, and whether a pass is due.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanable {
    /// Segments wholly below this may be cleaned.
    pub upto: i64,
    /// Dirty bytes over the cleanable bytes (0 when nothing is cleanable).
    pub dirty_ratio: f64,
    pub due: bool,
}

/// Which of `segments` (sealed, below the high watermark, oldest first) may be cleaned
/// with the dirty part starting at the checkpoint's `first_dirty`.
pub fn cleanable(
    segments: &[ClosedSegmentInfo],
    checkpoint: &Checkpoint,
    now_ms: i64,
    policy: CompactionPolicy,
) -> Cleanable {
    let units: Vec<Unit> = segments
        .iter()
        .map(|s| Unit {
            first_offset: s.base_offset,
            next_offset: s.next_offset,
            max_timestamp_ms: s.max_timestamp,
            size_bytes: s.size_bytes,
        })
        .collect();
    cleanable_units(&units, checkpoint, now_ms, policy)
}

/// [`cleanable`] over segments or archived objects alike.
pub fn cleanable_units(
    units: &[Unit],
    checkpoint: &Checkpoint,
    now_ms: i64,
    policy: CompactionPolicy,
) -> Cleanable {
    let first_dirty = checkpoint.first_dirty;
    let prefix: Vec<&Unit> = units
        .iter()
        .take_while(|u| now_ms.saturating_sub(u.max_timestamp_ms) >= policy.min_compaction_lag_ms)
        .collect();
    let upto = prefix.last().map_or(first_dirty, |u| u.next_offset);
    let total: u64 = prefix.iter().map(|u| u.size_bytes).sum();
    let dirty: Vec<&&Unit> = prefix
        .iter()
        .filter(|u| u.next_offset > first_dirty && u.next_offset > u.first_offset)
        .collect();
    let dirty_bytes: u64 = dirty.iter().map(|u| u.size_bytes).sum();
    let dirty_ratio = if total == 0 {
        0.0
    } else {
        dirty_bytes as f64 / total as f64
    };
    let overdue = dirty
        .iter()
        .any(|u| now_ms.saturating_sub(u.max_timestamp_ms) > policy.max_compaction_lag_ms);
    let sweep = first_dirty > 0
        && checkpoint.last_pass_ms >= 0
        && now_ms.saturating_sub(checkpoint.last_pass_ms) > policy.delete_retention_ms;
    Cleanable {
        upto,
        dirty_ratio,
        due: (dirty_bytes > 0 && (dirty_ratio >= policy.min_cleanable_dirty_ratio || overdue))
            || (sweep && upto > 0),
    }
}

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Everything below was cleaned.
    pub upto: i64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    pub segments_swapped: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    #[error("the key map ({budget} bytes) cannot hold one key of {segment}")]
    KeyMapTooSmall { budget: usize, segment: String },
}

/// One pass over the log in `dir`, whose cleanable sealed segments are `segments`
/// (oldest first): maps, rewrites, and calls `swap` for each copy that removed
/// something (which swaps it in under the log's lock and says whether it did). Returns
/// `None` when no pass is due.
pub fn compact(
    dir: &Path,
    segments: &[ClosedSegmentInfo],
    policy: CompactionPolicy,
    key_map_bytes: usize,
    now_ms: i64,
    txns: Txns<'_>,
    mut swap: impl FnMut(&Rewritten) -> strata_log::Result<bool>,
) -> Result<Option<Cleaned>, CompactionError> {
    let mut checkpoint = Checkpoint::load(dir);
    let plan = cleanable(segments, &checkpoint, now_ms, policy);
    if !plan.due {
        return Ok(None);
    }
    // Map the dirty part in offset order until the map is full: every key below
    // `mapped_upto` is mapped. (What a segment the map filled in added stays: a map of
    // any prefix is safe.)
    let first_dirty = checkpoint.first_dirty;
    let mut map = KeyMap::with_budget(key_map_bytes);
    let mut mapped_upto = first_dirty;
    let mut full = false;
    for s in segments
        .iter()
        .filter(|s| s.next_offset <= plan.upto && s.next_offset > first_dirty)
    {
        for_each_record(&s.path, |h, r| {
            if full
                || r.offset < first_dirty
                || !txns.may_map(h.is_transactional(), h.producer_id, r.offset)
            {
                return;
            }
            if let Some(k) = &r.key
                && !map.offer(k, r.offset)
            {
                full = true;
                mapped_upto = r.offset;
            }
        })?;
        if full {
            break;
        }
        mapped_upto = s.next_offset;
    }
    let anything_dirty = segments
        .iter()
        .any(|s| s.next_offset > checkpoint.first_dirty && s.next_offset <= plan.upto);
    if anything_dirty && mapped_upto <= first_dirty {
        let segment = segments
            .iter()
            .find(|s| s.next_offset > checkpoint.first_dirty)
            .map_or_else(String::new, |s| s.path.display().to_string());
        return Err(CompactionError::KeyMapTooSmall {
            budget: key_map_bytes,
            segment,
        });
    }
    // A sweep with nothing dirty cleans what was cleaned before.
    let mapped_upto = if anything_dirty {
        mapped_upto
    } else {
        checkpoint.first_dirty.min(plan.upto)
    };
    let mut done = Cleaned {
        upto: mapped_upto,
        ..Cleaned::default()
    };
    for s in segments.iter().filter(|s| s.base_offset < mapped_upto) {
        let rewritten = rewrite_segment(s, |seen| {
            keep(
                seen,
                &map,
                &checkpoint,
                now_ms,
                policy.delete_retention_ms,
                txns,
            )
        })?;
        done.bytes_before += s.size_bytes;
        if rewritten.records_kept == rewritten.records_in {
            std::fs::remove_file(&rewritten.path).map_err(|source| strata_log::Error::Io {
                context: "remove unneeded cleaned copy",
                path: rewritten.path.clone(),
                source,
            })?;
            done.bytes_after += s.size_bytes;
            continue;
        }
        crate::failpoint::crash("compaction.after_rewrite");
        if swap(&rewritten)? {
            done.segments_swapped += 1;
            done.bytes_after += rewritten.bytes;
            done.records_removed += rewritten.records_in - rewritten.records_kept;
        } else {
            done.bytes_after += s.size_bytes;
        }
    }
    crate::failpoint::crash("compaction.before_checkpoint");
    checkpoint.passed(mapped_upto, now_ms);
    checkpoint.save(dir)?;
    Ok(Some(done))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(first: i64, next: i64, max_ts: i64) -> Unit {
        Unit {
            first_offset: first,
            next_offset: next,
            max_timestamp_ms: max_ts,
            size_bytes: 100,
        }
    }

    const POLICY: CompactionPolicy = CompactionPolicy {
        min_cleanable_dirty_ratio: 0.5,
        min_compaction_lag_ms: 1_000,
        max_compaction_lag_ms: 60_000,
        delete_retention_ms: 10_000,
    };

    #[test]
    fn the_lags_and_the_dirty_ratio_decide_when_a_pass_is_due() {
        let log = [unit(0, 10, 1_000), unit(10, 20, 2_000), unit(20, 30, 9_500)];
        let fresh = Checkpoint::default();
        // At 10_000 the third unit is younger than min.compaction.lag.ms: not cleanable.
        let c = cleanable_units(&log, &fresh, 10_000, POLICY);
        assert_eq!((c.upto, c.due), (20, true));
        assert_eq!(c.dirty_ratio, 1.0);
        // Cleaned up to 10: dirty 100 of 200 = 0.5, due; up to 15 inside the second:
        // still dirty (the unit is).
        let cleaned = |first_dirty| Checkpoint {
            first_dirty,
            passes: vec![(first_dirty, 9_000)],
            last_pass_ms: 9_000,
        };
        let c = cleanable_units(&log, &cleaned(10), 10_000, POLICY);
        assert_eq!((c.dirty_ratio, c.due), (0.5, true));
        // Nothing dirty below the lag bound: not due, until the sweep for tombstones
        // (the last pass more than delete.retention.ms ago).
        assert!(!cleanable_units(&log, &cleaned(20), 10_000, POLICY).due);
        assert!(cleanable_units(&log, &cleaned(20), 19_001, POLICY).due);
        // A ratio the dirty part does not reach: due only once a dirty record is older
        // than max.compaction.lag.ms.
        let strict = CompactionPolicy {
            min_cleanable_dirty_ratio: 0.9,
            ..POLICY
        };
        let c = cleanable_units(&log, &cleaned(10), 10_000, strict);
        assert!(!c.due);
        let c = cleanable_units(&log, &cleaned(10), 62_001, strict);
        assert!(c.due, "the second unit is past max.compaction.lag.ms");
    }

    #[test]
    fn a_key_map_holds_what_its_budget_allows() {
        let mut m = KeyMap::with_budget(2 * (3 + ENTRY_OVERHEAD));
        assert!(m.offer(b"abc", 1));
        assert!(m.offer(b"def", 2));
        assert!(m.offer(b"abc", 5), "a known key always fits");
        assert!(!m.offer(b"ghi", 6), "full");
        assert_eq!(
            (m.latest(b"abc"), m.latest(b"ghi"), m.len()),
            (Some(5), None, 2)
        );
    }
}
