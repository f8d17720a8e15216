//! The manifest of archived segments: per partition, one entry per Parquet object in
//! object storage, contiguous in offsets.
//!
//! Invariant 5 (DESIGN.md): an object is uploaded first and then published here by one
//! short transaction. Publishing is idempotent: an entry whose offsets are already covered
//! is not added again (the object it names becomes an orphan for the compactor), so a
//! crash or retry between upload and publish leaves neither a gap nor a double entry.
//!
//! The partition's log start (moved by retention and DeleteRecords) lives here too: one
//! transaction advances it and retires the entries wholly below it, which become
//! [`Garbage`]: the object stays in the store until the grace period for readers that
//! planned on it has passed, and only then does the compactor delete it. An object is
//! therefore never deleted while a manifest names it, and never named once deleted.

use std::collections::BTreeMap;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kv::{KvTransaction, prefix_end};
use crate::topics::{Metastore, decode, encode};

/// One archived object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub first_offset: i64,
    pub last_offset: i64,
    pub min_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
    pub record_count: i64,
    pub size_bytes: u64,
    /// Object path relative to the store's root.
    pub path: String,
    /// CRC32C of the object's bytes.
    pub checksum: u32,
    /// The aborted transactions whose abort markers the object holds, for read_committed
    /// fetches of archived offsets (a transaction's records may lie in earlier objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aborted: Vec<ArchivedAbort>,
}

/// One aborted transaction of an archived object: Kafka's transaction-index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedAbort {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The offset of the abort marker.
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

/// An archived object that no manifest names any more (retired below the log start, or
/// its topic deleted), waiting to be deleted from the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Garbage {
    pub topic: String,
    pub partition: i32,
    /// Object path relative to the store's root.
    pub path: String,
    pub size_bytes: u64,
    /// When it left the manifest (wall-clock ms): the grace period counts from here.
    pub retired_at_ms: i64,
}

/// Where compaction of a partition's archive stands (the archive's counterpart of the
/// cleaner checkpoint a local log keeps in its directory): the dirty part starts at
/// `first_dirty`; `(upto, at_ms)` per pass that cleaned everything below `upto`
/// (tombstone horizons count from the first that covered them); the last pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveCleaner {
    pub first_dirty: i64,
    pub passes: Vec<(i64, i64)>,
    pub last_pass_ms: i64,
}

impl Default for ArchiveCleaner {
    fn default() -> Self {
        ArchiveCleaner {
            first_dirty: 0,
            passes: Vec::new(),
            last_pass_ms: -1,
        }
    }
}

/// Who compacts a partition's archive, until when.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CompactorLease {
    owner: String,
    until_ms: i64,
}

/// A partition's log start, as stored.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct LogStart {
    partition: i32,
    offset: i64,
}

/// What publishing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    Added,
    /// The offsets were already archived (a retried upload); nothing changed.
    AlreadyCovered,
}

impl Metastore {
    fn manifest_prefix(&self, topic: &str, partition: i32) -> Vec<u8> {
        self.key()
            .str("manifest")
            .str(topic)
            .u32(partition as u32)
            .into_bytes()
    }

    fn log_start_key(&self, topic: &str, partition: i32) -> Vec<u8> {
        self.key()
            .str("logstart")
            .str(topic)
            .u32(partition as u32)
            .into_bytes()
    }

    fn garbage_prefix(&self) -> Vec<u8> {
        self.key().str("garbage").into_bytes()
    }

    async fn read_log_start(txn: &mut dyn KvTransaction, key: &[u8]) -> Result<i64> {
        match txn.get(key).await? {
            Some(v) => Ok(decode::<LogStart>(key, &v)?.offset),
            None => Ok(0),
        }
    }

