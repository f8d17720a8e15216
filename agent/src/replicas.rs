//! The replica manager: the partitions this agent serves, and the tasks that keep them
//! in line with the metastore.
//!
//! The metastore is the authority on which topics exist, how they are configured and
//! who leads each partition; [`ReplicaManager`] keeps an in-memory copy (so the produce
//! path never waits on the metastore), opens and closes the local replicas to match it,
//! and applies each replica's role: leading, or following with a fetcher task
//! (`fetcher.rs`) that it owns. It reconciles after every admin change this agent
//! makes ([`ReplicaManager::sync_topic`]), whenever the metastore's topics change
//! ([`ReplicaManager::follow_topic_changes`]), and periodically as a backstop
//! ([`ReplicaManager::maintenance`]).
//!
//! The ISR manager (`isr.rs`) and the controller (`controller.rs`) see this, never the
//! broker; reads that reach below the local log go to the archive from here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use strata_metastore::{Metastore, PartitionRecord, TopicRecord};
use strata_replication::Transition;
use strata_tiering::{ArchiveReader, LocalPartition};
use tokio_util::sync::CancellationToken;

use crate::broker_config::BrokerConfig;
use crate::clock::now_ms;
use crate::error::Error;
pub use crate::error::SyncError;
use crate::membership::Membership;
use crate::open_files::FileBudget;
use crate::partition::{Bound, Partition, PartitionError, ReadOutcome};
use crate::tasks::{Stopped, Tasks};
use crate::topic_config::TopicConfig;

/// A topic as this agent serves it.
#[derive(Debug)]
pub struct TopicState {
    pub record: TopicRecord,
    pub config: TopicConfig,
    /// By index; `None` for a partition with no replica on this agent.
    pub partitions: Vec<Option<Arc<Partition>>>,
    /// A topic new to this agent whose replicas are still opening: listed (described from
    /// its record) so that clients retry NOT_LEADER_OR_FOLLOWER instead of taking it as
    /// unknown; none of its partitions is served here yet.
    pub arriving: bool,
}

impl TopicState {
    /// This agent's replica of the partition, leader or follower.
    pub fn replica(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
            .and_then(Option::as_ref)
    }

    /// The partition, if this agent leads it.
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        self.replica(index).filter(|p| p.leader_epoch().is_some())
    }

    /// Whether the topic has partition `index` (led here or elsewhere).
    pub fn has_partition(&self, index: i32) -> bool {
        usize::try_from(index).is_ok_and(|i| i < self.record.partitions.len())
    }

    /// The partition to produce to or fetch from, or why not: the partition does not
    /// exist, or another agent leads it.
    pub fn served(&self, index: i32) -> Result<&Arc<Partition>, Error> {
        match self.partition(index) {
            Some(p) => Ok(p),
            None => Err(not_served(
                &self.record.name,
                index,
                self.has_partition(index),
            )),
        }
    }

    /// [`TopicState::served`] for a topic that may not exist here.
    pub fn served_in<'a>(
        topic: Option<&'a Arc<TopicState>>,
        name: &str,
        index: i32,
    ) -> Result<&'a Arc<Partition>, Error> {
        topic
            .ok_or_else(|| not_served(name, index, false))
            .and_then(|t| t.served(index))
    }

    /// The replicas on this agent, leaders and followers.
    pub fn local_partitions(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.partitions.iter().flatten()
    }

    /// The partitions this agent leads.
    pub fn led_partitions(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.local_partitions()
            .filter(|p| p.leader_epoch().is_some())
    }
}

fn not_served(topic: &str, partition: i32, exists: bool) -> Error {
    let (topic, partition) = (topic.to_string(), partition);
    if exists {
        Error::NotLeader { topic, partition }
    } else {
        Error::UnknownTopicOrPartition { topic, partition }
    }
}

/// What the replica manager needs of the agent's settings.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    pub node_id: i32,
    /// The broker configs, static and dynamic: what topics inherit, under their own.
    pub broker_config: Arc<BrokerConfig>,
    /// Acknowledge writes only once fsynced (`--ack-durability fsync`).
    pub ack_after_fsync: bool,
    /// The largest batch a fetcher may have to copy in one response.
    pub max_request_bytes: usize,
    /// Kafka's `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: i64,
    /// `replica_rebuild_max_bytes_per_second` (0: no limit).
    pub rebuild_max_bytes_per_second: u64,
}

