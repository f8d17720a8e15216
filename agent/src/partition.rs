//! One partition replica on this agent: its log, its role (leader or follower of a
//! leader epoch), its high watermark, and its group-commit flusher.
//!
//! The leader's replication bookkeeping (followers' log ends, the ISR, the high
//! watermark) is [`strata_replication::LeaderState`], a pure state machine; this module
//! feeds it the events (appends made durable, follower fetches, ISR changes committed)
//! and publishes what it decides through a watch, which produce (acks=all) and fetch
//! (long polls, replica fetches) wait on.
//!
//! Durability policy: every append wakes the flusher, which fsyncs the active segment
//! once for everything appended since its last fsync (group commit). The leader counts
//! its own log only up to what is fsynced, and each in-sync follower up to the offset it
//! last fetched from (its copy is written, and fsynced by its own flusher). So with one
//! replica the high watermark is exactly the fsynced end, as before replication; with
//! more it is the smallest of those ends over the ISR. Consumers never read at or above
//! it, and acks=all is answered once it covers the batch. See `docs/log-format.md` and
//! `docs/decisions/0003-replication.md`.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use strata_log::{AppendOutcome, ClosedSegmentInfo, LogConfig, PartitionLog};
use strata_replication::{
    Ack, Flushed, IsrChange, Members, PartitionRecord, Refusal, Replica, Role, Transition,
};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::tasks::{Stopped, Tasks};

mod txn;
pub mod view;

pub use txn::{Bound, OpenTransaction};
pub use view::{FollowerView, PartitionView, RebuildView, ReplicaList, ReplicaView, RoleView};

/// Whether a read may wait for the disk ([`Partition::read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disk {
    /// Only what the page cache holds; fail rather than wait.
    CachedOnly,
    /// Wait for the disk (on the blocking pool).
    Wait,
}

/// What waiters on a partition watch: it changes on every append, watermark move and
/// role change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// Every offset below this is committed: consumers may read it.
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub leader_epoch: i32,
    /// Whether this replica leads `leader_epoch`.
    pub leader: bool,
    /// An fsync failed: the partition takes no more writes (as Kafka halts on a
    /// failed flush, since the page cache may have dropped the data).
    pub failed: bool,
    /// As leader, the size of the ISR the metastore has: acks=all writes waiting
    /// fail once it is below `min.insync.replicas` (the watermark then stands still).
    pub isr_len: usize,
}

#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub index: i32,
    log: Mutex<PartitionLog>,
    /// The replication rules' state: role, watermark, what is durable. Lock order:
    /// `replica` before `log`.
    replica: Mutex<Replica>,
    offsets: watch::Sender<Offsets>,
    flush_wanted: Notify,
    stop: CancellationToken,
    /// Stops the task copying from the leader, while this replica follows.
    fetcher: Mutex<Option<CancellationToken>>,
    /// KIP-890 verifications in flight, by producer id (see `partition/txn.rs`).
    verifications: Mutex<std::collections::HashMap<i64, u64>>,
    next_verification: std::sync::atomic::AtomicU64,
    node_id: i32,
    /// Whether the newest record applied lists this replica in the ISR.
    in_isr: std::sync::atomic::AtomicBool,
    /// What this replica copied while it was not in sync (`rebuild.rs`).
    rebuild: Mutex<RebuildProgress>,
}

/// What a replica copied while it was not in sync, by source.
#[derive(Debug, Default, Clone, Copy)]
pub struct RebuildProgress {
    pub from_archive_bytes: u64,
    pub from_leader_bytes: u64,
    /// The source of the last copy: `archive` or `leader`.
    pub source: Option<&'static str>,
    /// The leader's high watermark, as its last answer said.
    pub leader_high_watermark: i64,
}

/// A replica's offsets and size, and as leader its replication, for `/metrics`.
#[derive(Debug)]
pub struct Gauges {
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub size_bytes: u64,
    pub leader: Option<LeaderGauges>,
}

#[derive(Debug)]
pub struct LeaderGauges {
    pub replicas: usize,
    pub isr: usize,
    /// By follower that has fetched in this epoch: records behind this leader's log end.
    pub follower_lag: Vec<(i32, i64)>,
}

/// What a read returns besides the bytes.
#[derive(Debug)]
pub struct ReadOutcome {
    pub records: Vec<u8>,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// For a read up to the last stable offset: the aborted transactions with records
    /// in what was read.
    pub aborted: Vec<strata_log::txn::AbortedTxn>,
}

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    #[error("partition {0} failed to flush to disk and is offline")]
    Offline(String),
    #[error("archive read failed: {0}")]
    Archive(String),
    /// Log compaction could not run (its key map is too small for one segment).
    #[error("log compaction: {0}")]
    Compaction(String),
    /// Disk work handed to the blocking pool did not come back (it panicked, or the
    /// runtime is shutting down).
    #[error("partition {0}: disk work was interrupted")]
    Interrupted(String),
    #[error("this agent does not lead partition {0}")]
    NotLeader(String),
    #[error("partition {partition}: leader epoch {got} is older than the current {current}")]
    FencedLeaderEpoch {
        partition: String,
        current: i32,
        got: i32,
    },
    #[error("partition {partition}: leader epoch {got} is newer than this agent knows ({current})")]
    UnknownLeaderEpoch {
        partition: String,
        current: i32,
        got: i32,
    },
    #[error("partition {partition}: {isr} in-sync replicas, min.insync.replicas is {min}")]
    NotEnoughReplicas {
        partition: String,
        isr: usize,
        min: usize,
    },
    #[error(
        "partition {partition}: written, but the in-sync replicas fell to {isr}, below min.insync.replicas {min}"
    )]
    NotEnoughReplicasAfterAppend {
        partition: String,
        isr: usize,
        min: usize,
    },
    #[error(
        "partition {partition}: the new leader's high watermark {high_watermark} has not reached the start of its epoch {epoch_start} yet"
    )]
    OffsetNotAvailable {
        partition: String,
        high_watermark: i64,
        epoch_start: i64,
    },
}

