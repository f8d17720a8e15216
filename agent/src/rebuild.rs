//! Rebuilding a replica that is not in sync: a new replica (a replacement, a reassignment
//! target), one on a disk that came back empty, or one far behind. What the archive
//! already holds is copied from object storage, not from the leader, and only the tail
//! the archive does not have yet comes from the leader; so rebuilding an agent does not
//! load the leaders' disks and network with the whole history of its partitions.
//!
//! The archive's batches are the partition's own batches, rebuilt with their offsets,
//! leader epochs, producer fields and control markers ([`strata_tiering::codec`]), and
//! everything archived is committed (below the high watermark), so it is in every
//! in-sync replica's log and in the leader's: appended as a follower appends what it
//! fetched, it keeps the replica's log a prefix of its leader's. Only what the leader
//! still keeps locally is copied (a follower's log starts where its leader's local log
//! starts; older archived offsets are served from the archive, as by the leader).
//!
//! Copying into replicas that are not in sync, from the archive and from leaders alike,
//! is held to `replica_rebuild_max_bytes_per_second` per agent ([`RateLimit`]); followers
//! in sync are never held back (they would fall out of the ISR).

use std::sync::Arc;
use std::time::Duration;

use strata_core::background::RateLimit;
use strata_tiering::ArchiveReader;
use tokio::time::Instant;

use crate::partition::{Partition, PartitionError};

/// Bytes of archived batches read per step.
const ARCHIVE_CHUNK_BYTES: usize = 8 * 1024 * 1024;
/// How long a partition's manifest read for a rebuild is trusted.
const MANIFEST_FRESH_FOR: Duration = Duration::from_secs(5);

/// Where this agent's rebuilding replicas copy from, and at what rate.
#[derive(Debug)]
pub struct Rebuilds {
    archive: Arc<ArchiveReader>,
    limit: RateLimit,
}

/// What one archive step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveStep {
    /// Copied this many bytes; the log ends at `log_end` now.
    Copied { bytes: usize, log_end: i64 },
    /// Nothing to copy from the archive at this offset: fetch from the leader.
    Leader,
}

impl Rebuilds {
    pub fn new(archive: Arc<ArchiveReader>, bytes_per_second: u64) -> Arc<Rebuilds> {
        Arc::new(Rebuilds {
            archive,
            limit: RateLimit::new(bytes_per_second, strata_core::clock::SystemClock::shared()),
        })
    }

    /// Charges `bytes` a replica not in sync copied from `source`, and waits as the
    /// rate asks.
    pub async fn charge(&self, partition: &Partition, source: &'static str, bytes: usize) {
        if bytes == 0 {
            return;
        }
        partition.note_rebuilt(source, bytes);
        crate::metrics::rebuilt(source, bytes);
        self.limit.take(bytes as u64).await;
    }

    /// Copies into `partition` (following `epoch`) what the archive holds from its log
    /// end on, one chunk, if its leader keeps that offset locally (`leader_log_start`)
    /// and the archive has it. `manifest_read`: when this replica last read the
    /// manifest (refreshed every few seconds).
    pub async fn from_archive(
        &self,
        partition: &Partition,
        epoch: i32,
        leader_log_start: i64,
        manifest_read: &mut Option<Instant>,
    ) -> Result<ArchiveStep, PartitionError> {
        let offset = partition.log_end_offset();
        if offset < leader_log_start {
            return Ok(ArchiveStep::Leader);
        }
        let refresh = manifest_read.is_none_or(|t| t.elapsed() > MANIFEST_FRESH_FOR);
        let manifest = self
            .archive
            .manifest(&partition.topic, partition.index, refresh)
            .await
            .map_err(|e| PartitionError::Archive(e.to_string()))?;
        if refresh {
            *manifest_read = Some(crate::clock::instant());
        }
        let archived_end = manifest.last().map_or(-1, |e| e.last_offset + 1);
        let archived_start = manifest.first().map_or(i64::MAX, |e| e.first_offset);
        if offset >= archived_end || offset < archived_start {
            return Ok(ArchiveStep::Leader);
        }
        let read = self
            .archive
            .read(
                &partition.topic,
                partition.index,
                offset,
                ARCHIVE_CHUNK_BYTES,
            )
            .await
            .map_err(|e| PartitionError::Archive(e.to_string()))?;
        let Some(read) = read else {
            return Ok(ArchiveStep::Leader);
        };
        // The batch holding `offset` may begin before it (a log that starts at its
        // leader's local log start, which need not be an archived batch's start):
        // those offsets come from the leader instead.
        let mut keep = 0;
        for (header, _) in strata_log::batch::BatchIter::new(&read) {
            if header.base_offset < offset {
                if keep == 0 && header.last_offset() >= offset {
                    return Ok(ArchiveStep::Leader);
                }
                continue;
            }
            keep += header.total_bytes();
        }
        let skip = read.len() - keep;
        let records = &read[skip..];
        if records.is_empty() {
            return Ok(ArchiveStep::Leader);
        }
        let hw = partition.high_watermark();
        let now = crate::clock::now_ms();
        let log_end = partition.append_replicated(epoch, records, hw, now)?;
        self.charge(partition, "archive", records.len()).await;
        Ok(ArchiveStep::Copied {
            bytes: records.len(),
            log_end,
        })
    }
}
