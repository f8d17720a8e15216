//! The work on a partition's archive that no agent's local disk is needed for:
//! compaction of archived objects, merging of small ones, collection of orphans, and of
//! the garbage list. It runs inside the agent that leads a partition (from the
//! lifecycle service) or in `strata compactor`, a process of its own; a lease in the
//! metastore per partition makes sure that only one of them works on a partition at a
//! time (the steps are also safe against a second one: every swap into the manifest
//! checks what it replaces).

use std::sync::Arc;
use strata_compactor::{Collected, Unit};
use strata_core::background::{Background, Kind};
use strata_metastore::Metastore;
use strata_tiering::ArchiveReader;

use crate::error::{Error, Result};
use crate::partition::PartitionError;
use crate::topic_config::TopicConfig;

/// How the archive work is done.
#[derive(Debug, Clone)]
pub struct ArchiveConfig {
    /// Who works (the lease's owner): `agent-<node id>` or `compactor-<id>`.
    pub owner: String,
    /// How long a claimed lease lasts; renewed on every pass.
    pub lease_ms: i64,
    /// See [`crate::service::lifecycle::LifecycleConfig`].
    pub key_map_bytes: usize,
    pub merge_target_bytes: u64,
    pub archive_grace_ms: i64,
}

/// What one pass did to one partition's archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchiveOutcome {
    /// Someone else holds the partition's lease: nothing was done.
    pub leased_elsewhere: bool,
    pub records_compacted_away: u64,
    pub objects_merged: usize,
    pub error: Option<String>,
}

pub struct ArchiveWork {
    reader: Arc<ArchiveReader>,
    metastore: Metastore,
    config: ArchiveConfig,
    /// Where objects are decoded and rewritten (off the request runtime).
    background: Arc<Background>,
}

