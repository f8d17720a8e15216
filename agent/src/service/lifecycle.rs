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

use strata_compactor::{Policy, Unit, retention_start};

use serde_json::json;

use crate::audit::Audit;
use crate::authz::{Authorizer, Operation, ResourceType};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::partition::{Partition, PartitionError};
use crate::replicas::{ReplicaManager, TopicState};
use crate::service::archive::{ArchiveConfig, ArchiveWork};
use crate::tasks::Stopped;

/// How often and how patiently the lifecycle runs.
#[derive(Debug, Clone, Copy)]
pub struct LifecycleConfig {
    /// Kafka's `log.retention.check.interval.ms`.
    pub check_interval_ms: u64,
    /// Kafka's `log.cleaner.backoff.ms`: how long the cleaner sleeps when no compacted
    /// partition was due (compaction runs this often, and with every pass).
    pub cleaner_backoff_ms: u64,
    /// How long an archived object no manifest names stays in the store before it is
    /// deleted (see `strata_compactor::gc`).
    pub archive_grace_ms: i64,
    /// Kafka's `log.cleaner.dedupe.buffer.size`: bytes of the key map one compaction
    /// pass may hold (the pass cleans less, and the next one goes on, when it fills).
    pub key_map_bytes: usize,
    /// Archived objects smaller than this are merged with their neighbours into objects
    /// of at most this size (0: never).
    pub merge_target_bytes: u64,
    /// Whether this agent does the archive's work (compaction, merging, collection) for
    /// the partitions it leads; off when `strata compactor` runs apart.
    pub archive_work: bool,
}

/// What compaction did to one local replica since the last pass.
#[derive(Debug, Clone, Default)]
struct Compacted {
    dirty_ratio: Option<f64>,
    bytes_reclaimed: u64,
    records_removed: u64,
    error: Option<String>,
}

/// What the last pass did to one partition (for the operator API).
#[derive(
    Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
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

/// DeleteRecords for a caller, on what it borrows from the broker (`Broker::records`).
#[derive(Clone, Copy)]
pub struct Records<'a> {
    pub lifecycle: &'a Lifecycle,
    pub authorizer: &'a Authorizer,
    pub audit: &'a Audit,
}

impl Records<'_> {
    /// Deletes the records of `topic`-`partition` before `offset` (-1: the high
    /// watermark), for a caller with DELETE on the topic; answers the new log start.
    /// Audited (`partition.delete_records`), refusals included.
    pub async fn delete_records(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64> {
        let outcome =
            if self
                .authorizer
                .allows(who.authz(), Operation::Delete, ResourceType::Topic, topic)
            {
                self.lifecycle
                    .delete_records(topic, partition, offset)
                    .await
            } else {
                Err(Error::denied(
                    who,
                    Operation::Delete,
                    ResourceType::Topic,
                    topic,
                ))
            };
        let recorded = match &outcome {
            Ok(start) => Ok(json!({ "low_watermark": start })),
            Err(e) => Err(e.to_string()),
        };
        self.audit.record(
            who,
            "partition.delete_records",
            &format!("partition:{topic}-{partition}"),
            json!({ "before_offset": offset }),
            recorded,
        );
        outcome
    }
}

