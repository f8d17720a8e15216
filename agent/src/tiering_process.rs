//! `strata tiering`: the tiering worker as its own process, beside an agent that runs
//! with `tiering_enabled = false` on the same machine.
//!
//! It reads the agent's data directory without taking its lock: sealed segments are
//! immutable, and the agent deletes a segment only after the manifest covers it, which
//! is exactly when this process stops looking at it. A partition directory counts only
//! while its `topic.id` matches the topic in the metastore. Only what lies below the
//! high watermark the agent saved in the directory is archived, by the worker's one
//! rule ([`LocalPartition::high_watermark`]): a follower's suffix above it may still be
//! cut back.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use strata_metastore::Metastore;
use strata_tiering::{Archive, ArchiveReader, ClosedSegment, LocalPartition, TieringWorker};
use tokio_util::sync::CancellationToken;

use crate::config::Settings;

/// A partition's log directory, read from outside the agent.
struct DirPartition {
    topic: String,
    partition: i32,
    dir: PathBuf,
}

impl DirPartition {
    /// Segment base offsets, ascending.
    fn bases(&self) -> Vec<i64> {
        let mut bases: Vec<i64> = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        bases.sort_unstable();
        bases
    }
}

impl LocalPartition for DirPartition {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn partition(&self) -> i32 {
        self.partition
    }

    /// Every segment but the last is sealed; it ends where the next one starts.
    fn closed_segments(&self) -> Vec<ClosedSegment> {
        self.bases()
            .windows(2)
            .map(|w| ClosedSegment {
                base_offset: w[0],
                next_offset: w[1],
                path: self.dir.join(strata_log::segment::file_name(w[0], "log")),
            })
            .collect()
    }

    /// A lower bound: the start of the active segment.
    fn log_end_offset(&self) -> i64 {
        self.bases().last().copied().unwrap_or(0)
    }

    /// The watermark the agent last saved (it saves it every few seconds and at
    /// shutdown); none saved yet: nothing is known to be committed.
    fn high_watermark(&self) -> i64 {
        crate::partition::saved_high_watermark(&self.dir).unwrap_or(-1)
    }
}

/// The partitions of `logs` whose directory belongs to a live, tiered topic.
async fn partitions(
    metastore: &Metastore,
    logs: &Path,
) -> anyhow::Result<Vec<Arc<dyn LocalPartition>>> {
    let topics = metastore.topics().await?;
    let mut out: Vec<Arc<dyn LocalPartition>> = Vec::new();
    for topic in topics {
        let hex: String = topic.id.iter().map(|b| format!("{b:02x}")).collect();
        let tiered = topic
            .configs
            .get("remote.storage.enable")
            .is_none_or(|v| v.eq_ignore_ascii_case("true"));
        if !tiered {
            continue;
        }
        for p in &topic.partitions {
            let dir = logs.join(format!("{}-{}", topic.name, p.index));
            let id = std::fs::read_to_string(dir.join("topic.id")).unwrap_or_default();
            if id.trim() == hex {
                out.push(Arc::new(DirPartition {
                    topic: topic.name.clone(),
                    partition: p.index as i32,
                    dir,
                }));
            }
        }
    }
    Ok(out)
}

/// The archive's URL: the one set, or the agent's default under its data directory.
pub fn archive_url(settings: &Settings) -> anyhow::Result<String> {
    Ok(match &settings.archive_url {
        Some(url) => url.clone(),
        None => format!(
            "file://{}",
            std::fs::canonicalize(&settings.data_dir)?
                .join("archive")
                .display()
        ),
    })
}

