//! The data lifecycle of the partitions on this agent: log compaction (every replica
//! cleans its own log), retention and DeleteRecords (the leader decides), and the
//! collection of archived objects that no manifest names.
//!
//! The rules are the compactor's ([`strata_compactor`]); this service applies them
//! where a partition's whole log is visible, at its leader, which sees the local
//! segments and reads the archive's manifest (Kafka's leader does the same with tiered
//! storage, KIP-405). A new log start is written to the metastore first, in the
//! transaction that retires the archived objects below it; then the local log moves
//! its start and deletes its segments below it. Followers learn the start from the
//! metastore (see [`crate::replicas::ReplicaManager::sync_log_starts`]) and delete
//! theirs. A crash between the two steps leaves local segments that the next pass (or
//! the next open) deletes; reads below the start are refused from the moment the
//! metastore has it on the leader, and the agent that leads next reads the start
//! before it serves.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_compactor::{Collected, Policy, Unit, retention_start};

use crate::error::{Error, Result};
use crate::partition::{Partition, PartitionError};
use crate::replicas::{ReplicaManager, TopicState};
use crate::tasks::Stopped;

/// How often and how patiently the lifecycle runs.
#[derive(Debug, Clone, Copy)]
pub struct LifecycleConfig {
    /// Kafka's `log.retention.check.interval.ms`.
    pub check_interval_ms: u64,
    /// How long an archived object no manifest names stays in the store before it is
    /// deleted (see `strata_compactor::gc`).
    pub archive_grace_ms: i64,
    /// Kafka's `log.cleaner.dedupe.buffer.size`: bytes of the key map one compaction
    /// pass may hold (the pass cleans less, and the next one goes on, when it fills).
    pub key_map_bytes: usize,
    /// Archived objects smaller than this are merged with their neighbours into objects
    /// of at most this size (0: never).
    pub merge_target_bytes: u64,
}

/// What the last pass did to one partition (for the operator API).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PartitionLifecycle {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub last_run_ms: i64,
    pub next_due_ms: i64,
    /// Bytes retention and compaction took from this partition since the agent
    /// started (local segments and archived objects).
    pub bytes_reclaimed: u64,
    /// For compacted topics: the dirty part's share of what may be cleaned, as of the
    /// last pass, and the records compaction removed since the agent started.
    pub dirty_ratio: Option<f64>,
    pub records_compacted_away: u64,
    /// Small archived objects merged into bigger ones since the agent started.
    pub objects_merged: u64,
    pub last_error: Option<String>,
}

pub struct Lifecycle {
    replicas: Arc<ReplicaManager>,
    config: LifecycleConfig,
    status: Mutex<BTreeMap<(String, i32), PartitionLifecycle>>,
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifecycle")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Lifecycle {
    pub fn new(replicas: Arc<ReplicaManager>, config: LifecycleConfig) -> Lifecycle {
        Lifecycle {
            replicas,
            config,
            status: Mutex::new(BTreeMap::new()),
        }
    }

