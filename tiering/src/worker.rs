//! The tiering worker: uploads closed segments as Parquet and publishes them in the
//! manifest.
//!
//! Crash consistency (DESIGN.md invariant 5): for each closed segment not yet covered by
//! the manifest, the worker (1) encodes it, (2) uploads it under a fresh unique name, and
//! only then (3) publishes it in one short metastore transaction that refuses anything
//! not continuing the manifest. A crash after (2) leaves an object no manifest names; the
//! next attempt uploads a new object and publishes that. A publish that finds its offsets
//! already covered changes nothing. So the manifest never has a gap or a double entry, and
//! nothing local is deleted (that is the agent's job) until the manifest covers it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_core::background::{Background, Kind};
use strata_core::clock::Clock;

use strata_metastore::{ManifestEntry, Metastore, Published};
use tokio_util::sync::CancellationToken;

use crate::codec::{SegmentEncoder, Summary};
use crate::error::{Error, Result};
use crate::reader::ArchiveReader;

/// Bytes of a segment read and encoded at a time.
const PIECE_BYTES: usize = 16 << 20;

/// A segment being encoded, moved into each background job and back.
struct Encoding {
    file: std::fs::File,
    path: PathBuf,
    /// Read and not encoded yet: the start of a batch that continues further on.
    pending: Vec<u8>,
    encoder: SegmentEncoder,
    read: u64,
    ended: bool,
}

impl Encoding {
    /// Reads the next piece and encodes the whole batches read so far.
    fn step(mut self) -> Result<Encoding> {
        use std::io::Read;
        let n = (&mut self.file)
            .take(PIECE_BYTES as u64)
            .read_to_end(&mut self.pending)
            .map_err(|source| Error::Io {
                context: format!("read segment {}", self.path.display()),
                source,
            })?;
        self.read += n as u64;
        let used = self.encoder.push(&self.pending)?;
        self.pending.drain(..used);
        if n < PIECE_BYTES {
            if !self.pending.is_empty() {
                return Err(Error::Codec(format!(
                    "segment {} ends in {} bytes of a partial batch",
                    self.path.display(),
                    self.pending.len()
                )));
            }
            self.ended = true;
        }
        Ok(self)
    }
}

/// A sealed segment of a local log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedSegment {
    pub base_offset: i64,
    pub next_offset: i64,
    pub path: PathBuf,
}

/// What the worker needs of a local partition.
pub trait LocalPartition: Send + Sync {
    fn topic(&self) -> &str;
    fn partition(&self) -> i32;
    /// Sealed segments, in offset order.
    fn closed_segments(&self) -> Vec<ClosedSegment>;
    fn log_end_offset(&self) -> i64;
    /// A lower bound of the high watermark: everything below it is committed. Only
    /// segments wholly below it are archived (a follower may still cut back anything
    /// above, and the archive must never hold what the log later drops).
    fn high_watermark(&self) -> i64;
    /// The aborted transactions whose abort markers lie in `[from, to)`, for the
    /// manifest entry of the segment that holds them.
    fn aborted_markers(&self, from: i64, to: i64) -> Vec<strata_metastore::ArchivedAbort> {
        let _ = (from, to);
        Vec::new()
    }
}

/// Tiering progress of one partition.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[schema(as = TieringProgress)]
pub struct PartitionStatus {
    pub topic: String,
    pub partition: i32,
    /// The last archived offset, or -1
    pub archived_upto: i64,
    pub log_end_offset: i64,
    /// Records not yet archived
    pub lag_records: i64,
    /// Objects the partition's manifest names
    pub objects: usize,
    /// Why the last attempt failed, if it did
    pub last_error: Option<String>,
}

/// Injected faults for tests, from `STRATA_FAILPOINT_TIERING_BEFORE_PUBLISH=N`: the next N
/// uploads fail after the object is written and before it is published.
#[derive(Debug, Default)]
pub struct Failpoints {
    before_publish: AtomicU32,
}

impl Failpoints {
    pub fn from_env() -> Failpoints {
        let n = std::env::var("STRATA_FAILPOINT_TIERING_BEFORE_PUBLISH")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Failpoints {
            before_publish: AtomicU32::new(n),
        }
    }