/// Runs the tiering worker over the agent's data directory until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let metastore = crate::metastore::open(&settings)?;
    let archive_url = archive_url(&settings)?;
    let archive = Archive::from_url(&archive_url)?;
    let reader = Arc::new(ArchiveReader::new(
        archive,
        metastore.clone(),
        settings.archive_cache_bytes,
    ));
    let background = strata_core::background::Background::start(
        settings.background(),
        strata_core::clock::SystemClock::shared(),
    );
    let worker = Arc::new(TieringWorker::new(reader, metastore.clone(), background));
    let logs = settings.data_dir.join("logs");
    let every = Duration::from_millis(settings.tiering_interval_ms.max(10));
    tracing::info!(archive = %archive_url, logs = %logs.display(), "tiering process started");
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => {
                tracing::info!("tiering process stopped");
                return Ok(());
            }
        }
        let current = match partitions(&metastore, &logs).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list partitions");
                continue;
            }
        };
        for p in current {
            if let Err(e) = worker.tier_partition(p.as_ref()).await {
                tracing::warn!(topic = p.topic(), partition = p.partition(), error = %e, "tiering failed; will retry");
            }
        }
        for s in worker
            .status()
            .iter()
            .filter(|s| s.lag_records > 0 || s.last_error.is_some())
        {
            tracing::debug!(topic = %s.topic, partition = s.partition, archived_upto = s.archived_upto, lag_records = s.lag_records, "tiering progress");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kafka_protocol::records::Compression;
    use strata_log::batch::example_batch;
    use strata_log::{LogConfig, PartitionLog};
    use strata_metastore::NewTopic;

    use super::*;

    /// A follower's log holds sealed segments above its high watermark (a suffix that
    /// may yet be cut back): `strata tiering` archives only what lies below the
    /// watermark the agent saved, never the suffix.
    #[tokio::test]
    async fn archives_only_below_the_saved_high_watermark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = Settings {
            data_dir: dir.path().to_path_buf(),
            ..Settings::default()
        };
        let metastore = crate::metastore::open(&settings).expect("metastore");
        metastore.cluster().await.expect("cluster");
        let topic = metastore
            .create_topic(NewTopic {
                name: "t".to_string(),
                replication_factor: 1,
                configs: BTreeMap::new(),
                assignments: vec![vec![1]],
            })
            .await
            .expect("create topic");
        let logs = dir.path().join("logs");
        let pdir = logs.join("t-0");
        std::fs::create_dir_all(&pdir).expect("mkdir");
        let hex: String = topic.id.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(pdir.join("topic.id"), hex).expect("topic id");
        let config = LogConfig {
            segment_bytes: 2048,
            ..LogConfig::default()
        };
        let (mut log, _) = PartitionLog::open(&pdir, config, 0).expect("open log");
        for _ in 0..12 {
            log.append(
                &example_batch(5, 100, 1_700_000_000_000, Compression::None),
                0,
            )
            .expect("append");
        }
        log.flush().expect("flush");
        let sealed = log.closed_segments();
        assert!(sealed.len() >= 3, "{sealed:?}");
        // Committed up to the middle of the second sealed segment.
        let hw = sealed[1].base_offset + 1;
        std::fs::write(pdir.join("high-watermark"), format!("{hw}\n")).expect("checkpoint");
        drop(log);

        let archive =
            Archive::from_url(&format!("file://{}", dir.path().join("archive").display()))
                .expect("archive");
        let reader = Arc::new(ArchiveReader::new(archive, metastore.clone(), 1 << 20));
        let background = strata_core::background::Background::start(
            strata_core::background::Limits::for_this_machine(),
            strata_core::clock::SystemClock::shared(),
        );
        let worker = TieringWorker::new(Arc::clone(&reader), metastore.clone(), background);
        let found = partitions(&metastore, &logs).await.expect("partitions");
        assert_eq!(found.len(), 1);
        worker
            .tier_partition(found[0].as_ref())
            .await
            .expect("tier");
        let manifest = reader.manifest("t", 0, true).await.expect("manifest");
        assert_eq!(manifest.len(), 1, "{manifest:?}");
        assert_eq!(manifest[0].last_offset, sealed[0].next_offset - 1);
        assert!(manifest.iter().all(|e| e.last_offset < hw));
    }
}