impl Partition {
    /// Opens (recovering) the log under `dir` and starts the flusher (tracked by
    /// `tasks`). The replica has no role until [`Partition::apply`].
    pub fn open(
        topic: &str,
        index: i32,
        node_id: i32,
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
        tasks: &Tasks,
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
        let start = log.log_start_offset();
        // The watermark saved before a restart was committed then; start from it (capped
        // at the log end) rather than the log start, so that ListOffsets does not go
        // back until the followers have fetched again.
        let saved = read_checkpoint(dir).map_or(start, |hw| hw.clamp(start, end));
        let partition = Arc::new(Partition {
            topic: topic.to_string(),
            index,
            log: Mutex::new(log),
            replica: Mutex::new(Replica::new(node_id, end, saved)),
            // What survived on disk is durable; what is committed is not known until a
            // leader says (or, leading alone, this replica's own fsynced end).
            offsets: watch::Sender::new(Offsets {
                high_watermark: saved,
                log_end_offset: end,
                leader_epoch: -1,
                leader: false,
                failed: false,
                isr_len: 0,
            }),
            flush_wanted: Notify::new(),
            stop: tasks.shutdown().child_token(),
            fetcher: Mutex::new(None),
            verifications: Mutex::new(std::collections::HashMap::new()),
            next_verification: std::sync::atomic::AtomicU64::new(1),
            node_id,
            in_isr: std::sync::atomic::AtomicBool::new(false),
            rebuild: Mutex::new(RebuildProgress::default()),
        });
        tasks.spawn(
            format!("flusher {topic}-{index}"),
            Arc::clone(&partition).flusher(),
        );
        Ok(partition)
    }

    fn log(&self) -> MutexGuard<'_, PartitionLog> {
        // A panic while holding the lock leaves the log as consistent as the last
        // completed call, so a poisoned lock is still usable.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn replica(&self) -> MutexGuard<'_, Replica> {
        self.replica.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn name(&self) -> String {
        format!("{}-{}", self.topic, self.index)
    }

    fn not_leader(&self) -> PartitionError {
        PartitionError::NotLeader(self.name())
    }