    fn fire_before_publish(&self) -> bool {
        self.before_publish
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

pub struct TieringWorker {
    reader: Arc<ArchiveReader>,
    metastore: Metastore,
    status: Mutex<BTreeMap<(String, i32), PartitionStatus>>,
    /// When the pass in progress began (wall-clock ms), -1 between passes: a pass stuck
    /// on a hung store shows here long before its calls time out.
    pass_started_ms: AtomicI64,
    failpoints: Failpoints,
    /// What the pauses between passes are timed on.
    clock: Arc<dyn Clock>,
    /// Where segments are read and encoded: off the request runtime, at a lower
    /// priority, within `tiering_max_bytes_per_second`.
    background: Arc<Background>,
}

impl std::fmt::Debug for TieringWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieringWorker").finish_non_exhaustive()
    }
}

impl TieringWorker {
    pub fn new(
        reader: Arc<ArchiveReader>,
        metastore: Metastore,
        background: Arc<Background>,
    ) -> TieringWorker {
        TieringWorker {
            reader,
            metastore,
            status: Mutex::new(BTreeMap::new()),
            pass_started_ms: AtomicI64::new(-1),
            failpoints: Failpoints::from_env(),
            clock: strata_core::clock::SystemClock::shared(),
            background,
        }
    }

    /// Progress of every partition seen so far.
    pub fn status(&self) -> Vec<PartitionStatus> {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// When the pass in progress began (wall-clock ms), if one is.
    pub fn pass_started_ms(&self) -> Option<i64> {
        let started = self.pass_started_ms.load(Ordering::Relaxed);
        (started >= 0).then_some(started)
    }

    /// The last archived offset of a partition, as of the last pass (-1: none).
    pub fn archived_upto(&self, topic: &str, partition: i32) -> i64 {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(topic.to_string(), partition))
            .map_or(-1, |s| s.archived_upto)
    }

    fn record(&self, s: PartitionStatus) {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((s.topic.clone(), s.partition), s);
    }

