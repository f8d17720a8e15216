//! One partition this agent leads: its log, its high watermark, and its group-commit
//! flusher.
//!
//! Durability policy (single node): every append wakes the flusher, which fsyncs the
//! active segment once for everything appended since its last fsync (group commit) and
//! then raises the high watermark to the offset that fsync covered. So the high
//! watermark is always durable: consumers never read a record a crash could take back,
//! acks=all is answered once the high watermark passes the batch, and acks=1 is answered
//! after the write to the page cache. See `docs/log-format.md`.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use strata_log::{AppendOutcome, ClosedSegmentInfo, LogConfig, PartitionLog};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// What the flusher has made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    /// Every offset below this is on disk.
    pub high_watermark: i64,
    /// An fsync failed: the partition takes no more writes (as Kafka halts on a
    /// failed flush, since the page cache may have dropped the data).
    pub failed: bool,
}

#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub index: i32,
    log: Mutex<PartitionLog>,
    durable: watch::Sender<Durable>,
    flush_wanted: Notify,
    stop: CancellationToken,
}

/// What a read returns besides the bytes.
#[derive(Debug)]
pub struct ReadOutcome {
    pub records: Vec<u8>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    #[error("partition {0} failed to flush to disk and is offline")]
    Offline(String),
    #[error("archive read failed: {0}")]
    Archive(String),
}

impl Partition {
    /// Opens (recovering) the log under `dir` and starts the flusher.
    pub fn open(
        topic: &str,
        index: i32,
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
        shutdown: &CancellationToken,
    ) -> Result<Arc<Partition>, strata_log::Error> {
        let (log, recovery) = PartitionLog::open(dir, config, now_ms)?;
        if recovery.truncated_bytes > 0 {
            tracing::warn!(
                topic,
                partition = index,
                truncated_bytes = recovery.truncated_bytes,
                reason = recovery.truncation_reason.unwrap_or("unknown"),
                log_end_offset = recovery.log_end_offset,
                "cut a torn tail off the active segment"
            );
        }
        let end = log.log_end_offset();
        let partition = Arc::new(Partition {
            topic: topic.to_string(),
            index,
            log: Mutex::new(log),
            durable: watch::Sender::new(Durable {
                high_watermark: end,
                failed: false,
            }),
            flush_wanted: Notify::new(),
            stop: shutdown.child_token(),
        });
        tokio::spawn(Arc::clone(&partition).flusher());
        Ok(partition)
    }