    /// Per partition this agent leads: what the last pass did.
    pub fn status(&self) -> Vec<PartitionLifecycle> {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// DeleteRecords: moves the log start of a partition this agent leads up to
    /// `offset` (-1: the high watermark). Returns the log start afterwards (Kafka's low
    /// watermark). An offset beyond the high watermark, or below -1, is out of range.
    pub async fn delete_records(&self, topic: &str, partition: i32, offset: i64) -> Result<i64> {
        let state = self.replicas.topic(topic);
        let p = TopicState::served_in(state.as_ref(), topic, partition)?;
        let hw = p.high_watermark();
        let target = if offset == -1 { hw } else { offset };
        if !(0..=hw).contains(&target) {
            return Err(PartitionError::Log(strata_log::Error::OffsetOutOfRange {
                offset,
                log_start: self.replicas.log_start_offset(p).await,
                log_end: hw,
            })
            .into());
        }
        self.move_start(p, target).await?;
        Ok(self.replicas.log_start_offset(p).await)
    }

    /// Writes a new log start to the metastore, then applies it to the local log.
    /// Returns the bytes of the archived objects it retired.
    async fn move_start(&self, p: &Arc<Partition>, offset: i64) -> Result<u64> {
        let now = self.replicas.membership().clock().wall_ms();
        let (start, retired) = self
            .replicas
            .metastore()
            .advance_log_start(&p.topic, p.index, offset, now)
            .await?;
        self.replicas.archive().invalidate(&p.topic, p.index);
        strata_compactor::failpoint::crash("lifecycle.after_retire");
        let deleted = p.advance_start(start).await?;
        strata_compactor::failpoint::crash("lifecycle.after_local_delete");
        if deleted > 0 || !retired.is_empty() {
            tracing::info!(partition = %p.name(), log_start = start, local_segments = deleted, archived_objects = retired.len(), "moved the log start");
        }
        Ok(retired.iter().map(|e| e.size_bytes).sum())
    }

    /// One retention pass over a partition this agent leads: where `retention.ms` and
    /// `retention.bytes` put its log start, over the archived objects no longer local
    /// and the local segments. Returns the bytes it took.
    async fn retain(&self, p: &Arc<Partition>, policy: Policy, now_ms: i64) -> Result<u64> {
        let start = self.replicas.log_start_offset(p).await;
        let local_start = p.log_start_offset();
        let manifest = self
            .replicas
            .archive()
            .manifest(&p.topic, p.index, false)
            .await
            .map_err(|e| PartitionError::Archive(e.to_string()))?;
        let archived = manifest
            .iter()
            .filter(|e| e.last_offset >= start && e.last_offset < local_start)
            .map(|e| Unit {
                first_offset: e.first_offset,
                next_offset: e.last_offset + 1,
                max_timestamp_ms: e.max_timestamp_ms,
                size_bytes: e.size_bytes,
            });
        let (segments, kept_bytes) = p.retention_candidates();
        let local = segments.iter().map(|s| Unit {
            first_offset: s.base_offset,
            next_offset: s.next_offset,
            max_timestamp_ms: s.max_timestamp,
            size_bytes: s.size_bytes,
        });
        let units: Vec<Unit> = archived.chain(local).collect();
        let Some(new_start) = retention_start(&units, kept_bytes, now_ms, policy) else {
            return Ok(0);
        };
        if new_start <= start {
            return Ok(0);
        }
        let gone: u64 = units
            .iter()
            .take_while(|u| u.next_offset <= new_start)
            .map(|u| u.size_bytes)
            .sum();
        self.move_start(p, new_start).await?;
        Ok(gone)
    }

    /// One pass: compaction of every local replica (leader or follower: each cleans
    /// its own log, as in Kafka) whose topic compacts; retention over every partition
    /// led here whose topic deletes; then the collection of garbage and (for tiered
    /// partitions) orphans.
    pub async fn pass(&self) {
        let now = self.replicas.membership().clock().wall_ms();
        let next_due = now + self.config.check_interval_ms as i64;
        let mut compacted = BTreeMap::new();
        for topic in self.replicas.topics() {
            let Some(policy) = topic.config.compaction() else {
                continue;
            };
            for p in topic.local_partitions() {
                let outcome = p.compact(policy, self.config.key_map_bytes, now).await;
                match &outcome {
                    Ok((_, Some(done))) if done.segments_swapped > 0 => {
                        tracing::info!(partition = %p.name(), upto = done.upto, records_removed = done.records_removed, bytes_before = done.bytes_before, bytes_after = done.bytes_after, "compacted")
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(partition = %p.name(), error = %e, "compaction failed; will retry")
                    }
                }
                compacted.insert((p.topic.clone(), p.index), outcome);
            }
        }
        let mut seen = BTreeMap::new();
        for topic in self.replicas.topics() {
            let policy = topic.config.retention();
            for p in topic.led_partitions() {
                let outcome = match policy {
                    Some(policy) => self.retain(p, policy, now).await,
                    None => Ok(0),
                };
                let key = (p.topic.clone(), p.index);
                let mut entry = self
                    .status
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&key)
                    .cloned()
                    .unwrap_or_default();
                entry.topic = p.topic.clone();
                entry.partition = p.index;
                entry.last_run_ms = now;
                entry.next_due_ms = next_due;
                match outcome {
                    Ok(bytes) => {
                        entry.bytes_reclaimed += bytes;
                        entry.last_error = None;
                    }
                    Err(e) => {
                        tracing::warn!(partition = %p.name(), error = %e, "retention failed; will retry");
                        entry.last_error = Some(e.to_string());
                    }
                }
                match compacted.remove(&key) {
                    Some(Ok((ratio, done))) => {
                        entry.dirty_ratio = Some(ratio);
                        if let Some(done) = done {
                            entry.bytes_reclaimed +=
                                done.bytes_before.saturating_sub(done.bytes_after);
                            entry.records_compacted_away += done.records_removed;
                        }
                    }
                    Some(Err(e)) => entry.last_error = Some(e.to_string()),
                    None => entry.dirty_ratio = None,
                }
                entry.log_start_offset = self.replicas.log_start_offset(p).await;
                if topic.config.tiered()
                    && let Some(policy) = topic.config.compaction()
                {
                    match self.compact_archive(p, policy, now).await {
                        Ok(Some(removed)) => {
                            entry.records_compacted_away += removed;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(partition = %p.name(), error = %e, "cannot compact the archive; will retry");
                            entry.last_error = Some(e.to_string());
                        }
                    }
                }
                if topic.config.tiered() {
                    match self.merge_small_objects(p, now).await {
                        Ok(Some((merged, bytes))) => {
                            entry.objects_merged += merged as u64;
                            tracing::info!(partition = %p.name(), objects = merged, bytes, "merged small archived objects");
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(partition = %p.name(), error = %e, "cannot merge small archived objects; will retry");
                            entry.last_error = Some(e.to_string());
                        }
                    }
                    if let Err(e) = self.collect_orphans(p, now).await {
                        tracing::warn!(partition = %p.name(), error = %e, "cannot collect orphaned archive objects");
                    }
                }
                seen.insert(key, entry);
            }
        }
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = seen;
        let archive = self.replicas.archive().archive();
        let metastore = self.replicas.metastore();
        match strata_compactor::collect_garbage(
            metastore,
            archive,
            now,
            self.config.archive_grace_ms,
        )
        .await
        {
            Ok(c) if c.objects > 0 => {
                tracing::info!(
                    objects = c.objects,
                    bytes = c.bytes,
                    "collected archived objects past their grace period"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot collect archived garbage"),
        }
    }

    /// Merges the first run of adjacent archived objects that are each smaller than
    /// the target and together at most the target (two or more), if there is one:
    /// download, merge, upload under a new name, then swap into the manifest in one
    /// transaction (the old objects become garbage). A crash or a lost race leaves the
    /// new object an orphan, collected later; nothing is deleted before the swap.
    /// Returns how many objects were merged and the merged size.
    async fn merge_small_objects(
        &self,
        p: &Partition,
        now_ms: i64,
    ) -> Result<Option<(usize, u64)>> {
        let target = self.config.merge_target_bytes;
        if target == 0 {
            return Ok(None);
        }
        let reader = self.replicas.archive();
        let archive_error = |e: strata_tiering::Error| PartitionError::Archive(e.to_string());
        let manifest = reader
            .manifest(&p.topic, p.index, true)
            .await
            .map_err(archive_error)?;
        let Some(run) = small_run(&manifest, target) else {
            return Ok(None);
        };
        let entry =
            strata_tiering::merge::merge_and_upload(reader.archive(), &p.topic, p.index, run)
                .await
                .map_err(archive_error)?;
        strata_compactor::failpoint::crash("merge.after_upload");
        let swapped = self
            .replicas
            .metastore()
            .replace_archived(&p.topic, p.index, run, entry.clone(), now_ms)
            .await?;
        reader.invalidate(&p.topic, p.index);
        if !swapped {
            tracing::info!(partition = %p.name(), object = %entry.path, "the manifest changed under a merge; the merged object is left for collection");
            return Ok(None);
        }
        Ok(Some((run.len(), entry.size_bytes)))
    }

    /// One compaction pass over a partition's archive (for compacted, tiered topics),
    /// by the rules of [`strata_compactor::compaction`]: the keys of the dirty objects
    /// are mapped (objects are read one at a time; the map is bounded, and a pass that
    /// fills it stops there); every object up to there is rewritten with what stays,
    /// uploaded under a new name and swapped into the manifest in place of the old one
    /// (which becomes garbage), keeping its offset range, so that the manifest stays
    /// contiguous; an object left with no record becomes an entry without one. The
    /// archive's checkpoint (in the metastore: leadership moves) moves last. Returns the
    /// records removed, if a pass was due.
    async fn compact_archive(
        &self,
        p: &Partition,
        policy: strata_compactor::CompactionPolicy,
        now_ms: i64,
    ) -> Result<Option<u64>> {
        use strata_compactor::KeyMap;
        use strata_log::compaction::Checkpoint;
        let reader = self.replicas.archive();
        let metastore = self.replicas.metastore();
        let archive_error = |e: strata_tiering::Error| PartitionError::Archive(e.to_string());
        let manifest = reader
            .manifest(&p.topic, p.index, true)
            .await
            .map_err(archive_error)?;
        let stored = metastore.archive_cleaner(&p.topic, p.index).await?;
        let checkpoint = Checkpoint {
            first_dirty: stored.first_dirty,
            passes: stored.passes.clone(),
            last_pass_ms: stored.last_pass_ms,
        };
        let units: Vec<Unit> = manifest
            .iter()
            .map(|e| Unit {
                first_offset: e.first_offset,
                next_offset: e.last_offset + 1,
                max_timestamp_ms: e.max_timestamp_ms,
                size_bytes: e.size_bytes,
            })
            .collect();
        let plan =
            strata_compactor::compaction::cleanable_units(&units, &checkpoint, now_ms, policy);
        if !plan.due {
            return Ok(None);
        }
        let archive = reader.archive();
        use strata_tiering::merge::download;
        // Map the dirty objects' keys until the map is full.
        let first_dirty = checkpoint.first_dirty;
        let mut map = KeyMap::with_budget(self.config.key_map_bytes);
        let mut mapped_upto = first_dirty;
        for e in manifest
            .iter()
            .filter(|e| e.last_offset >= first_dirty && e.last_offset < plan.upto)
        {
            if e.record_count > 0 {
                let file = download(archive, e).await.map_err(archive_error)?;
                let mut full = false;
                let mut stopped = mapped_upto;
                strata_tiering::codec::for_each_archived_batch(&file, |_, bytes| {
                    for r in strata_log::batch::decode_records(bytes)
                        .map_err(|e| strata_tiering::Error::Codec(e.to_string()))?
                    {
                        if full || r.offset < first_dirty {
                            continue;
                        }
                        if let Some(k) = &r.key
                            && !map.offer(k, r.offset)
                        {
                            full = true;
                            stopped = r.offset;
                        }
                    }
                    Ok(())
                })
                .map_err(archive_error)?;
                if full {
                    mapped_upto = stopped;
                    break;
                }
            }
            mapped_upto = e.last_offset + 1;
        }
        if mapped_upto <= first_dirty {
            // A sweep for tombstones over what was cleaned before, or a map too small.
            mapped_upto = first_dirty.min(plan.upto);
        }
        let mut removed = 0;
        for e in manifest
            .iter()
            .filter(|e| e.first_offset < mapped_upto && e.record_count > 0)
        {
            let file = download(archive, e).await.map_err(archive_error)?;
            let compacted = strata_tiering::codec::compact_object(&file, |seen| {
                strata_compactor::compaction::keep(
                    seen,
                    &map,
                    &checkpoint,
                    now_ms,
                    policy.delete_retention_ms,
                )
            })
            .map_err(archive_error)?;
            let (before, after) = (compacted.records_in, compacted.records_kept);
            if before == after {
                continue;
            }
            let entry = match compacted.object {
                Some((object, summary)) => strata_tiering::merge::upload(
                    archive,
                    &p.topic,
                    p.index,
                    (e.first_offset, e.last_offset),
                    object,
                    &summary,
                )
                .await
                .map_err(archive_error)?,
                // Nothing stays: an entry with no object keeps the range covered.
                None => strata_metastore::ManifestEntry {
                    record_count: 0,
                    size_bytes: 0,
                    path: String::new(),
                    checksum: 0,
                    ..e.clone()
                },
            };
            strata_compactor::failpoint::crash("archive_compaction.after_upload");
            if metastore
                .replace_archived(&p.topic, p.index, std::slice::from_ref(e), entry, now_ms)
                .await?
            {
                removed += before - after;
            }
        }
        reader.invalidate(&p.topic, p.index);
        let mut next = checkpoint;
        next.passed(mapped_upto, now_ms);
        metastore
            .save_archive_cleaner(
                &p.topic,
                p.index,
                &strata_metastore::ArchiveCleaner {
                    first_dirty: next.first_dirty,
                    passes: next.passes,
                    last_pass_ms: next.last_pass_ms,
                },
            )
            .await?;
        if removed > 0 {
            tracing::info!(partition = %p.name(), upto = mapped_upto, records_removed = removed, "compacted the archive");
        }
        Ok(Some(removed))
    }

    async fn collect_orphans(&self, p: &Partition, now_ms: i64) -> Result<Collected, Error> {
        let archive = self.replicas.archive().archive();
        let dir = archive.partition_dir(&p.topic, p.index);
        strata_compactor::collect_orphans(
            self.replicas.metastore(),
            archive,
            &p.topic,
            p.index,
            &dir,
            now_ms,
            self.config.archive_grace_ms,
        )
        .await
        .map_err(|e| PartitionError::Archive(e.to_string()).into())
    }

    /// Runs a pass `check_interval_ms` after the last one ended (the first one interval
    /// after the start), until shutdown.
    pub async fn run(self: Arc<Self>) -> Stopped {
        let every = Duration::from_millis(self.config.check_interval_ms.max(10));
        let shutdown = self.replicas.shutdown().clone();
        let clock = Arc::clone(self.replicas.membership().clock());
        loop {
            tokio::select! {
                _ = clock.sleep(every) => {}
                _ = shutdown.cancelled() => return Stopped::Shutdown,
            }
            self.pass().await;
        }
    }
}

/// The first run of two or more adjacent entries, each smaller than `target` and
/// together at most `target`.
fn small_run(
    manifest: &[strata_metastore::ManifestEntry],
    target: u64,
) -> Option<&[strata_metastore::ManifestEntry]> {
    let mut start = 0;
    while start < manifest.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < manifest.len()
            && manifest[end].record_count > 0
            && manifest[end].size_bytes < target
            && bytes + manifest[end].size_bytes <= target
            && (end == start || manifest[end].first_offset == manifest[end - 1].last_offset + 1)
        {
            bytes += manifest[end].size_bytes;
            end += 1;
        }
        if end - start >= 2 {
            return Some(&manifest[start..end]);
        }
        start = end.max(start + 1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(first: i64, last: i64, size: u64) -> strata_metastore::ManifestEntry {
        strata_metastore::ManifestEntry {
            first_offset: first,
            last_offset: last,
            min_timestamp_ms: 0,
            max_timestamp_ms: 0,
            record_count: last - first + 1,
            size_bytes: size,
            path: format!("p/{first}"),
            checksum: 0,
        }
    }

    #[test]
    fn small_objects_merge_in_bounded_runs_of_neighbours() {
        let m = [
            entry(0, 9, 900),
            entry(10, 19, 40),
            entry(20, 29, 30),
            entry(30, 39, 50),
            entry(40, 49, 20),
            entry(60, 69, 10),
            entry(70, 79, 10),
        ];
        let firsts = |r: Option<&[strata_metastore::ManifestEntry]>| {
            r.map(|r| r.iter().map(|e| e.first_offset).collect::<Vec<_>>())
        };
        // 900 is not small; 40+30 fit in 100, +50 would not.
        assert_eq!(firsts(small_run(&m, 100)), Some(vec![10, 20]));
        assert_eq!(firsts(small_run(&m, 150)), Some(vec![10, 20, 30, 40]));
        // Not across a gap in offsets (retention moved the start inside the manifest).
        assert_eq!(firsts(small_run(&m[4..], 1000)), Some(vec![60, 70]));
        assert_eq!(firsts(small_run(&m[..1], 1000)), None);
        assert_eq!(
            firsts(small_run(&m, 10)),
            None,
            "nothing smaller than the target"
        );
    }
}
