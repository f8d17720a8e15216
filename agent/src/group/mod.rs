//! The group coordinator: the async shell around the [`state::Group`] state machines.
//!
//! It keeps one state machine per group in memory, turns their released [`state::Action`]s
//! into replies on the waiting requests, ticks them for session and rebalance timeouts,
//! and keeps committed offsets in the metastore (validated by the state machine first, so
//! a stale generation writes nothing). Membership is not persisted: after a restart a
//! group comes back Empty with its offsets, and its consumers simply rejoin.

pub mod consumer_protocol;
mod error;
pub mod state;

pub use error::GroupError;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use strata_metastore::{CommittedOffset, Metastore, TopicPartition};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use state::{
    Action, Group, GroupConfig, GroupState, JoinRequest, JoinResponse, Leaving, SyncResponse,
    Waiter,
};

/// How often sessions and rebalance deadlines are checked.
const TICK: Duration = Duration::from_millis(100);
/// How often expired offsets of empty groups are looked for.
const OFFSET_EXPIRY_EVERY: Duration = Duration::from_secs(600);

struct Slot {
    group: Group,
    joins: HashMap<Waiter, oneshot::Sender<JoinResponse>>,
    syncs: HashMap<Waiter, oneshot::Sender<SyncResponse>>,
}

impl Slot {
    fn deliver(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Join(w, r) => {
                    if let Some(tx) = self.joins.remove(&w) {
                        let _ = tx.send(r);
                    }
                }
                Action::Sync(w, r) => {
                    if let Some(tx) = self.syncs.remove(&w) {
                        let _ = tx.send(r);
                    }
                }
            }
        }
    }
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct GroupSummary {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<state::Member>,
}

/// Whether this agent coordinates a group (by group id).
pub type Owns = Box<dyn Fn(&str) -> bool + Send + Sync>;

