//! `strata compactor`: the archive's compaction, merging and collection as a process of
//! its own, for a cluster whose agents run with `compactor_enabled = false` (or beside
//! agents that do: the lease per partition keeps one compactor on a partition at a
//! time). It needs the metastore and the archive, not the agents' disks: retention and
//! the compaction of local logs stay with the agents, which alone see their segments.

use std::sync::Arc;
use std::time::Duration;

use strata_metastore::BrokerConfigs;
use strata_tiering::{Archive, ArchiveReader};
use tokio_util::sync::CancellationToken;

use crate::broker_config::BrokerConfig;
use crate::config::Settings;
use crate::service::archive::{ArchiveConfig, ArchiveWork};
use crate::topic_config::TopicConfig;

/// Works on every tiered partition's archive, every `log_retention_check_interval_ms`,
/// until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let metastore = crate::metastore::open(&settings)?;
    let archive_url = crate::tiering_process::archive_url(&settings)?;
    let reader = Arc::new(ArchiveReader::new(
        Archive::from_url(&archive_url)?,
        metastore.clone(),
        settings.archive_cache_bytes,
    ));
    let every = Duration::from_millis(settings.log_retention_check_interval_ms.max(10));
    let owner = format!("compactor-{}", uuid::Uuid::new_v4().simple());
    let work = ArchiveWork::new(
        reader,
        metastore.clone(),
        ArchiveConfig {
            owner: owner.clone(),
            lease_ms: (3 * every.as_millis() as i64).max(10_000),
            key_map_bytes: settings.log_cleaner_dedupe_buffer_size,
            merge_target_bytes: settings.archive_merge_target_bytes,
            archive_grace_ms: settings.archive_gc_grace_ms,
        },
        strata_core::background::Background::start(
            settings.background(),
            strata_core::clock::SystemClock::shared(),
        ),
    );
    // Not a broker: topics inherit the settings and the cluster's dynamic defaults.
    let broker_config = BrokerConfig::new(&settings, ("", 0));
    tracing::info!(archive = %archive_url, %owner, "compactor process started");
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => {
                tracing::info!("compactor process stopped");
                return Ok(());
            }
        }
        match metastore.broker_configs(0).await {
            Ok(dynamic) => {
                broker_config.update(BrokerConfigs {
                    broker: Default::default(),
                    ..dynamic
                });
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the dynamic broker configs"),
        }
        let topics = match metastore.topics().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list topics");
                continue;
            }
        };
        for topic in topics {
            let config = TopicConfig::resolve(&broker_config.inherited(), &topic.configs);
            if !config.tiered() {
                continue;
            }
            for p in &topic.partitions {
                let now = crate::clock::now_ms();
                let done = work
                    .work_on(&topic.name, p.index as i32, &config, now)
                    .await;
                if done.records_compacted_away > 0 || done.objects_merged > 0 {
                    tracing::info!(topic = %topic.name, partition = p.index, records_removed = done.records_compacted_away, objects_merged = done.objects_merged, "worked on the archive");
                }
            }
        }
        work.collect_garbage(crate::clock::now_ms()).await;
    }
}