    /// Moves `entries` of a partition's manifest to the garbage list, in `txn`.
    pub(crate) fn retire_in(
        &self,
        txn: &mut dyn KvTransaction,
        topic: &str,
        partition: i32,
        entries: &[ManifestEntry],
        now_ms: i64,
    ) {
        for e in entries {
            let key = self
                .key()
                .str("manifest")
                .str(topic)
                .u32(partition as u32)
                .u64(e.first_offset as u64)
                .into_bytes();
            txn.clear(&key);
            let garbage = Garbage {
                topic: topic.to_string(),
                partition,
                path: e.path.clone(),
                size_bytes: e.size_bytes,
                retired_at_ms: now_ms,
            };
            let gkey = self.key().str("garbage").str(&e.path).into_bytes();
            txn.set(&gkey, &encode(&garbage));
        }
    }

    /// The log start of a partition as retention and DeleteRecords left it (0 if they
    /// never moved it). The first offset a client can read is this or, if higher, the
    /// first offset still held (archived or local).
    pub async fn log_start(&self, topic: &str, partition: i32) -> Result<i64> {
        let key = self.log_start_key(topic, partition);
        self.transact(move |txn| {
            let key = key.clone();
            async move { Self::read_log_start(txn, &key).await }.boxed()
        })
        .await
    }