    /// Takes the role `record` names for this agent (see [`Replica::apply`]). On
    /// [`Transition::Follows`] with a leader, the caller starts a fetcher with
    /// [`Partition::start_fetcher`].
    pub fn apply(&self, record: &PartitionRecord, now_ms: i64) -> Transition {
        self.in_isr.store(
            record.isr.contains(&self.node_id),
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut replica = self.replica();
        let log_end = self.log().log_end_offset();
        let transition = replica.apply(record, log_end, now_ms);
        let hw = replica.high_watermark();
        match transition {
            Transition::None => {}
            Transition::Leads { epoch, .. } => {
                self.stop_fetcher();
                self.log().set_leader_epoch(epoch);
                self.offsets.send_modify(|o| {
                    o.leader = true;
                    o.leader_epoch = epoch;
                    o.high_watermark = hw;
                    o.log_end_offset = log_end;
                    o.isr_len = record.isr.len();
                });
                tracing::debug!(partition = %self.name(), epoch, isr = ?record.isr, log_end, high_watermark = hw, "leading");
            }
            Transition::Follows {
                leader,
                epoch,
                deposed,
            } => {
                if deposed.is_some() {
                    tracing::debug!(partition = %self.name(), epoch, leader, "no longer leading");
                }
                self.stop_fetcher();
                self.offsets.send_modify(|o| {
                    o.leader = false;
                    o.leader_epoch = epoch;
                    o.high_watermark = hw;
                });
            }
        }
        transition
    }

    /// The domain error for a refusal of the replication rules, for a request that
    /// gave leader epoch `got`.
    fn refused(&self, refusal: Refusal, got: i32) -> PartitionError {
        let partition = self.name();
        match refusal {
            Refusal::NotLeader => PartitionError::NotLeader(partition),
            Refusal::FencedEpoch { current } => PartitionError::FencedLeaderEpoch {
                partition,
                current,
                got,
            },
            Refusal::UnknownEpoch { current } => PartitionError::UnknownLeaderEpoch {
                partition,
                current,
                got,
            },
            Refusal::NotEnoughReplicas { isr, min } => PartitionError::NotEnoughReplicas {
                partition,
                isr,
                min,
            },
            Refusal::WatermarkBehindEpochStart {
                high_watermark,
                epoch_start,
            } => PartitionError::OffsetNotAvailable {
                partition,
                high_watermark,
                epoch_start,
            },
            Refusal::BeyondLogEnd { offset, log_end } => {
                PartitionError::Log(strata_log::Error::OffsetOutOfRange {
                    offset,
                    log_start: self.log().log_start_offset(),
                    log_end,
                })
            }
        }
    }

    /// Whether the newest partition record this replica applied lists it in the ISR.
    pub fn in_isr(&self) -> bool {
        self.in_isr.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A copy of `bytes` from `source` (`archive` or `leader`) while not in sync.
    pub fn note_rebuilt(&self, source: &'static str, bytes: usize) {
        let mut r = self.rebuild.lock().unwrap_or_else(|p| p.into_inner());
        match source {
            "archive" => r.from_archive_bytes += bytes as u64,
            _ => r.from_leader_bytes += bytes as u64,
        }
        r.source = Some(source);
    }

    /// The leader's high watermark, as a fetch answer said.
    pub fn note_leader_high_watermark(&self, hw: i64) {
        self.rebuild
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .leader_high_watermark = hw;
    }

    /// What this replica copied while it was not in sync.
    pub fn rebuild_progress(&self) -> RebuildProgress {
        *self.rebuild.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The token the new fetcher stops on (replacing, and stopping, any earlier one).
    pub fn start_fetcher(&self) -> CancellationToken {
        let token = self.stop.child_token();
        let old = self
            .fetcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(token.clone());
        if let Some(old) = old {
            old.cancel();
        }
        token
    }

    fn stop_fetcher(&self) {
        if let Some(t) = self
            .fetcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.cancel();
        }
    }

    /// The epoch this replica leads, if it leads.
    pub fn leader_epoch(&self) -> Option<i32> {
        let o = *self.offsets.borrow();
        o.leader.then_some(o.leader_epoch)
    }

    /// Checks a client's `current_leader_epoch` (-1: not given) against this replica's
    /// ([`Replica::check_epoch`]).
    pub fn check_epoch(&self, current_leader_epoch: i32) -> Result<(), PartitionError> {
        let checked = self.replica().check_epoch(current_leader_epoch);
        checked.map_err(|r| self.refused(r, current_leader_epoch))
    }

    /// Whether this leader may answer offsets to clients yet
    /// ([`Replica::offsets_settled`], KIP-207).
    pub fn offsets_settled(&self) -> Result<(), PartitionError> {
        let settled = self.replica().offsets_settled();
        settled.map_err(|r| self.refused(r, -1))
    }

    /// Validates and appends a produced record set as leader; returns at once (not
    /// committed yet) with the epoch it was appended in. With fewer in-sync replicas
    /// than `min_insync` (acks=all only) nothing is appended. It writes to the page
    /// cache and never waits for the disk: a segment it fills is sealed later by the
    /// flusher.
    ///
    /// `verified`: for a transactional batch that needed KIP-890 verification, the
    /// producer id and the token [`Partition::start_verification`] gave; the append is
    /// refused if a marker ended the producer's transaction since.
    pub fn append(
        &self,
        records: &Bytes,
        now_ms: i64,
        min_insync: Option<usize>,
        verified: Option<(i64, u64)>,
    ) -> Result<(AppendOutcome, i32), PartitionError> {
        if self.offsets.borrow().failed {
            return Err(PartitionError::Offline(self.name()));
        }
        let replica = self.replica();
        let epoch = replica.admit(min_insync).map_err(|r| self.refused(r, -1))?;
        let (outcome, end, ack_after_fsync) = {
            let mut log = self.log();
            if let Some((producer_id, token)) = verified {
                self.check_verification(producer_id, token)?;
            }
            let outcome = log.append_shared(records, now_ms)?;
            (outcome, log.log_end_offset(), log.config().ack_after_fsync)
        };
        if !outcome.duplicate {
            self.appended(replica, end, ack_after_fsync);
        }
        Ok((outcome, epoch))
    }

    /// Publishes what an append as leader wrote (the log now ends at `end`) and wakes
    /// the flusher.
    fn appended(&self, mut replica: MutexGuard<'_, Replica>, end: i64, ack_after_fsync: bool) {
        // Page-cache durability (`ack_durability = page-cache`): written counts as durable.
        let hw = (!ack_after_fsync && replica.on_durable(end)).then(|| replica.high_watermark());
        drop(replica);
        self.offsets.send_if_modified(|o| {
            let moved = o.log_end_offset < end || hw.is_some_and(|hw| hw > o.high_watermark);
            o.log_end_offset = o.log_end_offset.max(end);
            if let Some(hw) = hw {
                o.high_watermark = o.high_watermark.max(hw);
            }
            moved
        });
        self.flush_wanted.notify_one();
    }

    /// Runs `f` on the blocking pool: for disk work that holds the log's lock (a
    /// follower's truncation, timestamp lookups, snapshots), so that no runtime thread
    /// holds it across an fsync or a read.
    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Partition) -> Result<T, PartitionError> + Send + 'static,
    ) -> Result<T, PartitionError> {
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&this))
            .await
            .map_err(|_| PartitionError::Interrupted(self.name()))?
    }

    /// Waits until the watermark covers every offset below `end_offset`, appended in
    /// `epoch`; then the write is committed, and acknowledged if the ISR still has
    /// `min_insync` members. Fails if this agent stopped leading first; elected again in
    /// a newer epoch without following anyone between, it goes on waiting
    /// ([`strata_replication::Replica::ack`]).
    pub async fn wait_committed(
        &self,
        end_offset: i64,
        epoch: i32,
        min_insync: usize,
    ) -> Result<(), PartitionError> {
        let mut rx = self.offsets.subscribe();
        loop {
            let offsets = rx
                .wait_for(|o| {
                    o.failed
                        || o.leader_epoch != epoch
                        || !o.leader
                        || o.high_watermark >= end_offset
                        || o.isr_len < min_insync
                })
                .await
                .map(|o| *o)
                .map_err(|_| PartitionError::Offline(self.name()))?;
            if offsets.failed {
                return Err(PartitionError::Offline(self.name()));
            }
            let ack = self.replica().ack(epoch, end_offset, min_insync);
            match ack {
                Ack::Committed => return Ok(()),
                Ack::NotEnoughReplicas { isr } => {
                    return Err(PartitionError::NotEnoughReplicasAfterAppend {
                        partition: self.name(),
                        isr,
                        min: min_insync,
                    });
                }
                Ack::Deposed => return Err(self.not_leader()),
                Ack::Pending => {
                    if rx.changed().await.is_err() {
                        return Err(PartitionError::Offline(self.name()));
                    }
                }
            }
        }
    }

    /// Follower `follower` fetches from `offset` in `epoch`: the leader learns how far its
    /// log reaches (which may move the watermark).
    pub fn on_replica_fetch(
        &self,
        follower: i32,
        epoch: i32,
        offset: i64,
        now_ms: i64,
    ) -> Result<(), PartitionError> {
        let mut replica = self.replica();
        let log_end = self.log().log_end_offset();
        let rose = replica
            .on_replica_fetch(follower, epoch, offset, log_end, now_ms)
            .map_err(|r| self.refused(r, epoch))?;
        if rose {
            let hw = replica.high_watermark();
            self.offsets.send_modify(|o| o.high_watermark = hw);
        }
        Ok(())
    }

    /// The ISR change to send to the metastore now, with its epoch (see
    /// [`Replica::isr_tick`]).
    pub fn isr_tick(
        &self,
        now_ms: i64,
        lag_ms: i64,
        members: Option<Members<'_>>,
    ) -> Option<(i32, IsrChange)> {
        self.replica().isr_tick(now_ms, lag_ms, members)
    }

    /// Follower `replica`'s agent restarted or left: its earlier fetches no longer count
    /// ([`Replica::forget_follower`]).
    pub fn forget_follower(&self, replica: i32) {
        self.replica().forget_follower(replica);
    }

    /// The metastore's answer to the ISR change of `epoch`: `Some(isr)` if committed.
    pub fn isr_result(&self, epoch: i32, committed: Option<Vec<i32>>) {
        let mut replica = self.replica();
        let rose = replica.on_isr_result(epoch, committed);
        let hw = replica.high_watermark();
        let isr_len = replica.leader().map_or(0, |l| l.isr.len());
        self.offsets.send_if_modified(|o| {
            let changed = rose || o.isr_len != isr_len;
            o.high_watermark = o.high_watermark.max(hw);
            o.isr_len = isr_len;
            changed
        });
    }

    /// Sets `min.insync.replicas` (the leader's watermark does not move below it).
    pub fn set_min_insync(&self, min_insync: usize) {
        let mut replica = self.replica();
        if replica.set_min_insync(min_insync) {
            let hw = replica.high_watermark();
            self.offsets.send_modify(|o| o.high_watermark = hw);
        }
    }

    /// What an operator sees of this replica (`GET /v1/partitions`).
    pub fn status(&self, now_ms: i64) -> ReplicaView {
        let offsets = *self.offsets.borrow();
        let (log_start, log_end, last_stable, size) = {
            let mut log = self.log();
            (
                log.log_start_offset(),
                log.log_end_offset(),
                log.last_stable_offset(offsets.high_watermark),
                log.size_bytes(),
            )
        };
        let role = match self.replica().role() {
            Role::Leader(l) => RoleView::Leader {
                isr: l.isr.clone(),
                isr_change_pending: l.pending.as_ref().map(|p| p.isr.clone()),
                followers: (l.followers.iter())
                    .map(|(id, f)| FollowerView {
                        node_id: *id,
                        log_end_offset: f.log_end_offset,
                        caught_up_ms_ago: now_ms - f.last_caught_up_ms,
                    })
                    .collect(),
            },
            Role::Follower { leader } => {
                let in_isr = self.in_isr();
                let r = self.rebuild_progress();
                let rebuild =
                    (!in_isr || r.from_archive_bytes + r.from_leader_bytes > 0).then(|| {
                        let offsets_left = (r.leader_high_watermark - log_end).max(0);
                        // Bytes left, at the bytes per offset of what this log holds.
                        let per_offset = size as f64 / (log_end - log_start).max(1) as f64;
                        RebuildView {
                            copying: !in_isr,
                            source: r.source.map(str::to_string),
                            from_archive_bytes: r.from_archive_bytes,
                            from_leader_bytes: r.from_leader_bytes,
                            leader_high_watermark: r.leader_high_watermark,
                            offsets_left,
                            estimated_bytes_left: (offsets_left as f64 * per_offset) as u64,
                        }
                    });
                RoleView::Follower {
                    leader: *leader,
                    in_isr,
                    rebuild,
                }
            }
        };
        ReplicaView {
            topic: self.topic.clone(),
            partition: self.index,
            leader_epoch: offsets.leader_epoch,
            log_start_offset: log_start,
            log_end_offset: log_end,
            high_watermark: offsets.high_watermark,
            last_stable_offset: last_stable,
            offline: offsets.failed,
            role,
        }
    }

    /// What `/metrics` reports of this replica (`metrics.rs`).
    pub fn gauges(&self) -> Gauges {
        let offsets = *self.offsets.borrow();
        let (log_start_offset, log_end_offset, size_bytes) = {
            let log = self.log();
            (
                log.log_start_offset(),
                log.log_end_offset(),
                log.size_bytes(),
            )
        };
        let leader = match self.replica().role() {
            Role::Leader(l) => Some(LeaderGauges {
                replicas: l.replicas.len(),
                isr: l.isr.len(),
                follower_lag: l
                    .followers
                    .iter()
                    .filter_map(|(id, f)| {
                        let behind = log_end_offset - f.log_end_offset?;
                        Some((*id, behind.max(0)))
                    })
                    .collect(),
            }),
            Role::Follower { .. } => None,
        };
        Gauges {
            log_start_offset,
            log_end_offset,
            high_watermark: offsets.high_watermark,
            size_bytes,
            leader,
        }
    }

    /// The base timestamp of the batch holding `offset`, if the local log has it below
    /// the high watermark. Reads the batch's header only.
    pub fn batch_timestamp(&self, offset: i64) -> Option<i64> {
        if offset >= self.high_watermark() {
            return None;
        }
        let plan = self.log().read_plan(offset, 1).ok()??;
        plan.header().ok()?.map(|h| h.base_timestamp)
    }

    /// The bytes and the count of the segments holding offsets from `offset` on.
    pub fn segments_from(&self, offset: i64) -> (u64, usize) {
        self.log().segments_from(offset)
    }

    /// Runs `f` on the log if this replica still follows `epoch` (so a fetcher of an
    /// epoch that ended cannot touch the log), then publishes the new log end and the
    /// watermark `leader_hw` (capped at the log end).
    fn as_follower<T>(
        &self,
        epoch: i32,
        leader_hw: Option<i64>,
        f: impl FnOnce(&mut PartitionLog) -> Result<T, strata_log::Error>,
    ) -> Result<T, PartitionError> {
        let mut replica = self.replica();
        replica
            .may_copy(epoch)
            .map_err(|r| self.refused(r, epoch))?;
        if self.offsets.borrow().failed {
            return Err(PartitionError::Offline(self.name()));
        }
        let (out, before, start, end) = {
            let mut log = self.log();
            let before = log.log_end_offset();
            let out = f(&mut log)?;
            (out, before, log.log_start_offset(), log.log_end_offset())
        };
        replica.copied(before, start, end, leader_hw);
        let hw = replica.high_watermark();
        self.offsets.send_modify(|o| {
            o.log_end_offset = end;
            o.high_watermark = hw;
        });
        drop(replica);
        self.flush_wanted.notify_one();
        Ok(out)
    }

    /// Appends batches copied from the leader of `epoch`; takes the leader's watermark.
    /// Returns the new log end.
    pub fn append_replicated(
        &self,
        epoch: i32,
        records: &[u8],
        leader_hw: i64,
        now_ms: i64,
    ) -> Result<i64, PartitionError> {
        self.as_follower(epoch, Some(leader_hw), |log| {
            if records.is_empty() {
                Ok(log.log_end_offset())
            } else {
                log.append_replicated(records, now_ms)
            }
        })
    }

    /// Cuts a divergent suffix off, as a follower of `epoch` (on the blocking pool: it
    /// fsyncs). Returns the new log end.
    pub async fn truncate(
        self: &Arc<Self>,
        epoch: i32,
        offset: i64,
        now_ms: i64,
    ) -> Result<i64, PartitionError> {
        self.blocking(move |p| p.as_follower(epoch, None, |log| log.truncate_to(offset, now_ms)))
            .await
    }

    /// Empties the log to start again at `offset` (the leader's log start), as a
    /// follower of `epoch` that fell behind it (on the blocking pool).
    pub async fn reset_to(
        self: &Arc<Self>,
        epoch: i32,
        offset: i64,
        now_ms: i64,
    ) -> Result<i64, PartitionError> {
        self.blocking(move |p| {
            p.as_follower(epoch, Some(offset), |log| log.reset_to(offset, now_ms))
        })
        .await
    }

    /// Whether an fsync failed (the partition takes no writes and copies nothing).
    pub fn is_offline(&self) -> bool {
        self.offsets.borrow().failed
    }

    /// Saves the high watermark, so that a restart starts from it
    /// (`replication-offset-checkpoint` in Kafka). Written atomically; rare enough
    /// (maintenance and shutdown) to fsync.
    pub fn checkpoint_high_watermark(&self) -> std::io::Result<()> {
        let hw = self.high_watermark();
        let dir = self.log().dir().to_path_buf();
        let path = dir.join(CHECKPOINT_FILE);
        if read_checkpoint(&dir) == Some(hw) {
            return Ok(());
        }
        let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
        {
            use std::io::Write as _;
            let mut f = std::fs::File::create(&tmp)?;
            writeln!(f, "{hw}")?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, &path)
    }

    /// OffsetForLeaderEpoch on this log: the largest epoch at or below `epoch` and where
    /// it ends. A leader's own epoch counts as begun even before its first append (as in
    /// Kafka, whose leader records the epoch when it takes over), so asking for it or a
    /// later one answers the leader's epoch and its log end.
    pub fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)> {
        let led = self.leader_epoch();
        let log = self.log();
        match led {
            Some(current) if epoch >= current => Some((current, log.log_end_offset())),
            _ => log.epochs().end_offset_for(epoch, log.log_end_offset()),
        }
    }

    /// This log's epoch history, start and end, for a follower's truncation.
    pub fn epoch_history(&self) -> (strata_replication::EpochHistory, i64, i64) {
        let log = self.log();
        (
            log.epochs().clone(),
            log.log_start_offset(),
            log.log_end_offset(),
        )
    }

    pub fn high_watermark(&self) -> i64 {
        self.offsets.borrow().high_watermark
    }

    /// A receiver that changes on every append, watermark move and role change (for
    /// long polls).
    pub fn watch(&self) -> watch::Receiver<Offsets> {
        self.offsets.subscribe()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log().log_start_offset()
    }

    /// Reads from `offset` up to `bound`: the high watermark or the last stable offset
    /// (for consumers, read_uncommitted and read_committed) or the log end (for
    /// followers): whole batches, at most `max_bytes` unless the first batch alone is
    /// larger. Up to the last stable offset, the aborted transactions in what was read
    /// come with it.
    ///
    /// The runtime's threads never wait for the disk here: the read takes what the page
    /// cache holds (where recent records are), and only a read that would wait for the
    /// disk (a consumer catching up on old segments) is done again on the blocking pool
    /// (decision 0005).
    pub async fn read(
        self: &Arc<Self>,
        offset: i64,
        max_bytes: usize,
        bound: Bound,
    ) -> Result<ReadOutcome, PartitionError> {
        match self.read_from_disk(offset, max_bytes, bound, Disk::CachedOnly) {
            Err(PartitionError::Log(e)) if e.would_block() => {
                crate::metrics::read_from_disk();
                let partition = Arc::clone(self);
                tokio::task::spawn_blocking(move || {
                    partition.read_from_disk(offset, max_bytes, bound, Disk::Wait)
                })
                .await
                .map_err(|_| PartitionError::Interrupted(self.name()))?
            }
            read => read,
        }
    }

    fn read_from_disk(
        &self,
        offset: i64,
        max_bytes: usize,
        bound: Bound,
        disk: Disk,
    ) -> Result<ReadOutcome, PartitionError> {
        let high_watermark = self.high_watermark();
        let last_stable_offset = self.log().last_stable_offset(high_watermark);
        // The lock is held only to plan the read; the file is read after it is
        // released, and the read is planned again if the log was cut back meanwhile.
        let (mut records, log_start_offset, limit) = loop {
            let (plan, log_start_offset, limit) = {
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
                let limit = match bound {
                    Bound::HighWatermark => high_watermark,
                    Bound::LastStable => last_stable_offset,
                    Bound::LogEnd => log_end_offset,
                };
                // Between the limit and the log end there is nothing to read yet.
                let plan = if offset >= limit {
                    None
                } else {
                    log.read_plan(offset, max_bytes)?
                };
                (plan, log_start_offset, limit)
            };
            let Some(plan) = plan else {
                break (Vec::new(), log_start_offset, limit);
            };
            let generation = plan.generation();
            let buf = crate::buffers::reads().take(plan.max_bytes());
            let plan = match disk {
                Disk::CachedOnly => plan.cached_only(),
                Disk::Wait => plan,
            };
            let read = plan.read_into(buf);
            if self.log().generation() == generation {
                break (read?, log_start_offset, limit);
            }
        };
        // Batches at or above the limit are not committed yet: hold them back.
        let mut cut = 0;
        for (header, _) in strata_log::batch::BatchIter::new(&records) {
            if header.base_offset >= limit {
                break;
            }
            cut += header.total_bytes();
        }
        records.truncate(cut);
        let aborted = match strata_log::batch::BatchIter::new(&records).last() {
            Some((last, _)) if bound == Bound::LastStable => {
                self.log().aborted_between(offset, last.next_offset())
            }
            _ => Vec::new(),
        };
        Ok(ReadOutcome {
            records,
            high_watermark,
            last_stable_offset,
            log_start_offset,
            aborted,
        })
    }

    /// The first committed record at or after `target_ms`, as `(offset, timestamp)`
    /// (on the blocking pool: it reads batch headers under the log's lock).
    pub async fn offset_for_timestamp(
        self: &Arc<Self>,
        target_ms: i64,
    ) -> Result<Option<(i64, i64)>, PartitionError> {
        self.blocking(move |p| {
            let hw = p.high_watermark();
            Ok(p.log()
                .offset_for_timestamp(target_ms)?
                .filter(|(o, _)| *o < hw))
        })
        .await
    }

    /// The committed record with the largest timestamp (on the blocking pool).
    pub async fn max_timestamp_record(
        self: &Arc<Self>,
    ) -> Result<Option<(i64, i64)>, PartitionError> {
        self.blocking(|p| {
            let hw = p.high_watermark();
            Ok(p.log().max_timestamp_record()?.filter(|(o, _)| *o < hw))
        })
        .await
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
            let too_old =
                retention_ms >= 0 && now_ms.saturating_sub(seg.max_timestamp) > retention_ms;
            let too_big = retention_bytes >= 0 && local_bytes > retention_bytes;
            if too_old || too_big {
                local_bytes -= seg.size_bytes as i64;
            }
            too_old || too_big
        })?;
        Ok(deleted)
    }

    /// Moves the log start up to `offset` (retention or DeleteRecords, as the metastore
    /// has it) and deletes the sealed segments wholly below it, on the blocking pool.
    /// Returns how many segments went.
    pub async fn advance_start(self: &Arc<Self>, offset: i64) -> Result<usize, PartitionError> {
        if offset <= self.log().start_floor() && self.log_start_offset() >= offset {
            return Ok(0);
        }
        self.blocking(move |p| Ok(p.log().advance_start(offset)?))
            .await
    }

    /// The log start retention and DeleteRecords set (0 if never): it may lie below
    /// the local log's start, where the archive serves.
    pub fn start_floor(&self) -> i64 {
        self.log().start_floor()
    }

    /// One log-compaction pass (see [`strata_compactor::compaction`]) over the sealed
    /// segments below the high watermark, on the blocking pool: the rewriting happens
    /// without the log's lock, each swap with it. Returns the dirty ratio after the
    /// pass, and what the pass did if one was due.
    pub async fn compact(
        self: &Arc<Self>,
        policy: strata_compactor::CompactionPolicy,
        key_map_bytes: usize,
        now_ms: i64,
        background: &strata_core::background::Background,
    ) -> Result<(f64, Option<strata_compactor::Cleaned>), PartitionError> {
        use strata_core::background::Kind;
        let p = Arc::clone(self);
        let outcome = background.run(Kind::Compaction, 0, move || {
            let p = &p;
            // Below the last stable offset every transaction has ended, and the log's
            // aborted index says which records were aborted: those go.
            // The parts under the log's lock run at the request threads' priority
            // (`urgent`): appends wait for that lock.
            let cleanable = || {
                strata_core::background::urgent(|| {
                    let hw = p.high_watermark();
                    let mut log = p.log();
                    let lso = log.last_stable_offset(hw);
                    let segments: Vec<ClosedSegmentInfo> = log
                        .closed_segments()
                        .into_iter()
                        .filter(|s| s.next_offset <= lso)
                        .collect();
                    let txns = log.producers().transactions().clone();
                    (log.dir().to_path_buf(), segments, txns)
                })
            };
            let (dir, segments, txns) = cleanable();
            let aborted = |pid: i64, offset: i64| txns.is_aborted(pid, offset);
            let cleaned = strata_compactor::compact(
                &dir,
                &segments,
                policy,
                key_map_bytes,
                now_ms,
                strata_compactor::compaction::Txns::Known(&aborted),
                |rewritten| {
                    strata_core::background::urgent(|| p.log().swap_compacted(rewritten, now_ms))
                },
            )
            .map_err(|e| match e {
                strata_compactor::compaction::CompactionError::Log(e) => PartitionError::Log(e),
                other => PartitionError::Compaction(other.to_string()),
            })?;
            let (_, segments, _) = cleanable();
            let checkpoint = strata_log::compaction::Checkpoint::load(&dir);
            let ratio =
                strata_compactor::compaction::cleanable(&segments, &checkpoint, now_ms, policy)
                    .dirty_ratio;
            Ok::<_, PartitionError>((ratio, cleaned))
        });
        let (ratio, cleaned) = outcome
            .await
            .map_err(|e| PartitionError::Compaction(e.to_string()))??;
        // Charged after the pass: what it read is known only then. The next pass (of
        // any partition) waits until the rate allows it.
        if let Some(done) = &cleaned {
            background.charge(Kind::Compaction, done.bytes_before).await;
        }
        Ok((ratio, cleaned))
    }

    /// What retention may delete locally, oldest first: the sealed segments wholly below
    /// the high watermark; and the bytes of the rest (the active segment, and segments
    /// not sealed or not committed yet), which count towards `retention.bytes` but never
    /// go.
    pub fn retention_candidates(&self) -> (Vec<ClosedSegmentInfo>, u64) {
        let hw = self.high_watermark();
        let log = self.log();
        let mut candidates = log.closed_segments();
        candidates.retain(|s| s.next_offset > log.log_start_offset());
        if let Some(n) = candidates.iter().position(|s| s.next_offset > hw) {
            candidates.truncate(n);
        }
        let candidate_bytes: u64 = candidates.iter().map(|s| s.size_bytes).sum();
        let all_bytes = log.size_bytes();
        (candidates, all_bytes.saturating_sub(candidate_bytes))
    }

    pub fn set_config(&self, config: LogConfig) {
        self.log().set_config(config);
    }

    /// Rolls the active segment if `segment.ms` has passed (the flusher seals it).
    pub fn roll_if_due(&self, now_ms: i64) -> Result<(), PartitionError> {
        self.log().roll_if_due(now_ms)?;
        self.flush_wanted.notify_one();
        Ok(())
    }

    /// Saves the high watermark (on the blocking pool: it fsyncs).
    pub async fn save_high_watermark(self: &Arc<Self>) -> Result<(), PartitionError> {
        let name = self.name();
        self.blocking(move |p| {
            p.checkpoint_high_watermark().map_err(|source| {
                PartitionError::Log(strata_log::Error::Io {
                    context: "save the high watermark of",
                    path: name.into(),
                    source,
                })
            })
        })
        .await
    }

    /// Stops the flusher after a last fsync, and snapshots producer state so the next
    /// start replays nothing (all on the blocking pool).
    pub async fn close(self: &Arc<Self>) {
        self.stop_fetcher();
        self.stop.cancel();
        if self.is_offline() {
            return;
        }
        // Fsync here rather than rely on the flusher's last pass: a fetcher stopping at
        // the same moment may have appended after it.
        let last = self.blocking(|p| {
            let io = |source| {
                PartitionError::Log(strata_log::Error::Io {
                    context: "fsync the log of",
                    path: p.name().into(),
                    source,
                })
            };
            let mut log = p.log();
            let target = log.flush_target()?;
            target.sync().map_err(io)?;
            log.seal(&target)?.sync().map_err(io)?;
            drop(log);
            if let Err(e) = p.log().snapshot_producers() {
                tracing::warn!(partition = %p.name(), error = %e, "cannot snapshot producer state");
            }
            if let Err(e) = p.checkpoint_high_watermark() {
                tracing::warn!(partition = %p.name(), error = %e, "cannot save the high watermark");
            }
            Ok(())
        });
        if let Err(e) = last.await {
            tracing::error!(partition = %self.name(), error = %e, "last fsync failed");
        }
    }

    /// Forgets idempotent producers idle since before `cutoff_ms`.
    pub fn expire_producers(&self, cutoff_ms: i64) -> usize {
        self.log().expire_producers(cutoff_ms)
    }

    /// Closes the partition and deletes its log from disk.
    pub async fn delete(&self) -> Result<(), PartitionError> {
        self.stop_fetcher();
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
    async fn flusher(self: Arc<Self>) -> Stopped {
        loop {
            let stopping = tokio::select! {
                _ = self.flush_wanted.notified() => false,
                _ = self.stop.cancelled() => true,
            };
            match self.flush_pass().await {
                Ok(Pass::Done) => {}
                Ok(Pass::Again) => {
                    // The log was cut back while the fsync ran: what it covered is not
                    // known; the next pass covers it.
                    self.flush_wanted.notify_one();
                    continue;
                }
                Err(error) => {
                    tracing::error!(partition = %self.name(), %error, "fsync failed; partition goes offline");
                    self.offsets.send_modify(|o| o.failed = true);
                    return Stopped::Failed(format!("fsync failed: {error}"));
                }
            }
            if stopping {
                return Stopped::Done("the partition closed");
            }
        }
    }

    /// One pass of the flusher: fsyncs (on the blocking pool, without the locks) the
    /// segments closed since the last pass, the directory and the active segment;
    /// counts what that made durable; then seals the closed segments (their index
    /// files and producer snapshots, fsynced on the blocking pool too).
    async fn flush_pass(&self) -> Result<Pass, String> {
        // The target and the ticket under one lock, which cuts also take: a cut after
        // this voids the ticket.
        let (target, ticket) = {
            let replica = self.replica();
            let target = self
                .log()
                .flush_target()
                .map_err(|e| format!("the active segment cannot be opened: {e}"))?;
            let ticket = replica.begin_flush(target.end);
            (target, ticket)
        };
        if ticket.is_none() && !target.has_closed_segments() {
            return Ok(Pass::Done);
        }
        let target = tokio::task::spawn_blocking(move || target.sync().map(|()| target))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let sealed = {
            let mut replica = self.replica();
            if let Some(ticket) = ticket {
                match replica.complete_flush(ticket) {
                    Flushed::Again => return Ok(Pass::Again),
                    Flushed::Durable { watermark_rose } => {
                        if watermark_rose {
                            let hw = replica.high_watermark();
                            self.offsets.send_modify(|o| o.high_watermark = hw);
                        }
                    }
                }
            }
            self.log()
                .seal(&target)
                .map_err(|e| format!("sealing a segment: {e}"))?
        };
        if !sealed.is_empty() {
            tokio::task::spawn_blocking(move || sealed.sync())
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("fsync of index files: {e}"))?;
        }
        Ok(Pass::Done)
    }
}