    /// Forgets partitions no longer served.
    pub fn retain(&self, keep: impl Fn(&str, i32) -> bool) {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(t, p), _| keep(t, *p));
    }

    /// Archives every closed segment of `p` not yet in the manifest.
    pub async fn tier_partition(&self, p: &dyn LocalPartition) -> Result<()> {
        let (topic, partition) = (p.topic().to_string(), p.partition());
        let manifest = self.reader.manifest(&topic, partition, true).await?;
        let mut archived_upto = manifest.last().map_or(-1, |e| e.last_offset);
        let mut objects = manifest.len();
        let mut outcome = Ok(());
        let committed = p.high_watermark();
        for seg in p.closed_segments() {
            if seg.next_offset > committed {
                break;
            }
            if seg.next_offset - 1 <= archived_upto || seg.next_offset == seg.base_offset {
                continue;
            }
            let covered_from = if archived_upto >= 0 {
                archived_upto + 1
            } else {
                seg.base_offset
            };
            let aborted = p.aborted_markers(covered_from, seg.next_offset);
            match self
                .tier_segment(&topic, partition, &seg, archived_upto, &aborted)
                .await
            {
                Ok(None) => {}
                Ok(Some(entry)) => {
                    archived_upto = entry.last_offset;
                    objects += 1;
                }
                Err(e) => {
                    let kind = match e {
                        Error::Store { .. } | Error::Timeout(_) => "object_store",
                        Error::Metastore(_) => "metastore",
                        _ => "other",
                    };
                    metrics::counter!("strata_tiering_errors_total", "kind" => kind).increment(1);
                    outcome = Err(e);
                    break;
                }
            }
        }
        let end = p.log_end_offset();
        self.record(PartitionStatus {
            topic,
            partition,
            archived_upto,
            log_end_offset: end,
            lag_records: (end - (archived_upto + 1)).max(0),
            objects,
            last_error: outcome.as_ref().err().map(|e| e.to_string()),
        });
        outcome
    }

    /// Uploads and publishes one segment. Its entry covers the offsets from just after
    /// `archived_upto` (the manifest's end; the segment's base when it is empty) to the
    /// segment's end, gaps that compaction left included, so that the manifest stays
    /// contiguous. A segment compaction emptied is skipped (`None`): the next one's
    /// entry covers its offsets.
    async fn tier_segment(
        &self,
        topic: &str,
        partition: i32,
        seg: &ClosedSegment,
        archived_upto: i64,
        aborted: &[strata_metastore::ArchivedAbort],
    ) -> Result<Option<ManifestEntry>> {
        let first = if archived_upto >= 0 {
            archived_upto + 1
        } else {
            seg.base_offset
        };
        // Compaction may have emptied the segment (a file of no bytes): the next
        // segment's entry covers its offsets.
        let Some((file, summary)) = self.encode(&seg.path).await? else {
            return Ok(None);
        };
        let last = (seg.next_offset - 1).max(summary.last_offset);
        let entry = ManifestEntry {
            aborted: aborted.to_vec(),
            ..crate::merge::upload(
                self.reader.archive(),
                topic,
                partition,
                (first, last),
                file,
                &summary,
            )
            .await?
        };
        if self.failpoints.fire_before_publish() {
            return Err(Error::Injected("tiering.before_publish"));
        }
        let published = self
            .metastore
            .publish_archived(topic, partition, entry.clone())
            .await?;
        self.reader.invalidate(topic, partition);
        match published {
            Published::Added => tracing::info!(
                topic,
                partition,
                first_offset = entry.first_offset,
                last_offset = entry.last_offset,
                bytes = entry.size_bytes,
                object = %entry.path,
                "archived segment"
            ),
            Published::AlreadyCovered => {
                tracing::info!(topic, partition, object = %entry.path, "segment was already archived; object left for collection")
            }
        }
        Ok(Some(entry))
    }

    /// Reads and encodes the closed segment at `path` on the background pool, a piece
    /// at a time: each piece is one job, charged to the tiering rate, so that a 1 GiB
    /// segment neither sits in memory whole nor holds a thread for seconds. `None`: the
    /// file holds no bytes. (Its size is read from the opened file: the path may be
    /// swapped for a compacted copy meanwhile, and the opened file is one or the other,
    /// whole.)
    async fn encode(&self, path: &std::path::Path) -> Result<Option<(Vec<u8>, Summary)>> {
        let opened = path.to_path_buf();
        let (file, size) = self
            .background
            .run(Kind::Tiering, 0, move || {
                let file = std::fs::File::open(opened)?;
                let size = file.metadata()?.len();
                Ok::<_, std::io::Error>((file, size))
            })
            .await
            .map_err(|e| Error::Codec(e.to_string()))?
            .map_err(|source| Error::Io {
                context: format!("open segment {}", path.display()),
                source,
            })?;
        let mut encoding = Encoding {
            file,
            path: path.to_path_buf(),
            pending: Vec::new(),
            encoder: SegmentEncoder::new()?,
            read: 0,
            ended: false,
        };
        while !encoding.ended {
            let piece = (size.saturating_sub(encoding.read)).clamp(1, PIECE_BYTES as u64);
            encoding = self
                .background
                .run(Kind::Tiering, piece, move || encoding.step())
                .await
                .map_err(|e| Error::Codec(e.to_string()))??;
        }
        if encoding.read == 0 {
            return Ok(None);
        }
        encoding.encoder.finish().map(Some)
    }

    /// Tiers every partition `partitions` yields, every `every`, until shutdown. After a
    /// failed pass it waits twice as long (at most a minute) before the next.
    pub async fn run<F>(
        self: Arc<Self>,
        partitions: F,
        every: Duration,
        shutdown: CancellationToken,
    ) where
        F: Fn() -> Vec<Arc<dyn LocalPartition>> + Send + Sync + 'static,
    {
        let mut wait = every;
        loop {
            tokio::select! {
                _ = self.clock.sleep(wait) => {}
                _ = shutdown.cancelled() => {
                    tracing::debug!("tiering stopped: shutdown");
                    return;
                }
            }
            let mut failed = false;
            self.pass_started_ms
                .store(self.clock.wall_ms(), Ordering::Relaxed);
            let current = partitions();
            self.retain(|t, p| current.iter().any(|c| c.topic() == t && c.partition() == p));
            for p in current {
                if let Err(e) = self.tier_partition(p.as_ref()).await {
                    tracing::warn!(topic = p.topic(), partition = p.partition(), error = %e, "tiering failed; will retry");
                    failed = true;
                }
            }
            self.pass_started_ms.store(-1, Ordering::Relaxed);
            wait = if failed {
                (wait * 2).min(Duration::from_secs(60))
            } else {
                every
            };
        }
    }
}