    /// The log starts of every partition of `topic` that has one, by partition.
    pub async fn log_starts(&self, topic: &str) -> Result<BTreeMap<i32, i64>> {
        let prefix = self.key().str("logstart").str(topic).into_bytes();
        self.transact(move |txn| {
            let prefix = prefix.clone();
            async move {
                let mut out = BTreeMap::new();
                for (k, v) in txn
                    .get_range(&prefix, &prefix_end(&prefix), 0, false)
                    .await?
                {
                    let s: LogStart = decode(&k, &v)?;
                    out.insert(s.partition, s.offset);
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    /// Moves a partition's log start up to `offset` (never down) and, in the same
    /// transaction, retires the manifest entries wholly below it. Returns the log start
    /// afterwards and the entries retired (none on a retry whose first attempt did it).
    pub async fn advance_log_start(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        now_ms: i64,
    ) -> Result<(i64, Vec<ManifestEntry>)> {
        let key = self.log_start_key(topic, partition);
        let prefix = self.manifest_prefix(topic, partition);
        let topic = topic.to_string();
        let this = self.clone();
        self.transact(move |txn| {
            let (key, prefix, topic) = (key.clone(), prefix.clone(), topic.clone());
            let this = this.clone();
            async move {
                let start = Self::read_log_start(txn, &key).await?.max(offset);
                txn.set(
                    &key,
                    &encode(&LogStart {
                        partition,
                        offset: start,
                    }),
                );
                let mut retired = Vec::new();
                for (k, v) in txn
                    .get_range(&prefix, &prefix_end(&prefix), 0, false)
                    .await?
                {
                    let e: ManifestEntry = decode(&k, &v)?;
                    if e.last_offset >= start {
                        break;
                    }
                    retired.push(e);
                }
                this.retire_in(txn, &topic, partition, &retired, now_ms);
                Ok((start, retired))
            }
            .boxed()
        })
        .await
    }

    /// Replaces adjacent manifest entries `old` (oldest first) with `new`, which covers
    /// exactly their offsets (a merged or compacted object, already uploaded), in one
    /// transaction; the old objects become garbage. `false`, changing nothing, if the
    /// manifest no longer holds `old` as they were (retention or another compactor got
    /// there first): `new` is then an orphan.
    pub async fn replace_archived(
        &self,
        topic: &str,
        partition: i32,
        old: &[ManifestEntry],
        new: ManifestEntry,
        now_ms: i64,
    ) -> Result<bool> {
        let (Some(first), Some(last)) = (old.first(), old.last()) else {
            return Ok(false);
        };
        if new.first_offset != first.first_offset || new.last_offset != last.last_offset {
            return Err(Error::Invalid(format!(
                "object {}..={} does not cover the entries {}..={} it replaces",
                new.first_offset, new.last_offset, first.first_offset, last.last_offset
            )));
        }
        let keys: Vec<Vec<u8>> = old
            .iter()
            .map(|e| {
                self.key()
                    .str("manifest")
                    .str(topic)
                    .u32(partition as u32)
                    .u64(e.first_offset as u64)
                    .into_bytes()
            })
            .collect();
        let (topic, old, this) = (topic.to_string(), old.to_vec(), self.clone());
        self.transact(move |txn| {
            let (keys, topic, old, new, this) = (
                keys.clone(),
                topic.clone(),
                old.clone(),
                new.clone(),
                this.clone(),
            );
            async move {
                for (k, want) in keys.iter().zip(&old) {
                    match txn.get(k).await? {
                        Some(v) if decode::<ManifestEntry>(k, &v)? == *want => {}
                        // A retry whose first attempt committed finds `new` in place.
                        Some(v) if decode::<ManifestEntry>(k, &v)? == new => return Ok(true),
                        _ => return Ok(false),
                    }
                }
                this.retire_in(txn, &topic, partition, &old, now_ms);
                txn.set(&keys[0], &encode(&new));
                Ok(true)
            }
            .boxed()
        })
        .await
    }

    fn archive_cleaner_key(&self, topic: &str, partition: i32) -> Vec<u8> {
        self.key()
            .str("archivecleaner")
            .str(topic)
            .u32(partition as u32)
            .into_bytes()
    }

    /// Where compaction of a partition's archive stands.
    pub async fn archive_cleaner(&self, topic: &str, partition: i32) -> Result<ArchiveCleaner> {
        let key = self.archive_cleaner_key(topic, partition);
        self.transact(move |txn| {
            let key = key.clone();
            async move {
                match txn.get(&key).await? {
                    Some(v) => decode(&key, &v),
                    None => Ok(ArchiveCleaner::default()),
                }
            }
            .boxed()
        })
        .await
    }

    pub async fn save_archive_cleaner(
        &self,
        topic: &str,
        partition: i32,
        cleaner: &ArchiveCleaner,
    ) -> Result<()> {
        let (key, value) = (self.archive_cleaner_key(topic, partition), encode(cleaner));
        self.transact(move |txn| {
            txn.set(&key, &value);
            async { Ok(()) }.boxed()
        })
        .await
    }

    /// Claims (or renews) the compactor lease of a partition for `owner` until
    /// `now_ms + ttl_ms`: granted if no one holds it, it ran out, or `owner` holds it.
    /// One compactor (inside an agent, or `strata compactor`) works on a partition's
    /// archive at a time.
    pub async fn claim_compactor(
        &self,
        topic: &str,
        partition: i32,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let key = self
            .key()
            .str("compactorlease")
            .str(topic)
            .u32(partition as u32)
            .into_bytes();
        let owner = owner.to_string();
        self.transact(move |txn| {
            let (key, owner) = (key.clone(), owner.clone());
            async move {
                if let Some(v) = txn.get(&key).await? {
                    let held: CompactorLease = decode(&key, &v)?;
                    if held.owner != owner && held.until_ms > now_ms {
                        return Ok(false);
                    }
                }
                let lease = CompactorLease {
                    owner,
                    until_ms: now_ms + ttl_ms,
                };
                txn.set(&key, &encode(&lease));
                Ok(true)
            }
            .boxed()
        })
        .await
    }

    /// Up to `limit` archived objects waiting to be deleted, oldest path first.
    pub async fn garbage(&self, limit: usize) -> Result<Vec<Garbage>> {
        let prefix = self.garbage_prefix();
        self.transact(move |txn| {
            let prefix = prefix.clone();
            async move {
                let mut out = Vec::new();
                for (k, v) in txn
                    .get_range(&prefix, &prefix_end(&prefix), limit, false)
                    .await?
                {
                    out.push(decode(&k, &v)?);
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    /// Forgets garbage whose objects were deleted from the store.
    pub async fn forget_garbage(&self, paths: &[String]) -> Result<()> {
        let keys: Vec<Vec<u8>> = paths
            .iter()
            .map(|p| self.key().str("garbage").str(p).into_bytes())
            .collect();
        self.transact(move |txn| {
            for k in &keys {
                txn.clear(k);
            }
            async { Ok(()) }.boxed()
        })
        .await
    }

    /// Publishes an uploaded object. It must continue the manifest (start right after the
    /// last entry), or start it. An object wholly below the log start is not published
    /// (retention passed it while it was uploaded): it is left for collection.
    pub async fn publish_archived(
        &self,
        topic: &str,
        partition: i32,
        entry: ManifestEntry,
    ) -> Result<Published> {
        let prefix = self.manifest_prefix(topic, partition);
        let key = self
            .key()
            .str("manifest")
            .str(topic)
            .u32(partition as u32)
            .u64(entry.first_offset as u64)
            .into_bytes();
        let start_key = self.log_start_key(topic, partition);
        self.transact(move |txn| {
            let (prefix, key, entry) = (prefix.clone(), key.clone(), entry.clone());
            let start_key = start_key.clone();
            async move {
                if entry.last_offset < Self::read_log_start(txn, &start_key).await? {
                    return Ok(Published::AlreadyCovered);
                }
                let last = txn.get_range(&prefix, &prefix_end(&prefix), 1, true).await?;
                if let Some((k, v)) = last.first() {
                    let last: ManifestEntry = decode(k, v)?;
                    if entry.last_offset <= last.last_offset {
                        return Ok(Published::AlreadyCovered);
                    }
                    if entry.first_offset != last.last_offset + 1 {
                        return Err(Error::Invalid(format!(
                            "archived object {}..={} does not continue the manifest, which ends at {}",
                            entry.first_offset, entry.last_offset, last.last_offset
                        )));
                    }
                }
                txn.set(&key, &encode(&entry));
                Ok(Published::Added)
            }
            .boxed()
        })
        .await
    }

    /// A partition's manifest, in offset order.
    pub async fn manifest(&self, topic: &str, partition: i32) -> Result<Vec<ManifestEntry>> {
        let prefix = self.manifest_prefix(topic, partition);
        self.transact(move |txn| {
            let prefix = prefix.clone();
            async move {
                let mut out = Vec::new();
                for (k, v) in txn
                    .get_range(&prefix, &prefix_end(&prefix), 0, false)
                    .await?
                {
                    out.push(decode(&k, &v)?);
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(first: i64, last: i64) -> ManifestEntry {
        ManifestEntry {
            first_offset: first,
            last_offset: last,
            min_timestamp_ms: 0,
            max_timestamp_ms: 0,
            record_count: last - first + 1,
            size_bytes: 10,
            path: format!("p/{first}"),
            checksum: 0,
            aborted: Vec::new(),
        }
    }

    #[tokio::test]
    async fn publishing_is_contiguous_and_idempotent() {
        for (_, m, _dir) in crate::test_metastores() {
            publishing_on(m).await;
        }
    }

    #[tokio::test]
    async fn the_log_start_retires_what_lies_below_it() {
        for (_, m, _dir) in crate::test_metastores() {
            log_start_on(m).await;
        }
    }

    async fn log_start_on(m: Metastore) {
        for (first, last) in [(0, 99), (100, 199), (200, 299)] {
            m.publish_archived("t", 0, entry(first, last))
                .await
                .expect("publish");
        }
        assert_eq!(m.log_start("t", 0).await.expect("read"), 0, "never moved");
        // Inside the second object: the first is retired, the second stays.
        let (start, _) = m
            .advance_log_start("t", 0, 150, 1_000)
            .await
            .expect("advance");
        assert_eq!(start, 150);
        let firsts = |m: Vec<ManifestEntry>| m.iter().map(|e| e.first_offset).collect::<Vec<_>>();
        assert_eq!(firsts(m.manifest("t", 0).await.expect("read")), [100, 200]);
        let garbage = m.garbage(10).await.expect("garbage");
        assert_eq!(
            garbage,
            [Garbage {
                topic: "t".to_string(),
                partition: 0,
                path: "p/0".to_string(),
                size_bytes: 10,
                retired_at_ms: 1_000,
            }]
        );
        // Never back.
        let (start, retired) = m.advance_log_start("t", 0, 20, 2_000).await.expect("again");
        assert_eq!((start, retired), (150, vec![]));
        // An upload that retention overtook is not published.
        m.advance_log_start("t", 1, 500, 2_000)
            .await
            .expect("other partition");
        assert_eq!(
            m.publish_archived("t", 1, entry(0, 99))
                .await
                .expect("late"),
            Published::AlreadyCovered
        );
        assert_eq!(
            m.log_starts("t").await.expect("starts"),
            BTreeMap::from([(0, 150), (1, 500)])
        );
        m.forget_garbage(&["p/0".to_string()])
            .await
            .expect("forget");
        assert!(m.garbage(10).await.expect("garbage").is_empty());
    }

    #[tokio::test]
    async fn merged_objects_replace_their_entries_in_one_step() {
        for (_, m, _dir) in crate::test_metastores() {
            replacing_on(m).await;
        }
    }

    async fn replacing_on(m: Metastore) {
        let olds = [entry(0, 9), entry(10, 19), entry(20, 29)];
        for e in &olds {
            m.publish_archived("t", 0, e.clone())
                .await
                .expect("publish");
        }
        let mut merged = entry(0, 19);
        merged.path = "p/merged".to_string();
        assert!(
            m.replace_archived("t", 0, &olds[..1], merged.clone(), 5)
                .await
                .is_err(),
            "does not cover what it replaces"
        );
        assert!(
            m.replace_archived("t", 0, &olds[..2], merged.clone(), 5)
                .await
                .expect("replace")
        );
        let got: Vec<(i64, String)> = m
            .manifest("t", 0)
            .await
            .expect("read")
            .into_iter()
            .map(|e| (e.first_offset, e.path))
            .collect();
        assert_eq!(got, [(0, "p/merged".to_string()), (20, "p/20".to_string())]);
        let mut garbage: Vec<String> = m
            .garbage(10)
            .await
            .expect("garbage")
            .into_iter()
            .map(|g| g.path)
            .collect();
        garbage.sort();
        assert_eq!(garbage, ["p/0", "p/10"]);
        // The old entries are gone: a second compactor's replacement changes nothing.
        let mut other = entry(0, 19);
        other.path = "p/other".to_string();
        assert!(
            !m.replace_archived("t", 0, &olds[..2], other, 6)
                .await
                .expect("replace")
        );
    }

    #[tokio::test]
    async fn one_compactor_holds_a_partition_at_a_time() {
        for (_, m, _dir) in crate::test_metastores() {
            assert!(
                m.claim_compactor("t", 0, "agent-1", 1_000, 0)
                    .await
                    .expect("claim")
            );
            assert!(
                !m.claim_compactor("t", 0, "compactor-x", 1_000, 500)
                    .await
                    .expect("held")
            );
            assert!(
                m.claim_compactor("t", 1, "compactor-x", 1_000, 500)
                    .await
                    .expect("another")
            );
            assert!(
                m.claim_compactor("t", 0, "agent-1", 1_000, 900)
                    .await
                    .expect("renew")
            );
            assert!(
                !m.claim_compactor("t", 0, "compactor-x", 1_000, 1_800)
                    .await
                    .expect("renewed")
            );
            assert!(
                m.claim_compactor("t", 0, "compactor-x", 1_000, 1_901)
                    .await
                    .expect("ran out")
            );
        }
    }

    async fn publishing_on(m: Metastore) {
        // Under injected "maybe committed" faults, a first publish can find that its own
        // earlier attempt already covered the offsets.
        let first = m
            .publish_archived("t", 0, entry(0, 99))
            .await
            .expect("first");
        assert!(matches!(
            first,
            Published::Added | Published::AlreadyCovered
        ));
        assert_eq!(
            m.publish_archived("t", 0, entry(0, 99))
                .await
                .expect("retry"),
            Published::AlreadyCovered
        );
        assert!(
            m.publish_archived("t", 0, entry(150, 199)).await.is_err(),
            "a gap"
        );
        m.publish_archived("t", 0, entry(100, 199))
            .await
            .expect("next");
        m.publish_archived("t", 1, entry(0, 5))
            .await
            .expect("other partition");
        let got: Vec<i64> = m
            .manifest("t", 0)
            .await
            .expect("read")
            .iter()
            .map(|e| e.first_offset)
            .collect();
        assert_eq!(got, [0, 100]);
    }
}