/// How a flusher pass ended.
enum Pass {
    Done,
    /// A cut overtook the fsync: go again.
    Again,
}

const CHECKPOINT_FILE: &str = "high-watermark";

/// The high watermark a replica saved in its log directory `dir`, if any: committed
/// when it was saved (`strata tiering` reads it from outside the agent).
pub fn saved_high_watermark(dir: &Path) -> Option<i64> {
    read_checkpoint(dir)
}

fn read_checkpoint(dir: &Path) -> Option<i64> {
    std::fs::read_to_string(dir.join(CHECKPOINT_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
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

    fn high_watermark(&self) -> i64 {
        Partition::high_watermark(self)
    }

    fn aborted_markers(&self, from: i64, to: i64) -> Vec<strata_metastore::ArchivedAbort> {
        self.log()
            .producers()
            .transactions()
            .aborted()
            .filter(|a| from <= a.last_offset && a.last_offset < to)
            .map(|a| strata_metastore::ArchivedAbort {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
                last_offset: a.last_offset,
                last_stable_offset: a.last_stable_offset,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::records::Compression;
    use strata_log::batch::example_batch;

    use super::*;

    fn sole_leader() -> PartitionRecord {
        PartitionRecord {
            index: 0,
            replicas: vec![1],
            leader: 1,
            leader_epoch: 0,
            isr: vec![1],
            adding: Vec::new(),
            removing: Vec::new(),
            directories: Default::default(),
            elr: Vec::new(),
        }
    }

    /// With fsync durability the watermark waits for the flusher; with page-cache
    /// durability (Kafka's default trade) an append counts at once.
    #[tokio::test(flavor = "current_thread")]
    async fn the_watermark_waits_for_fsync_unless_acks_come_from_the_page_cache() {
        for ack_after_fsync in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = LogConfig {
                ack_after_fsync,
                ..LogConfig::default()
            };
            let tasks = Tasks::new(CancellationToken::new());
            let p = Partition::open("t", 0, 1, dir.path(), config, 0, &tasks).expect("open");
            p.apply(&sole_leader(), 0);
            let batch = example_batch(3, 10, 1_700_000_000_000, Compression::None);
            let (out, epoch) = p.append(&batch.into(), 0, Some(1), None).expect("append");
            // Nothing has awaited yet: the flusher task has not run.
            let counted_at_once = p.high_watermark() == out.last_offset + 1;
            assert_eq!(
                counted_at_once, !ack_after_fsync,
                "ack_after_fsync {ack_after_fsync}"
            );
            p.wait_committed(out.last_offset + 1, epoch, 1)
                .await
                .expect("committed after the fsync");
            assert_eq!(p.high_watermark(), 3);
            p.close().await;
        }
    }
}