    fn log(&self) -> MutexGuard<'_, PartitionLog> {
        // A panic while holding the lock leaves the log as consistent as the last
        // completed call, so a poisoned lock is still usable.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn name(&self) -> String {
        format!("{}-{}", self.topic, self.index)
    }

    /// Validates and appends a produced record set; returns at once (not durable yet).
    pub fn append(&self, records: &[u8], now_ms: i64) -> Result<AppendOutcome, PartitionError> {
        if self.durable.borrow().failed {
            return Err(PartitionError::Offline(self.name()));
        }
        let outcome = self.log().append(records, now_ms)?;
        self.flush_wanted.notify_one();
        Ok(outcome)
    }

    /// Waits until every offset below `end_offset` is durable.
    pub async fn wait_durable(&self, end_offset: i64) -> Result<(), PartitionError> {
        let mut rx = self.durable.subscribe();
        let state = rx
            .wait_for(|d| d.high_watermark >= end_offset || d.failed)
            .await;
        match state {
            Ok(d) if !d.failed => Ok(()),
            _ => Err(PartitionError::Offline(self.name())),
        }
    }

    pub fn high_watermark(&self) -> i64 {
        self.durable.borrow().high_watermark
    }

    /// A receiver that changes whenever the high watermark moves (for long polls).
    pub fn watch(&self) -> watch::Receiver<Durable> {
        self.durable.subscribe()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log().log_start_offset()
    }

    /// Reads from `offset` up to the high watermark: whole batches, at most `max_bytes`
    /// unless the first batch alone is larger.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadOutcome, PartitionError> {
        let high_watermark = self.high_watermark();
        let log = self.log();
        let log_start_offset = log.log_start_offset();
        let log_end_offset = log.log_end_offset();
        if offset < log_start_offset || offset > log_end_offset {
            return Err(strata_log::Error::OffsetOutOfRange {
                offset,
                log_start: log_start_offset,
                log_end: log_end_offset,
            }
            .into());
        }
        // Between the high watermark and the log end there is nothing to read yet.
        let mut records = if offset >= high_watermark {
            Vec::new()
        } else {
            log.read(offset, max_bytes)?
        };
        drop(log);
        // Batches at or above the high watermark are not durable yet: hold them back.
        let mut cut = 0;
        for (header, _) in strata_log::batch::BatchIter::new(&records) {
            if header.base_offset >= high_watermark {
                break;
            }
            cut += header.total_bytes();
        }
        records.truncate(cut);
        Ok(ReadOutcome {
            records,
            high_watermark,
            log_start_offset,
        })
    }

    pub fn offset_for_timestamp(
        &self,
        target_ms: i64,
    ) -> Result<Option<(i64, i64)>, PartitionError> {
        let hw = self.high_watermark();
        Ok(self
            .log()
            .offset_for_timestamp(target_ms)?
            .filter(|(o, _)| *o < hw))
    }

    pub fn max_timestamp_record(&self) -> Result<Option<(i64, i64)>, PartitionError> {
        let hw = self.high_watermark();
        Ok(self.log().max_timestamp_record()?.filter(|(o, _)| *o < hw))
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log().log_end_offset()
    }

    pub fn closed_segments(&self) -> Vec<ClosedSegmentInfo> {
        self.log().closed_segments()
    }

    /// KIP-405 local retention: deletes the oldest sealed segments that are archived
    /// (every offset at most `archived_upto`) and either older than `retention_ms` (by
    /// their newest record) or beyond `retention_bytes` of local data. Negative limits
    /// mean no limit. Returns how many segments went.
    pub fn apply_local_retention(
        &self,
        archived_upto: i64,
        now_ms: i64,
        retention_ms: i64,
        retention_bytes: i64,
    ) -> Result<usize, PartitionError> {
        let mut log = self.log();
        let mut local_bytes = log.size_bytes() as i64;
        let deleted = log.delete_oldest_segments(|seg| {
            if seg.next_offset - 1 > archived_upto {
                return false;
            }
            let too_old = retention_ms >= 0 && now_ms - seg.max_timestamp > retention_ms;
            let too_big = retention_bytes >= 0 && local_bytes > retention_bytes;
            if too_old || too_big {
                local_bytes -= seg.size_bytes as i64;
            }
            too_old || too_big
        })?;
        Ok(deleted)
    }

    pub fn set_config(&self, config: LogConfig) {
        self.log().set_config(config);
    }

    pub fn roll_if_due(&self, now_ms: i64) -> Result<(), PartitionError> {
        Ok(self.log().roll_if_due(now_ms)?)
    }

    /// Stops the flusher after a last fsync, and snapshots producer state so the next
    /// start replays nothing.
    pub async fn close(&self) {
        self.stop.cancel();
        let end = self.log().log_end_offset();
        if self.wait_durable(end).await.is_ok()
            && let Err(e) = self.log().snapshot_producers()
        {
            tracing::warn!(partition = %self.name(), error = %e, "cannot snapshot producer state");
        }
    }

    /// Forgets idempotent producers idle since before `cutoff_ms`.
    pub fn expire_producers(&self, cutoff_ms: i64) -> usize {
        self.log().expire_producers(cutoff_ms)
    }

    /// Closes the partition and deletes its log from disk.
    pub async fn delete(&self) -> Result<(), PartitionError> {
        self.stop.cancel();
        let dir = self.log().dir().to_path_buf();
        std::fs::remove_dir_all(&dir).map_err(|source| {
            PartitionError::Log(strata_log::Error::Io {
                context: "delete partition log",
                path: dir,
                source,
            })
        })
    }

    /// The group-commit loop: one fsync covers every append since the previous one.
    async fn flusher(self: Arc<Self>) {
        loop {
            let stopping = tokio::select! {
                _ = self.flush_wanted.notified() => false,
                _ = self.stop.cancelled() => true,
            };
            let (file, target) = self.log().flush_target();
            if target > self.high_watermark() {
                let synced = tokio::task::spawn_blocking(move || file.sync_data()).await;
                match synced {
                    Ok(Ok(())) => {
                        self.durable
                            .send_modify(|d| d.high_watermark = d.high_watermark.max(target));
                    }
                    Ok(Err(e)) => {
                        tracing::error!(partition = %self.name(), error = %e, "fsync failed; partition goes offline");
                        self.durable.send_modify(|d| d.failed = true);
                        return;
                    }
                    Err(e) => {
                        tracing::error!(partition = %self.name(), error = %e, "fsync task failed; partition goes offline");
                        self.durable.send_modify(|d| d.failed = true);
                        return;
                    }
                }
            }
            if stopping {
                tracing::debug!(partition = %self.name(), "flusher stopped");
                return;
            }
        }
    }
}

impl strata_tiering::LocalPartition for Partition {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn partition(&self) -> i32 {
        self.index
    }

    fn closed_segments(&self) -> Vec<strata_tiering::ClosedSegment> {
        Partition::closed_segments(self)
            .into_iter()
            .map(|s| strata_tiering::ClosedSegment {
                base_offset: s.base_offset,
                next_offset: s.next_offset,
                path: s.path,
            })
            .collect()
    }

    fn log_end_offset(&self) -> i64 {
        Partition::log_end_offset(self)
    }
}