impl std::fmt::Debug for ArchiveWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveWork")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ArchiveWork {
    pub fn new(
        reader: Arc<ArchiveReader>,
        metastore: Metastore,
        config: ArchiveConfig,
        background: Arc<Background>,
    ) -> ArchiveWork {
        ArchiveWork {
            reader,
            metastore,
            config,
            background,
        }
    }

    /// Claims the partition's lease, then compacts (for compacted topics), merges and
    /// collects orphans.
    pub async fn work_on(
        &self,
        topic: &str,
        partition: i32,
        config: &TopicConfig,
        now_ms: i64,
    ) -> ArchiveOutcome {
        let mut out = ArchiveOutcome::default();
        if !self.claim(topic, partition, now_ms, &mut out).await {
            return out;
        }
        let name = format!("{topic}-{partition}");
        if let Some(policy) = config.compaction() {
            match self.compact_archive(topic, partition, policy, now_ms).await {
                Ok(removed) => out.records_compacted_away = removed.unwrap_or(0),
                Err(e) => {
                    tracing::warn!(partition = %name, error = %e, "cannot compact the archive; will retry");
                    out.error = Some(e.to_string());
                }
            }
        }
        match self.merge_small_objects(topic, partition, now_ms).await {
            Ok(Some((merged, bytes))) => {
                out.objects_merged = merged;
                tracing::info!(partition = %name, objects = merged, bytes, "merged small archived objects");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(partition = %name, error = %e, "cannot merge small archived objects; will retry");
                out.error = Some(e.to_string());
            }
        }
        if let Err(e) = self.collect_orphans(topic, partition, now_ms).await {
            tracing::warn!(partition = %name, error = %e, "cannot collect orphaned archive objects");
        }
        out
    }

    /// The cleaner's share of the archive, between passes: compacts the archive if its
    /// dirty ratio or `max.compaction.lag.ms` asks for it (as the local log is
    /// compacted), under the partition's lease, so a compacted tiered topic does not wait
    /// for the next pass. Merging and collection wait for the pass.
    pub async fn clean(
        &self,
        topic: &str,
        partition: i32,
        policy: strata_compactor::CompactionPolicy,
        now_ms: i64,
    ) -> ArchiveOutcome {
        let mut out = ArchiveOutcome::default();
        match self.compact_archive(topic, partition, policy, now_ms).await {
            Ok(removed) => out.records_compacted_away = removed.unwrap_or(0),
            Err(e) => {
                tracing::warn!(partition = %format!("{topic}-{partition}"), error = %e, "cannot compact the archive; will retry");
                out.error = Some(e.to_string());
            }
        }
        out
    }

    /// Claims (or renews) the partition's compactor lease; false, with `out` saying
    /// why, when this worker may not work on it now.
    async fn claim(
        &self,
        topic: &str,
        partition: i32,
        now_ms: i64,
        out: &mut ArchiveOutcome,
    ) -> bool {
        match self
            .metastore
            .claim_compactor(
                topic,
                partition,
                &self.config.owner,
                self.config.lease_ms,
                now_ms,
            )
            .await
        {
            Ok(true) => true,
            Ok(false) => {
                out.leased_elsewhere = true;
                false
            }
            Err(e) => {
                out.error = Some(format!("cannot claim the compactor lease: {e}"));
                false
            }
        }
    }

    /// Deletes the garbage past its grace period (every partition's; idempotent, so
    /// any compactor may do it).
    pub async fn collect_garbage(&self, now_ms: i64) {
        match strata_compactor::collect_garbage(
            &self.metastore,
            self.reader.archive(),
            now_ms,
            self.config.archive_grace_ms,
        )
        .await
        {
            Ok(c) if c.objects > 0 => tracing::info!(
                objects = c.objects,
                bytes = c.bytes,
                "collected archived objects past their grace period"
            ),
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
    pub async fn merge_small_objects(
        &self,
        topic: &str,
        partition: i32,
        now_ms: i64,
    ) -> Result<Option<(usize, u64)>> {
        let target = self.config.merge_target_bytes;
        if target == 0 {
            return Ok(None);
        }
        let reader = &self.reader;
        let archive_error = |e: strata_tiering::Error| PartitionError::Archive(e.to_string());
        let manifest = reader
            .manifest(topic, partition, true)
            .await
            .map_err(archive_error)?;
        let Some(run) = small_run(&manifest, target) else {
            return Ok(None);
        };
        let entry = strata_tiering::merge::merge_and_upload(
            reader.archive(),
            &self.background,
            topic,
            partition,
            run,
        )
        .await
        .map_err(archive_error)?;
        strata_compactor::failpoint::crash("merge.after_upload");
        let swapped = self
            .metastore
            .replace_archived(topic, partition, run, entry.clone(), now_ms)
            .await?;
        reader.invalidate(topic, partition);
        if !swapped {
            tracing::info!(partition = %format!("{topic}-{partition}"), object = %entry.path, "the manifest changed under a merge; the merged object is left for collection");
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
    pub async fn compact_archive(
        &self,
        topic: &str,
        partition: i32,
        policy: strata_compactor::CompactionPolicy,
        now_ms: i64,
    ) -> Result<Option<u64>> {
        use strata_compactor::KeyMap;
        use strata_log::compaction::Checkpoint;
        let reader = &self.reader;
        let metastore = &self.metastore;
        let archive_error = |e: strata_tiering::Error| PartitionError::Archive(e.to_string());
        let manifest = reader
            .manifest(topic, partition, true)
            .await
            .map_err(archive_error)?;
        let stored = metastore.archive_cleaner(topic, partition).await?;
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
        // Due: work only under the partition's lease (claimed or renewed here, so the
        // cleaner, which calls this between passes, writes nothing while nothing is due).
        let owner = &self.config.owner;
        if !metastore
            .claim_compactor(topic, partition, owner, self.config.lease_ms, now_ms)
            .await?
        {
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
                let size = file.len() as u64;
                let (returned, full, stopped) = self
                    .background
                    .run(Kind::Compaction, size, move || {
                        let (mut full, mut stopped) = (false, mapped_upto);
                        let mapped = strata_tiering::codec::for_each_archived_batch(
                            &file,
                            |header, bytes| {
                                // Markers are no keys; transactional records never shadow
                                // one here (their markers may not be archived yet:
                                // `Txns::Unknown`).
                                if header.is_control() || header.is_transactional() {
                                    return Ok(());
                                }
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
                            },
                        );
                        (mapped.map(|()| map), full, stopped)
                    })
                    .await
                    .map_err(|e| PartitionError::Archive(e.to_string()))?;
                map = returned.map_err(archive_error)?;
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
        let map = Arc::new(map);
        let shared_checkpoint = Arc::new(checkpoint.clone());
        for e in manifest
            .iter()
            .filter(|e| e.first_offset < mapped_upto && e.record_count > 0)
        {
            let file = download(archive, e).await.map_err(archive_error)?;
            let (map, checkpoint) = (Arc::clone(&map), Arc::clone(&shared_checkpoint));
            let compacted = self
                .background
                .run(Kind::Compaction, file.len() as u64, move || {
                    strata_tiering::codec::compact_object(&file, |seen| {
                        strata_compactor::compaction::keep(
                            seen,
                            &map,
                            &checkpoint,
                            now_ms,
                            policy.delete_retention_ms,
                            strata_compactor::compaction::Txns::Unknown,
                        )
                    })
                })
                .await
                .map_err(|e| PartitionError::Archive(e.to_string()))?
                .map_err(archive_error)?;
            let (before, after) = (compacted.records_in, compacted.records_kept);
            if before == after {
                continue;
            }
            let entry = match compacted.object {
                // Compaction keeps every marker, so the aborted transactions stay.
                Some((object, summary)) => strata_metastore::ManifestEntry {
                    aborted: e.aborted.clone(),
                    ..strata_tiering::merge::upload(
                        archive,
                        topic,
                        partition,
                        (e.first_offset, e.last_offset),
                        object,
                        &summary,
                    )
                    .await
                    .map_err(archive_error)?
                },
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
                .replace_archived(topic, partition, std::slice::from_ref(e), entry, now_ms)
                .await?
            {
                removed += before - after;
            }
        }
        reader.invalidate(topic, partition);
        let mut next = checkpoint;
        next.passed(mapped_upto, now_ms);
        metastore
            .save_archive_cleaner(
                topic,
                partition,
                &strata_metastore::ArchiveCleaner {
                    first_dirty: next.first_dirty,
                    passes: next.passes,
                    last_pass_ms: next.last_pass_ms,
                },
            )
            .await?;
        if removed > 0 {
            tracing::info!(partition = %format!("{topic}-{partition}"), upto = mapped_upto, records_removed = removed, "compacted the archive");
        }
        Ok(Some(removed))
    }

    pub async fn collect_orphans(
        &self,
        topic: &str,
        partition: i32,
        now_ms: i64,
    ) -> Result<Collected, Error> {
        strata_compactor::collect_orphans(
            &self.metastore,
            self.reader.archive(),
            topic,
            partition,
            now_ms,
            self.config.archive_grace_ms,
        )
        .await
        .map_err(|e| PartitionError::Archive(e.to_string()).into())
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
            aborted: Vec::new(),
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