pub struct Coordinator {
    config: GroupConfig,
    offsets_retention_ms: i64,
    metastore: Metastore,
    /// Requests for groups another agent coordinates get NOT_COORDINATOR.
    owns: Owns,
    groups: Mutex<HashMap<String, Slot>>,
    next_waiter: AtomicU64,
    /// Sessions, rebalance deadlines and offset expiry run on this clock.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    pub fn new(
        config: GroupConfig,
        offsets_retention_ms: i64,
        metastore: Metastore,
        owns: Owns,
        clock: Arc<dyn Clock>,
    ) -> Coordinator {
        Coordinator {
            config,
            offsets_retention_ms,
            metastore,
            owns,
            groups: Mutex::new(HashMap::new()),
            next_waiter: AtomicU64::new(1),
            clock,
        }
    }

    /// Now on the coordinator's monotonic clock, in milliseconds (never 0).
    fn now(&self) -> i64 {
        self.clock.monotonic().as_millis() as i64 + 1
    }

    fn groups(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with_slot<T>(&self, group_id: &str, f: impl FnOnce(&mut Slot) -> T) -> T {
        let mut groups = self.groups();
        let slot = groups.entry(group_id.to_string()).or_insert_with(|| Slot {
            group: Group::new(group_id, self.config),
            joins: HashMap::new(),
            syncs: HashMap::new(),
        });
        f(slot)
    }

    fn with_existing<T>(&self, group_id: &str, f: impl FnOnce(&mut Slot) -> T) -> Option<T> {
        self.groups().get_mut(group_id).map(f)
    }

    /// `NOT_COORDINATOR` for a group another agent coordinates: the client looks the
    /// coordinator up again.
    fn check_owner(&self, group_id: &str) -> Result<(), GroupError> {
        if (self.owns)(group_id) {
            Ok(())
        } else {
            Err(GroupError::NotCoordinator)
        }
    }

    pub async fn join(&self, group_id: &str, req: JoinRequest) -> JoinResponse {
        let member_id = req.member_id.clone();
        let failed = |error, member_id| JoinResponse {
            error: Some(error),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id,
            members: Vec::new(),
            skip_assignment: false,
        };
        if let Err(e) = self.check_owner(group_id) {
            return failed(e, member_id);
        }
        let waiter = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.with_slot(group_id, |slot| {
            slot.joins.insert(waiter, tx);
            let actions = slot.group.join(self.now(), waiter, req);
            slot.deliver(actions);
        });
        rx.await
            .unwrap_or_else(|_| failed(GroupError::CoordinatorNotAvailable, member_id))
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResponse {
        let failed = |e| SyncResponse {
            error: Some(e),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        };
        if let Err(e) = self.check_owner(group_id) {
            return failed(e);
        }
        let waiter = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let found = self.with_existing(group_id, |slot| {
            slot.syncs.insert(waiter, tx);
            let actions = slot.group.sync(
                self.now(),
                waiter,
                member_id,
                group_instance_id,
                generation_id,
                protocol_type,
                protocol_name,
                assignments,
            );
            slot.deliver(actions);
        });
        if found.is_none() {
            return failed(GroupError::UnknownMemberId);
        }
        rx.await
            .unwrap_or_else(|_| failed(GroupError::CoordinatorNotAvailable))
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        self.check_owner(group_id)?;
        self.with_existing(group_id, |slot| {
            slot.group
                .heartbeat(self.now(), member_id, group_instance_id, generation_id)
        })
        .unwrap_or(Err(GroupError::UnknownMemberId))
    }

    pub fn leave(&self, group_id: &str, leaving: &[Leaving]) -> Vec<Result<(), GroupError>> {
        if let Err(e) = self.check_owner(group_id) {
            return vec![Err(e); leaving.len()];
        }
        self.with_existing(group_id, |slot| {
            let (results, actions) = slot.group.leave(self.now(), leaving);
            slot.deliver(actions);
            results
        })
        .unwrap_or_else(|| vec![Err(GroupError::UnknownMemberId); leaving.len()])
    }

    /// Validates a commit against the group's generation and stores it.
    pub async fn commit(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
    ) -> Result<(), GroupError> {
        self.check_owner(group_id)?;
        let protocol_type = self
            .with_existing(group_id, |slot| {
                slot.group
                    .validate_commit(member_id, group_instance_id, generation_id)?;
                Ok::<_, GroupError>(slot.group.protocol_type.clone())
            })
            .unwrap_or(if generation_id < 0 && member_id.is_empty() {
                Ok(None)
            } else {
                Err(GroupError::IllegalGeneration)
            })?;
        let protocol_type = protocol_type.unwrap_or_else(|| "consumer".to_string());
        self.metastore
            .commit_offsets(group_id, &protocol_type, offsets)
            .await
            .map_err(|e| {
                tracing::warn!(group = group_id, error = %e, "cannot store committed offsets");
                GroupError::CoordinatorNotAvailable
            })
    }

    /// TxnOffsetCommit: validates the member's generation (when it sends one, KIP-447)
    /// and stages the offsets under `producer_id`; they become the group's when the
    /// transaction commits ([`strata_metastore::Metastore::change_transaction`]).
    pub async fn stage_txn_commit(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        producer_id: i64,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
    ) -> Result<(), GroupError> {
        self.check_owner(group_id)?;
        let unchecked = generation_id < 0 && member_id.is_empty() && group_instance_id.is_none();
        if !unchecked {
            self.with_existing(group_id, |slot| {
                slot.group
                    .validate_commit(member_id, group_instance_id, generation_id)
            })
            .unwrap_or(Err(GroupError::IllegalGeneration))?;
        }
        self.metastore
            .stage_txn_offsets(group_id, producer_id, offsets)
            .await
            .map_err(|e| {
                tracing::warn!(group = group_id, error = %e, "cannot stage transactional offsets");
                GroupError::CoordinatorNotAvailable
            })
    }

    /// The partitions of the group with offsets a transaction has staged and not yet
    /// committed or dropped.
    pub async fn unstable_partitions(
        &self,
        group_id: &str,
    ) -> Result<std::collections::BTreeSet<TopicPartition>, GroupError> {
        self.metastore
            .pending_txn_offsets(group_id)
            .await
            .map(|m| m.into_keys().collect())
            .map_err(|e| {
                tracing::warn!(group = group_id, error = %e, "cannot read staged offsets");
                GroupError::CoordinatorNotAvailable
            })
    }

    pub async fn offsets(
        &self,
        group_id: &str,
    ) -> Result<BTreeMap<TopicPartition, CommittedOffset>, GroupError> {
        self.check_owner(group_id)?;
        self.metastore.group_offsets(group_id).await.map_err(|e| {
            tracing::warn!(group = group_id, error = %e, "cannot read committed offsets");
            GroupError::CoordinatorNotAvailable
        })
    }

    /// The group as DescribeGroups shows it; `None` if it is unknown (Dead).
    pub async fn describe(&self, group_id: &str) -> Result<Option<GroupSummary>, GroupError> {
        self.check_owner(group_id)?;
        let live = self.with_existing(group_id, |slot| {
            let g = &slot.group;
            (!g.is_empty() || g.state != GroupState::Empty).then(|| GroupSummary {
                state: g.state.name(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                protocol_name: g.protocol_name.clone().unwrap_or_default(),
                members: g.members().cloned().collect(),
            })
        });
        if let Some(Some(summary)) = live {
            return Ok(Some(summary));
        }
        let stored = self.stored_groups().await?;
        Ok(stored.get(group_id).map(|pt| GroupSummary {
            state: GroupState::Empty.name(),
            protocol_type: pt.clone(),
            protocol_name: String::new(),
            members: Vec::new(),
        }))
    }

    async fn stored_groups(&self) -> Result<BTreeMap<String, String>, GroupError> {
        Ok(self
            .metastore
            .groups()
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot list groups");
                GroupError::CoordinatorNotAvailable
            })?
            .into_iter()
            .map(|(name, r)| (name, r.protocol_type))
            .collect())
    }

    /// Every known group: `(group id, protocol type, state)`.
    pub async fn list(&self) -> Result<Vec<(String, String, &'static str)>, GroupError> {
        let mut out: BTreeMap<String, (String, &'static str)> = self
            .stored_groups()
            .await?
            .into_iter()
            .map(|(name, pt)| (name, (pt, GroupState::Empty.name())))
            .collect();
        out.retain(|name, _| (self.owns)(name));
        for (name, slot) in self.groups().iter() {
            let g = &slot.group;
            if (self.owns)(name) && (!g.is_empty() || g.state != GroupState::Empty) {
                out.insert(
                    name.clone(),
                    (g.protocol_type.clone().unwrap_or_default(), g.state.name()),
                );
            }
        }
        Ok(out.into_iter().map(|(n, (pt, s))| (n, pt, s)).collect())
    }

    /// Deletes an empty group and its offsets.
    pub async fn delete(&self, group_id: &str) -> Result<(), GroupError> {
        self.check_owner(group_id)?;
        let live = self
            .with_existing(group_id, |slot| !slot.group.is_empty())
            .unwrap_or(false);
        if live {
            return Err(GroupError::NonEmptyGroup);
        }
        let existed = self.metastore.delete_group(group_id).await.map_err(|e| {
            tracing::warn!(group = group_id, error = %e, "cannot delete group");
            GroupError::CoordinatorNotAvailable
        })?;
        let in_memory = self.groups().remove(group_id).is_some();
        if existed || in_memory {
            Ok(())
        } else {
            Err(GroupError::GroupIdNotFound)
        }
    }

    /// Deletes offsets of topics the group does not consume (OffsetDelete).
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<TopicPartition>,
    ) -> Result<Vec<(TopicPartition, Option<GroupError>)>, GroupError> {
        let stored = self.offsets(group_id).await?;
        let subscribed: Vec<bool> = self
            .with_existing(group_id, |slot| {
                partitions
                    .iter()
                    .map(|(t, _)| {
                        slot.group.state != GroupState::Empty && slot.group.subscribes_to(t)
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![false; partitions.len()]);
        if stored.is_empty() && self.with_existing(group_id, |_| ()).is_none() {
            return Err(GroupError::GroupIdNotFound);
        }
        let mut results = Vec::new();
        let mut delete = Vec::new();
        for (tp, subscribed) in partitions.into_iter().zip(subscribed) {
            if subscribed {
                results.push((tp, Some(GroupError::GroupSubscribedToTopic)));
            } else {
                delete.push(tp.clone());
                results.push((tp, None));
            }
        }
        self.metastore
            .delete_offsets(group_id, delete)
            .await
            .map_err(|e| {
                tracing::warn!(group = group_id, error = %e, "cannot delete offsets");
                GroupError::CoordinatorNotAvailable
            })?;
        Ok(results)
    }

    /// Ticks every group until shutdown, then fails every parked request.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> crate::tasks::Stopped {
        let mut last_expiry = self.now();
        loop {
            tokio::select! {
                _ = self.clock.sleep(TICK) => {}
                _ = shutdown.cancelled() => break,
            }
            let now = self.now();
            {
                let mut groups = self.groups();
                for slot in groups.values_mut() {
                    let actions = slot.group.tick(now);
                    slot.deliver(actions);
                }
                // Forget empty groups with nothing parked; their offsets stay stored.
                groups.retain(|_, s| {
                    !s.group.is_empty() || !s.joins.is_empty() || !s.syncs.is_empty()
                });
            }
            if now - last_expiry >= OFFSET_EXPIRY_EVERY.as_millis() as i64 {
                last_expiry = now;
                if let Err(e) = self.expire_offsets(self.clock.wall_ms()).await {
                    tracing::warn!(error = %e, "cannot expire offsets");
                }
            }
        }
        for slot in self.groups().values_mut() {
            let actions = slot.group.abandon();
            slot.deliver(actions);
        }
        crate::tasks::Stopped::Shutdown
    }

    /// Drops offsets of empty groups committed longer ago than `offsets.retention.minutes`.
    pub async fn expire_offsets(&self, now_ms: i64) -> Result<usize, strata_metastore::Error> {
        let cutoff = now_ms - self.offsets_retention_ms;
        let mut dropped = 0;
        for (group, _) in self.metastore.groups().await? {
            if !(self.owns)(&group) {
                continue;
            }
            let active = self
                .with_existing(&group, |s| !s.group.is_empty())
                .unwrap_or(false);
            if active {
                continue;
            }
            let offsets = self.metastore.group_offsets(&group).await?;
            let expired: Vec<TopicPartition> = offsets
                .iter()
                .filter(|(_, o)| o.commit_timestamp_ms < cutoff)
                .map(|(tp, _)| tp.clone())
                .collect();
            if expired.len() == offsets.len() {
                self.metastore.delete_group(&group).await?;
            } else if !expired.is_empty() {
                self.metastore
                    .delete_offsets(&group, expired.clone())
                    .await?;
            }
            dropped += expired.len();
        }
        if dropped > 0 {
            tracing::info!(
                offsets = dropped,
                "expired committed offsets of empty groups"
            );
        }
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::clock::ManualClock;
    use strata_metastore::SqliteStore;

    /// Lets the coordinator's loop reach its sleep on `clock`, then moves the clock.
    async fn step(clock: &ManualClock, by: Duration) {
        while clock.sleepers() == 0 {
            tokio::task::yield_now().await;
        }
        clock.advance(by);
    }

    /// Sessions run on the coordinator's clock: the initial rebalance delay passes, a
    /// heartbeat keeps the member, and once its session runs out with no heartbeat the
    /// member is gone. The clock is moved by hand; nothing waits in real time.
    #[tokio::test]
    async fn a_silent_member_is_removed_when_its_session_runs_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = SqliteStore::open(&dir.path().join("m.sqlite")).expect("open");
        let metastore = Metastore::new(Arc::new(kv), b"s");
        let clock = Arc::new(ManualClock::new(0));
        let c = Arc::new(Coordinator::new(
            GroupConfig::default(),
            60_000,
            metastore,
            Box::new(|_| true),
            Arc::clone(&clock) as Arc<dyn Clock>,
        ));
        let shutdown = CancellationToken::new();
        let run = tokio::spawn(Arc::clone(&c).run(shutdown.clone()));
        let join = tokio::spawn({
            let c = Arc::clone(&c);
            async move {
                c.join(
                    "g",
                    JoinRequest {
                        member_id: String::new(),
                        group_instance_id: None,
                        client_id: "client".into(),
                        client_host: "/127.0.0.1".into(),
                        session_timeout_ms: 10_000,
                        rebalance_timeout_ms: 10_000,
                        protocol_type: "consumer".into(),
                        protocols: vec![("range".into(), Bytes::new())],
                        require_known_member_id: false,
                        fresh_member_id: "m1".into(),
                    },
                )
                .await
            }
        });
        // The initial rebalance delay (3 s) passes on the manual clock.
        for _ in 0..100 {
            if join.is_finished() {
                break;
            }
            step(&clock, TICK).await;
        }
        assert!(join.is_finished(), "joined within 10 s of the manual clock");
        let joined = join.await.expect("join");
        assert_eq!(joined.error, None);
        assert_eq!(joined.member_id, "m1");
        let generation = joined.generation_id;
        assert_eq!(c.heartbeat("g", "m1", None, generation), Ok(()));
        step(&clock, Duration::from_secs(9)).await;
        assert!(
            c.heartbeat("g", "m1", None, generation).is_ok(),
            "still within the session"
        );
        step(&clock, Duration::from_millis(10_100)).await;
        // One more tick of the loop sees the session expired.
        step(&clock, TICK).await;
        for _ in 0..10_000 {
            if c.heartbeat("g", "m1", None, generation).is_err() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            c.heartbeat("g", "m1", None, generation),
            Err(GroupError::UnknownMemberId)
        );
        shutdown.cancel();
        run.await.expect("run");
    }

    fn offset(ts: i64) -> CommittedOffset {
        CommittedOffset {
            offset: 5,
            leader_epoch: 0,
            metadata: None,
            commit_timestamp_ms: ts,
        }
    }

    #[tokio::test]
    async fn offsets_of_empty_groups_expire_after_retention() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = SqliteStore::open(&dir.path().join("m.sqlite")).expect("open");
        let metastore = Metastore::new(Arc::new(kv), b"s");
        let retention = 60_000;
        let c = Coordinator::new(
            GroupConfig::default(),
            retention,
            metastore.clone(),
            Box::new(|_| true),
            Arc::new(strata_core::clock::ManualClock::new(0)),
        );
        metastore
            .commit_offsets(
                "old",
                "consumer",
                vec![
                    (("t".into(), 0), offset(1_000)),
                    (("t".into(), 1), offset(50_000)),
                ],
            )
            .await
            .expect("commit");
        metastore
            .commit_offsets("new", "consumer", vec![(("t".into(), 0), offset(70_000))])
            .await
            .expect("commit");
        assert_eq!(
            c.expire_offsets(61_001).await.expect("expire"),
            1,
            "only t-0 of 'old' is past retention"
        );
        assert_eq!(metastore.group_offsets("old").await.expect("read").len(), 1);
        assert_eq!(c.expire_offsets(200_000).await.expect("expire"), 2);
        assert!(
            metastore.groups().await.expect("groups").is_empty(),
            "groups with no offsets left are gone"
        );
    }
}