/// The partition map of this agent, and the fetcher tasks of the replicas it follows.
#[derive(Debug)]
pub struct ReplicaManager {
    config: ReplicaConfig,
    metastore: Metastore,
    membership: Arc<Membership>,
    /// Reads of archived offsets.
    archive: Arc<ArchiveReader>,
    /// Where replicas not in sync copy from, and at what rate.
    rebuilds: Arc<crate::rebuild::Rebuilds>,
    /// How many files partition replicas may hold open here.
    files: FileBudget,
    logs_dir: PathBuf,
    topics: RwLock<BTreeMap<String, Arc<TopicState>>>,
    /// Topics of the metastore this agent could not serve, with why (logged once per
    /// new reason, retried at every refresh).
    unserved: std::sync::Mutex<BTreeMap<String, String>>,
    /// Serializes reconciliation so two admin requests never open one log twice.
    reconcile: tokio::sync::Mutex<()>,
    /// The fetchers and partition flushers: waited for by [`ReplicaManager::close`].
    tasks: Tasks,
    shutdown: CancellationToken,
}

const TOPIC_ID_FILE: &str = "topic.id";

/// What one reconciliation opened and created, so that a failure can undo it.
#[derive(Default)]
struct Opened {
    partitions: Vec<Arc<Partition>>,
    /// Partition directories that did not hold this topic's log before.
    dirs: Vec<PathBuf>,
}