pub struct Lifecycle {
    replicas: Arc<ReplicaManager>,
    config: LifecycleConfig,
    archive: ArchiveWork,
    status: Mutex<BTreeMap<(String, i32), PartitionLifecycle>>,
    /// What compaction did to each local replica since the last pass.
    compaction: Mutex<BTreeMap<(String, i32), Compacted>>,
    /// Where compaction runs: off the request runtime, at a lower priority, within
    /// `log_cleaner_io_max_bytes_per_second`.
    background: Arc<strata_core::background::Background>,
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifecycle")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Lifecycle {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        config: LifecycleConfig,
        background: Arc<strata_core::background::Background>,
    ) -> Lifecycle {
        let archive = ArchiveWork::new(
            Arc::clone(replicas.archive()),
            replicas.metastore().clone(),
            ArchiveConfig {
                owner: format!("agent-{}", replicas.node_id()),
                lease_ms: (3 * config.check_interval_ms as i64).max(10_000),
                key_map_bytes: config.key_map_bytes,
                merge_target_bytes: config.merge_target_bytes,
                archive_grace_ms: config.archive_grace_ms,
            },
            Arc::clone(&background),
        );
        Lifecycle {
            background,
            replicas,
            config,
            archive,
            status: Mutex::new(BTreeMap::new()),
            compaction: Mutex::new(BTreeMap::new()),
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
    /// Callers come through [`Records::delete_records`], which decides who may.
    async fn delete_records(&self, topic: &str, partition: i32, offset: i64) -> Result<i64> {
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

    /// Compacts every local replica (leader or follower: each cleans its own log, as in
    /// Kafka) whose topic compacts and which is due (its dirty ratio reached
    /// `min.cleanable.dirty.ratio`, or a record waited `max.compaction.lag.ms`), and the
    /// archive of each such partition led here, when it is due by the same rules.
    pub async fn clean(&self) {
        let now = self.replicas.membership().clock().wall_ms();
        for topic in self.replicas.topics() {
            let Some(policy) = topic.config.compaction() else {
                continue;
            };
            for p in topic.local_partitions() {
                let outcome = p
                    .compact(policy, self.config.key_map_bytes, now, &self.background)
                    .await;
                match &outcome {
                    Ok((_, Some(done))) if done.segments_swapped > 0 => {
                        tracing::info!(partition = %p.name(), upto = done.upto, records_removed = done.records_removed, bytes_before = done.bytes_before, bytes_after = done.bytes_after, "compacted")
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(partition = %p.name(), error = %e, "compaction failed; will retry")
                    }
                }
                let mut compaction = self.compaction.lock().unwrap_or_else(|e| e.into_inner());
                let entry = compaction.entry((p.topic.clone(), p.index)).or_default();
                match outcome {
                    Ok((ratio, done)) => {
                        entry.dirty_ratio = Some(ratio);
                        entry.error = None;
                        if let Some(done) = done {
                            entry.bytes_reclaimed +=
                                done.bytes_before.saturating_sub(done.bytes_after);
                            entry.records_removed += done.records_removed;
                        }
                    }
                    Err(e) => entry.error = Some(e.to_string()),
                }
            }
            if !(topic.config.tiered() && self.config.archive_work) {
                continue;
            }
            for p in topic.led_partitions() {
                let done = self.archive.clean(&p.topic, p.index, policy, now).await;
                if done.records_compacted_away > 0 {
                    tracing::info!(partition = %p.name(), records_removed = done.records_compacted_away, "compacted the archive");
                }
                let mut compaction = self.compaction.lock().unwrap_or_else(|e| e.into_inner());
                let entry = compaction.entry((p.topic.clone(), p.index)).or_default();
                entry.records_removed += done.records_compacted_away;
                if done.error.is_some() {
                    entry.error = done.error;
                }
            }
        }
    }

    /// One pass: compaction ([`Lifecycle::clean`]); retention over every partition led
    /// here whose topic deletes; then the collection of garbage and (for tiered
    /// partitions) orphans.
    pub async fn pass(&self) {
        self.clean().await;
        let now = self.replicas.membership().clock().wall_ms();
        let next_due = now + self.config.check_interval_ms as i64;
        let mut compacted =
            std::mem::take(&mut *self.compaction.lock().unwrap_or_else(|e| e.into_inner()));
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
                    Some(c) => {
                        if c.dirty_ratio.is_some() {
                            entry.dirty_ratio = c.dirty_ratio;
                        }
                        entry.bytes_reclaimed += c.bytes_reclaimed;
                        entry.records_compacted_away += c.records_removed;
                        if c.error.is_some() {
                            entry.last_error = c.error;
                        }
                    }
                    None => entry.dirty_ratio = None,
                }
                entry.log_start_offset = self.replicas.log_start_offset(p).await;
                if topic.config.tiered() && self.config.archive_work {
                    let done = self
                        .archive
                        .work_on(&p.topic, p.index, &topic.config, now)
                        .await;
                    entry.records_compacted_away += done.records_compacted_away;
                    entry.objects_merged += done.objects_merged as u64;
                    if done.error.is_some() {
                        entry.last_error = done.error;
                    }
                }
                seen.insert(key, entry);
            }
        }
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = seen;
        if self.config.archive_work {
            self.archive.collect_garbage(now).await;
        }
    }

    /// Runs a pass `check_interval_ms` after the last one ended (the first one interval
    /// after the start), and the cleaner every `cleaner_backoff_ms` in between (Kafka's
    /// cleaner is continuous: a compacted partition does not wait for the retention
    /// check), until shutdown.
    pub async fn run(self: Arc<Self>) -> Stopped {
        let pass_every = Duration::from_millis(self.config.check_interval_ms.max(10));
        let clean_every =
            Duration::from_millis(self.config.cleaner_backoff_ms.max(10)).min(pass_every);
        let shutdown = self.replicas.shutdown().clone();
        let clock = Arc::clone(self.replicas.membership().clock());
        let mut next_pass = clock.monotonic() + pass_every;
        loop {
            tokio::select! {
                _ = clock.sleep(clean_every) => {}
                _ = shutdown.cancelled() => return Stopped::Shutdown,
            }
            if clock.monotonic() >= next_pass {
                self.pass().await;
                next_pass = clock.monotonic() + pass_every;
            } else {
                self.clean().await;
            }
        }
    }
}