impl Opened {
    async fn undo(self) {
        for p in self.partitions {
            p.close().await;
        }
        for dir in self.dirs {
            if let Err(e) = std::fs::remove_dir_all(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the directory of a replica that failed to open");
            }
        }
    }
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

impl ReplicaManager {
    /// Serves the topics the metastore has now (one full reconciliation) and returns.
    pub async fn start(
        config: ReplicaConfig,
        metastore: Metastore,
        membership: Arc<Membership>,
        archive: Arc<ArchiveReader>,
        files: FileBudget,
        logs_dir: PathBuf,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Arc<ReplicaManager>> {
        std::fs::create_dir_all(&logs_dir)?;
        let rebuilds = crate::rebuild::Rebuilds::new(
            Arc::clone(&archive),
            config.rebuild_max_bytes_per_second,
        );
        let replicas = Arc::new(ReplicaManager {
            config,
            metastore,
            membership,
            archive,
            rebuilds,
            files,
            logs_dir,
            topics: RwLock::new(BTreeMap::new()),
            unserved: std::sync::Mutex::new(BTreeMap::new()),
            reconcile: tokio::sync::Mutex::new(()),
            tasks: Tasks::new(shutdown.clone()),
            shutdown,
        });
        replicas.refresh().await?;
        Ok(replicas)
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    pub fn metastore(&self) -> &Metastore {
        &self.metastore
    }

    pub fn membership(&self) -> &Arc<Membership> {
        &self.membership
    }

    pub fn archive(&self) -> &Arc<ArchiveReader> {
        &self.archive
    }

    /// Cancelled when the agent begins to stop.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub fn topic(&self, name: &str) -> Option<Arc<TopicState>> {
        self.topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
    /// The leader the metastore names for `partition` of `topic`, as this agent last
    /// read it; -1 for none (or no such partition here).
    pub fn leader_of(&self, topic: &str, partition: i32) -> i32 {
        self.topic(topic)
            .and_then(|t| {
                let p = t.record.partitions.get(usize::try_from(partition).ok()?)?;
                Some(p.leader)
            })
            .unwrap_or(-1)
    }

    pub fn topic_by_id(&self, id: &[u8; 16]) -> Option<Arc<TopicState>> {
        self.topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find(|t| &t.record.id == id)
            .cloned()
    }
    pub fn topics(&self) -> Vec<Arc<TopicState>> {
        self.topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
    pub fn topic_config(&self, record: &TopicRecord) -> TopicConfig {
        TopicConfig::resolve(&self.config.broker_config.inherited(), &record.configs)
    }
    pub fn broker_config(&self) -> &Arc<BrokerConfig> {
        &self.config.broker_config
    }
    fn partition_dir(&self, topic: &str, index: u32) -> PathBuf {
        self.logs_dir.join(format!("{topic}-{index}"))
    }
    /// Reads every topic from the metastore and brings the local logs in line. Reads
    /// under the reconcile lock, so an older snapshot can never undo a newer change. A
    /// topic that cannot be served here (its logs do not open, or do not fit the
    /// open-file budget) is logged and left out; the others are served, and it is tried
    /// again at the next refresh. Fails only if the metastore cannot be read.
    pub async fn refresh(&self) -> anyhow::Result<()> {
        let _guard = self.reconcile.lock().await;
        let node = u32::try_from(self.config.node_id).unwrap_or_default();
        self.config
            .broker_config
            .update(self.metastore.broker_configs(node).await?);
        let records = self.metastore.topics().await?;
        let known: Vec<String> = self
            .topics()
            .iter()
            .map(|t| t.record.name.clone())
            .collect();
        for name in known {
            if !records.iter().any(|r| r.name == name) {
                self.remove_locked(&name).await;
            }
        }
        let mut unserved = BTreeMap::new();
        for record in records {
            let name = record.name.clone();
            if let Err(e) = self.apply_locked(record).await {
                unserved.insert(name, e.to_string());
            }
        }
        let mut last = self.unserved.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, why) in &unserved {
            if last.get(topic) != Some(why) {
                tracing::error!(%topic, error = %why, "cannot serve topic; will retry");
            }
        }
        *last = unserved;
        Ok(())
    }
    /// Replica files the agents would hold for the topics this agent knows, by node id
    /// (each replica counted as [`FileBudget::files_per_replica`] of its topic).
    fn replica_files_by_node(&self) -> BTreeMap<i32, u64> {
        let mut by_node = BTreeMap::new();
        for t in self.topics() {
            for p in &t.record.partitions {
                let each = FileBudget::files_per_replica(p.replicas.len());
                for r in &p.replicas {
                    *by_node.entry(*r).or_insert(0) += each;
                }
            }
        }
        by_node
    }
    /// Refuses new replica lists (a topic's, or partitions added to one) that would take
    /// any agent past its open-file budget. Nothing is written before this passes.
    pub fn check_file_budget(&self, assignments: &[Vec<i32>]) -> Result<(), String> {
        let in_use = self.replica_files_by_node();
        let mut more: BTreeMap<i32, u64> = BTreeMap::new();
        for replicas in assignments {
            let each = FileBudget::files_per_replica(replicas.len());
            for r in replicas {
                *more.entry(*r).or_insert(0) += each;
            }
        }
        for (node, more) in more {
            let used = in_use.get(&node).copied().unwrap_or(0);
            if let Some(why) = self.files.refuse(used, more) {
                return Err(if node == self.config.node_id {
                    why
                } else {
                    format!("on agent {node}: {why}")
                });
            }
        }
        Ok(())
    }
    /// Replica files the replicas open on this agent hold.
    fn open_replica_files(&self, except_topic: &str) -> u64 {
        self.topics()
            .iter()
            .filter(|t| t.record.name != except_topic)
            .map(|t| {
                t.local_partitions().count() as u64
                    * FileBudget::files_per_replica(t.record.replication_factor.max(1) as usize)
            })
            .sum()
    }
    /// Brings one topic in line with the metastore (after this agent changed it): serves
    /// it as the metastore has it now, or stops serving it if it is gone.
    pub async fn sync_topic(&self, name: &str) -> Result<Option<Arc<TopicState>>, SyncError> {
        let _guard = self.reconcile.lock().await;
        match self.metastore.topic(name).await? {
            Some(record) => Ok(Some(self.apply_locked(record).await?)),
            None => {
                self.remove_locked(name).await;
                Ok(None)
            }
        }
    }
    async fn apply_locked(&self, mut record: TopicRecord) -> Result<Arc<TopicState>, SyncError> {
        let existing = self.topic(&record.name);
        let config = self.topic_config(&record);
        if let Some(old) = &existing
            && !old.arriving
            && old.record == record
            && old.config == config
        {
            return Ok(Arc::clone(old));
        }
        let log_config = strata_log::LogConfig {
            ack_after_fsync: self.config.ack_after_fsync,
            max_decompressed_bytes: self.config.max_request_bytes,
            ..config.log_config()
        };
        let mut open: Vec<Option<Arc<Partition>>> = Vec::new();
        match &existing {
            Some(old) if old.record.id == record.id => {
                for p in old.local_partitions() {
                    p.set_config(log_config);
                    p.set_min_insync(config.min_insync_replicas());
                }
                open.extend(old.partitions.iter().cloned());
            }
            Some(_) => self.remove_locked(&record.name).await,
            None => {}
        }
        let hosted = record
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&self.config.node_id))
            .count() as u64;
        let needed =
            hosted * FileBudget::files_per_replica(record.replication_factor.max(1) as usize);
        if let Some(why) = self
            .files
            .refuse(self.open_replica_files(&record.name), needed)
        {
            return Err(SyncError::FileBudget {
                topic: record.name.clone(),
                why,
            });
        }
        // Opening a new topic's replicas can take seconds (each new replica is recorded
        // in the metastore), while other agents already name this one as a leader in
        // their metadata. Until then the topic is listed from its record and its
        // partitions answer NOT_LEADER_OR_FOLLOWER, which every client retries; unknown,
        // it would be UNKNOWN_TOPIC_OR_PARTITION, which librdkafka's consumer reports to
        // the application ("Subscribed topic not available") and its offset lookup
        // treats as permanent.
        let arriving = !matches!(&existing, Some(old) if old.record.id == record.id);
        if arriving {
            let placeholder = Arc::new(TopicState {
                record: record.clone(),
                config: config.clone(),
                partitions: vec![None; record.partitions.len()],
                arriving: true,
            });
            self.topics
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(record.name.clone(), placeholder);
        }
        let mut opened = Opened::default();
        let min_insync = config.min_insync_replicas();
        match self
            .open_replicas(&mut record, &open, (log_config, min_insync), &mut opened)
            .await
        {
            Ok(partitions) => {
                let state = Arc::new(TopicState {
                    record: record.clone(),
                    config,
                    partitions,
                    arriving: false,
                });
                self.topics
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(record.name.clone(), Arc::clone(&state));
                Ok(state)
            }
            Err(e) => {
                // Leave nothing behind: close what this call opened, and remove the
                // directories it created (never a log that was here before).
                opened.undo().await;
                if arriving {
                    self.topics
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&record.name);
                }
                Err(e)
            }
        }
    }
    /// Opens (or reuses, from `open`) this agent's replicas of `record`, and applies
    /// their roles; records in `opened` what it opened and created, for undoing.
    async fn open_replicas(
        &self,
        record: &mut TopicRecord,
        open: &[Option<Arc<Partition>>],
        (log_config, min_insync): (strata_log::LogConfig, usize),
        opened: &mut Opened,
    ) -> Result<Vec<Option<Arc<Partition>>>, SyncError> {
        let mut partitions = Vec::with_capacity(record.partitions.len());
        for i in 0..record.partitions.len() {
            let p = record.partitions[i].clone();
            let hosted = p.replicas.contains(&self.config.node_id);
            let replica = match (open.get(i).cloned().flatten(), hosted) {
                (Some(replica), true) => {
                    // The record names another directory (or none) for this open replica:
                    // it was re-added before this agent saw it removed, or another
                    // transaction did not know of this disk yet. Record it.
                    if p.directories.get(&self.config.node_id).map(String::as_str)
                        != Some(self.membership.data_dir_id())
                    {
                        record.partitions[i] = self
                            .open_in_metastore(&record.name, &p, true, min_insync)
                            .await?;
                    }
                    Some(replica)
                }
                (Some(replica), false) => {
                    // Reassigned away from this agent.
                    if let Err(e) = replica.delete().await {
                        tracing::error!(partition = %replica.name(), error = %e, "cannot delete a replica moved elsewhere");
                    }
                    None
                }
                (None, false) => None,
                (None, true) => {
                    let dir = self.partition_dir(&record.name, p.index);
                    let had_log = std::fs::read_to_string(dir.join(TOPIC_ID_FILE))
                        .is_ok_and(|found| found.trim() == hex(&record.id));
                    if !had_log {
                        opened.dirs.push(dir.clone());
                    }
                    self.claim_dir(&dir, &record.id)?;
                    // Recovery reads (and may cut) the log: on the blocking pool.
                    let partition = {
                        let (name, index) = (record.name.clone(), p.index as i32);
                        let (node_id, tasks) = (self.config.node_id, self.tasks.clone());
                        let (dir, config, now) = (dir.clone(), log_config, now_ms());
                        tokio::task::spawn_blocking(move || {
                            Partition::open(&name, index, node_id, &dir, config, now, &tasks)
                        })
                        .await
                        .map_err(|_| {
                            PartitionError::Interrupted(format!("{}-{}", record.name, p.index))
                        })?
                        .map_err(PartitionError::from)?
                    };
                    partition.set_min_insync(min_insync);
                    opened.partitions.push(Arc::clone(&partition));
                    let me = self.config.node_id;
                    let opening =
                        strata_replication::opening(&p, me, self.membership.data_dir_id(), had_log);
                    let mut p = p;
                    if opening != strata_replication::Opening::Serve {
                        p = self
                            .open_in_metastore(&record.name, &p, had_log, min_insync)
                            .await?;
                    }
                    if had_log && opening != strata_replication::Opening::Rejoin && p.leader == me {
                        p = self.reclaim_leadership(&record.name, &p).await?;
                    }
                    record.partitions[i] = p;
                    Some(partition)
                }
            };
            partitions.push(replica);
        }
        if !opened.partitions.is_empty() {
            // Before a new replica serves: the log start retention and DeleteRecords set.
            let starts = self.metastore.log_starts(&record.name).await?;
            for p in &opened.partitions {
                if let Some(&start) = starts.get(&p.index) {
                    p.advance_start(start).await?;
                }
            }
        }
        // One line per topic for what changed (a topic may have thousands of partitions;
        // each one's transition is at debug level).
        let (mut leads, mut follows) = (Vec::new(), Vec::new());
        for (replica, p) in partitions.iter().zip(&record.partitions) {
            if let Some(replica) = replica {
                match self.apply_role(replica, p) {
                    Transition::Leads { .. } => leads.push(replica.index),
                    Transition::Follows { leader, .. } if leader >= 0 => {
                        follows.push(replica.index)
                    }
                    _ => {}
                }
            }
        }
        if !leads.is_empty() || !follows.is_empty() {
            tracing::info!(
                topic = %record.name,
                leading = %ranges(&leads),
                following = %ranges(&follows),
                "partitions changed role"
            );
        }
        Ok(partitions)
    }
    /// Records, in the metastore, that this agent opened its replica of `p` on its data
    /// directory ([`strata_replication::open_replica`]): it claims an entry not yet
    /// claimed, or, where the log the record knows of is not on this disk (a wiped or
    /// new data directory, a deleted partition directory), leaves the ISR and any
    /// leadership as a new replica that copies before it counts.
    async fn open_in_metastore(
        &self,
        topic: &str,
        p: &PartitionRecord,
        had_log: bool,
        min_insync: usize,
    ) -> Result<PartitionRecord, SyncError> {
        let (me, dir) = (
            self.config.node_id,
            self.membership.data_dir_id().to_string(),
        );
        let seen_epoch = p.leader_epoch;
        let min_insync = min_insync.max(1);
        let after = {
            let dir = dir.clone();
            self.metastore
                .update_partition_seeing_agents(
                    self.membership.clock().wall_ms(),
                    topic,
                    p.index,
                    move |cur, agents| {
                        // A rerun after "maybe committed" must not start yet another
                        // epoch: done if the replica is out, on this directory, in an
                        // epoch after the one this decision was made in.
                        let done = cur.leader_epoch > seen_epoch
                            && cur.directories.get(&me) == Some(&dir)
                            && !cur.isr.contains(&me)
                            && cur.leader != me;
                        if done {
                            return None;
                        }
                        strata_replication::open_replica(cur, me, &dir, had_log, agents, min_insync)
                    },
                )
                .await?
                .unwrap_or_else(|| p.clone())
        };
        if strata_replication::opening(p, me, &dir, had_log) == strata_replication::Opening::Rejoin
        {
            tracing::warn!(
                %topic,
                partition = p.index,
                recorded_directory = p.directories.get(&me).map_or("none", String::as_str),
                directory = %dir,
                leader = after.leader,
                epoch = after.leader_epoch,
                isr = ?after.isr,
                "this replica's log is not on this disk (a new or wiped data directory): a new replica, out of the ISR until it has caught up"
            );
        }
        Ok(after)
    }
    /// A restarted agent that the metastore still names as a partition's leader leads it
    /// again only in a new epoch: whatever it did before the restart stays fenced, and
    /// followers compare their logs with it afresh.
    async fn reclaim_leadership(
        &self,
        topic: &str,
        p: &PartitionRecord,
    ) -> Result<PartitionRecord, SyncError> {
        let (me, epoch) = (self.config.node_id, p.leader_epoch);
        let after = self
            .metastore
            .update_partition(topic, p.index, move |cur| {
                (cur.leader == me && cur.leader_epoch == epoch).then(|| PartitionRecord {
                    leader_epoch: epoch + 1,
                    ..cur.clone()
                })
            })
            .await?;
        Ok(after.unwrap_or_else(|| p.clone()))
    }
    /// Leads or follows as the partition record says; a new follower starts copying.
    fn apply_role(&self, replica: &Arc<Partition>, p: &PartitionRecord) -> Transition {
        let now_ms = self.membership.clock().wall_ms();
        let transition = replica.apply(p, now_ms);
        if let Transition::Leads { .. } = transition {
            // A follower learns the log start at most one maintenance pass late; a new
            // leader reads it at once.
            let (metastore, replica) = (self.metastore.clone(), Arc::clone(replica));
            self.tasks
                .spawn(format!("log start of {}", replica.name()), async move {
                    match metastore.log_start(&replica.topic, replica.index).await {
                        Ok(start) => {
                            if let Err(e) = replica.advance_start(start).await {
                                tracing::warn!(partition = %replica.name(), error = %e, "cannot move the log start");
                            }
                        }
                        Err(e) => tracing::warn!(partition = %replica.name(), error = %e, "cannot read the log start"),
                    }
                    Stopped::Done("log start read")
                });
        }
        if let Transition::Follows { leader, epoch, .. } = transition
            && leader >= 0
        {
            let stop = replica.start_fetcher();
            self.tasks.spawn(
                format!("fetcher {}", replica.name()),
                crate::fetcher::follow(
                    Arc::clone(&self.membership),
                    Arc::clone(replica),
                    (leader, epoch),
                    self.config.max_request_bytes,
                    Arc::clone(&self.rebuilds),
                    stop,
                ),
            );
        }
        transition
    }
    /// Makes sure `dir` holds the log of topic `id`: a directory left by an earlier topic
    /// of the same name (deleted while this agent was down) is removed first.
    fn claim_dir(&self, dir: &Path, id: &[u8; 16]) -> Result<(), PartitionError> {
        let id_file = dir.join(TOPIC_ID_FILE);
        let io = |context, path: &Path, source| {
            PartitionError::Log(strata_log::Error::Io {
                context,
                path: path.to_path_buf(),
                source,
            })
        };
        match std::fs::read_to_string(&id_file) {
            Ok(found) if found.trim() == hex(id) => return Ok(()),
            Ok(found) => {
                tracing::warn!(dir = %dir.display(), old_topic_id = found.trim(), "removing the log of a deleted topic");
                std::fs::remove_dir_all(dir).map_err(|e| io("remove stale log", dir, e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("read topic id", &id_file, e)),
        }
        std::fs::create_dir_all(dir).map_err(|e| io("create log directory", dir, e))?;
        std::fs::write(&id_file, hex(id)).map_err(|e| io("write topic id", &id_file, e))
    }
    async fn remove_locked(&self, name: &str) {
        let removed = self
            .topics
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if let Some(topic) = removed {
            for p in topic.local_partitions() {
                if let Err(e) = p.delete().await {
                    tracing::error!(topic = name, partition = p.index, error = %e, "cannot delete partition log");
                }
            }
            tracing::info!(topic = name, "topic deleted");
        }
    }
    /// Brings the local logs in line as soon as topics change in the metastore (another
    /// agent or an admin request there changed them), by watching one key. Stops on
    /// shutdown. The periodic [`ReplicaManager::maintenance`] refresh stays as a backstop.
    ///
    /// The watch is armed before each refresh, so a change made while this task starts,
    /// or while a refresh runs, is either seen by that refresh or fires the watch: none
    /// waits for the backstop.
    pub async fn follow_topic_changes(self: Arc<Self>) -> Stopped {
        loop {
            let armed = tokio::select! {
                r = self.metastore.watch_topics() => r,
                _ = self.shutdown.cancelled() => return Stopped::Shutdown,
            };
            let watch = match armed {
                Ok(watch) => watch,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch topics in the metastore; retrying in 1 s");
                    tokio::select! {
                        _ = crate::clock::pause(Duration::from_secs(1)) => continue,
                        _ = self.shutdown.cancelled() => return Stopped::Shutdown,
                    }
                }
            };
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "cannot refresh topics from the metastore");
            }
            let fired = tokio::select! {
                r = watch => r,
                _ = self.shutdown.cancelled() => return Stopped::Shutdown,
            };
            if let Err(e) = fired {
                tracing::warn!(error = %e, "the topic watch failed; re-arming in 1 s");
                tokio::select! {
                    _ = crate::clock::pause(Duration::from_secs(1)) => {}
                    _ = self.shutdown.cancelled() => return Stopped::Shutdown,
                }
            }
        }
    }
    /// After this agent renewed its lease late (it was paused, or cut off from the
    /// metastore), re-reads every topic, so that where another agent was elected
    /// meanwhile this one steps down, and only then lets the lease count again: no
    /// write is taken in an epoch that may have ended. Stops on shutdown.
    pub async fn follow_lease_regained(self: Arc<Self>) -> Stopped {
        let mut regained = self.membership.regained();
        loop {
            tokio::select! {
                changed = regained.changed() => if changed.is_err() { return Stopped::Done("membership ended") },
                _ = self.shutdown.cancelled() => return Stopped::Shutdown,
            }
            let Some(until) = *regained.borrow_and_update() else {
                continue;
            };
            match self.refresh().await {
                Ok(()) => {
                    tracing::info!(
                        "partitions re-read after the lease lapsed; taking writes again where this agent still leads"
                    );
                    self.membership.confirm_regained(until);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot re-read partitions after the lease lapsed; will try at the next renewal")
                }
            }
        }
    }
    /// Periodic upkeep: picks up metastore changes made elsewhere and rolls segments
    /// whose `segment.ms` passed. Stops on shutdown.
    pub async fn maintenance(self: Arc<Self>, every: Duration) -> Stopped {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.shutdown.cancelled() => return Stopped::Shutdown,
            }
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "cannot refresh topics from the metastore");
            }
            let now = now_ms();
            self.sync_log_starts().await;
            self.apply_local_retention(now).await;
            let producer_cutoff = now - self.config.producer_id_expiration_ms;
            for topic in self.topics() {
                for p in topic.local_partitions() {
                    let expired = p.expire_producers(producer_cutoff);
                    if expired > 0 {
                        tracing::info!(topic = %topic.record.name, partition = p.index, expired, "expired idle producer ids");
                    }
                    if let Err(e) = p.roll_if_due(now) {
                        tracing::warn!(topic = %topic.record.name, partition = p.index, error = %e, "cannot roll segment");
                    }
                    if let Err(e) = p.save_high_watermark().await {
                        tracing::warn!(partition = %p.name(), error = %e, "cannot save the high watermark");
                    }
                }
            }
        }
    }
    /// Partitions whose topics are tiered, for the tiering worker.
    pub fn tiered_partitions(&self) -> Vec<Arc<dyn LocalPartition>> {
        self.topics()
            .iter()
            .filter(|t| t.config.tiered())
            .flat_map(|t| {
                t.led_partitions()
                    .map(|p| Arc::clone(p) as Arc<dyn LocalPartition>)
            })
            .collect()
    }
    /// The first offset a client can read: archived or local, and never below the log
    /// start that retention or DeleteRecords set.
    pub async fn log_start_offset(&self, partition: &Partition) -> i64 {
        let local = partition.log_start_offset();
        match self
            .archive
            .start_offset(&partition.topic, partition.index)
            .await
        {
            Ok(Some(archived)) if archived < local => archived.max(partition.start_floor()),
            Ok(_) => local,
            Err(e) => {
                tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e, "cannot read the archive manifest");
                local
            }
        }
    }
    /// Reads from `offset` locally, or from the archive when it lies below the local log.
    pub async fn read(
        &self,
        partition: &Arc<Partition>,
        offset: i64,
        max_bytes: usize,
        bound: Bound,
    ) -> Result<ReadOutcome, PartitionError> {
        let local_start = partition.log_start_offset();
        if offset >= local_start {
            let mut out = partition.read(offset, max_bytes, bound).await?;
            out.log_start_offset = self.log_start_offset(partition).await;
            return Ok(out);
        }
        let log_start = self.log_start_offset(partition).await;
        if offset < log_start {
            return Err(PartitionError::Log(strata_log::Error::OffsetOutOfRange {
                offset,
                log_start,
                log_end: partition.high_watermark(),
            }));
        }
        let archived = self
            .archive
            .read(&partition.topic, partition.index, offset, max_bytes)
            .await;
        match archived {
            // Compacted away up to the end of the archive: the local log goes on.
            Ok(Some(records)) if records.is_empty() => {
                let mut out = partition.read(local_start, max_bytes, bound).await?;
                out.log_start_offset = log_start;
                Ok(out)
            }
            Ok(Some(mut records)) => {
                let high_watermark = partition.high_watermark();
                let last_stable_offset = partition.last_stable_offset();
                let mut aborted = Vec::new();
                if bound == Bound::LastStable {
                    // A transaction still open may have begun in the archive.
                    cut_at(&mut records, last_stable_offset);
                    if let Some((last, _)) = strata_log::batch::BatchIter::new(&records).last() {
                        let upto = last.next_offset();
                        aborted = self
                            .archive
                            .aborted_between(&partition.topic, partition.index, offset, upto)
                            .await
                            .map_err(|e| PartitionError::Archive(e.to_string()))?;
                        aborted.extend(partition.aborted_between(offset, upto));
                    }
                }
                Ok(ReadOutcome {
                    records,
                    high_watermark,
                    last_stable_offset,
                    log_start_offset: self.log_start_offset(partition).await,
                    aborted,
                })
            }
            Ok(None) => Err(PartitionError::Log(strata_log::Error::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset(partition).await,
                log_end: partition.high_watermark(),
            })),
            Err(e) => Err(PartitionError::Archive(e.to_string())),
        }
    }
    /// Applies the log starts the metastore has (set by the leader's retention or
    /// DeleteRecords) to this agent's replicas, leaders and followers, deleting the
    /// local segments below them.
    pub async fn sync_log_starts(&self) {
        for topic in self.topics() {
            if topic.local_partitions().next().is_none() {
                continue;
            }
            let starts = match self.metastore.log_starts(&topic.record.name).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(topic = %topic.record.name, error = %e, "cannot read log starts");
                    continue;
                }
            };
            for p in topic.local_partitions() {
                if let Some(&start) = starts.get(&p.index)
                    && let Err(e) = p.advance_start(start).await
                {
                    tracing::warn!(partition = %p.name(), error = %e, "cannot move the log start");
                }
            }
        }
    }
    /// Deletes local segments that are archived and past local retention.
    async fn apply_local_retention(&self, now: i64) {
        for topic in self.topics().iter().filter(|t| t.config.tiered()) {
            let (ms, bytes) = topic.config.local_retention();
            for p in topic.local_partitions() {
                let archived_upto = match self
                    .archive
                    .manifest(&topic.record.name, p.index, true)
                    .await
                {
                    Ok(m) => m.last().map_or(-1, |e| e.last_offset),
                    Err(e) => {
                        tracing::warn!(topic = %topic.record.name, partition = p.index, error = %e, "cannot read the archive manifest");
                        continue;
                    }
                };
                match p.apply_local_retention(archived_upto, now, ms, bytes) {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        topic = %topic.record.name,
                        partition = p.index,
                        segments = n,
                        local_log_start = p.log_start_offset(),
                        "deleted archived segments past local retention"
                    ),
                    Err(e) => {
                        tracing::warn!(topic = %topic.record.name, partition = p.index, error = %e, "local retention failed")
                    }
                }
            }
        }
    }
    /// Hands the leadership of `replica` to another live in-sync replica, in a new epoch
    /// (after a disk failure here, or before shutdown). Returns whether it did: with no
    /// other in-sync replica live it stays.
    pub async fn resign(&self, topic: &TopicState, replica: &Partition) -> bool {
        let me = self.config.node_id;
        let Some(p) = topic.record.partitions.get(replica.index as usize) else {
            return false;
        };
        if strata_replication::move_leadership(p, me, &self.membership.live_agents()).is_none() {
            return false;
        }
        let epoch = p.leader_epoch;
        let result = self
            .metastore
            .update_partition_seeing_agents(
                self.membership.clock().wall_ms(),
                &topic.record.name,
                p.index,
                move |cur, agents| {
                    (cur.leader_epoch == epoch)
                        .then(|| strata_replication::move_leadership(cur, me, agents))
                        .flatten()
                },
            )
            .await;
        match result {
            Ok(Some(r)) if r.leader != me => {
                tracing::info!(partition = %replica.name(), leader = r.leader, epoch = r.leader_epoch, "handed leadership over");
                replica.apply(&r, self.membership.clock().wall_ms());
                true
            }
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(partition = %replica.name(), error = %e, "cannot hand leadership over");
                false
            }
        }
    }
    /// Controlled shutdown (as Kafka's): hands the leadership of every partition that has
    /// another live in-sync replica to that replica, in a new epoch, before this agent
    /// stops, so that producers move on at once instead of waiting for writes that can
    /// no longer be committed here. Partitions with no other in-sync replica stay led
    /// here until the end, then wait for this agent's return.
    pub async fn resign_leadership(&self) {
        for topic in self.topics() {
            for replica in topic.led_partitions() {
                self.resign(&topic, replica).await;
            }
        }
    }
    /// Flushes every partition, then waits for the flushers and fetchers to stop.
    pub async fn close(&self) {
        for topic in self.topics() {
            for p in topic.local_partitions() {
                p.close().await;
            }
        }
        self.tasks.wait().await;
    }
}

/// Drops the batches of `records` at or above `limit`.
fn cut_at(records: &mut Vec<u8>, limit: i64) {
    let mut keep = 0;
    for (header, _) in strata_log::batch::BatchIter::new(records) {
        if header.base_offset >= limit {
            break;
        }
        keep += header.total_bytes();
    }
    records.truncate(keep);
}

/// `0-3,7,9-10`: partition indexes as runs; `-` for none.
fn ranges(indexes: &[i32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < indexes.len() {
        let start = indexes[i];
        while i + 1 < indexes.len() && indexes[i + 1] == indexes[i] + 1 {
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if indexes[i] == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{}", indexes[i]));
        }
        i += 1;
    }
    if out.is_empty() { "-".to_string() } else { out }
}
