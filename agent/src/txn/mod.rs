//! The transaction coordinator (Kafka's transaction protocol, v1 and KIP-890's v2).
//!
//! Placement is the group coordinators': a transactional id is hashed over the live
//! agents (FindCoordinator with key type 1), and moves when they change. The state of
//! each transactional id is one record in the metastore ([`strata_metastore::TxnRecord`]),
//! changed only inside metastore transactions by the rules in [`state`], so a new
//! coordinator simply carries on: [`Transactions::run`] completes every prepared
//! transaction it now coordinates (writing its markers) and aborts every ongoing one
//! past its timeout.
//!
//! Markers reach each partition's leader as WriteTxnMarkers requests, as Kafka's do
//! ([`markers`]); a leader on this agent is written directly. A transaction is complete
//! once every partition's marker is committed (in every in-sync replica), and only then
//! may its producer start the next one (until then it gets CONCURRENT_TRANSACTIONS).
//!
//! EndTxn answers once the markers are written; the record's move to complete is
//! written after the answer, off the producer's path. Until it lands, the next change
//! to the record on this agent (the producer's next transaction, typically) applies it
//! first, in its own metastore transaction ([`Transactions::change`]): a transaction
//! costs the producer two metastore commits (added, prepared), not three. If the agent
//! stops first, the record stays prepared and the next coordinator writes the markers
//! again, as after any failover.

mod markers;
pub mod state;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_metastore::{Metastore, TopicPartition, TxnRecord, TxnState};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use state::TxnError;

use crate::membership::Membership;
use crate::producer_ids::ProducerIds;
use crate::replicas::ReplicaManager;
use crate::tasks::Stopped;

/// The coordinator's settings (Kafka's names).
#[derive(Debug, Clone, Copy)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a producer
    /// may ask for.
    pub max_timeout_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_check_interval_ms: u64,
    /// `transactional.id.expiration.ms`: a transactional id idle (no transaction) this
    /// long is forgotten.
    pub id_expiration_ms: i64,
}

/// How often the coordinator looks for prepared transactions to complete (a new
/// coordinator's takeover after a failover waits at most this).
const RESUME_INTERVAL_MS: u64 = 500;
/// How long EndTxn waits for its markers before answering anyway.
const INLINE_MARKERS: Duration = Duration::from_secs(5);
/// How often expired transactional ids are looked for.
const EXPIRY_INTERVAL_MS: i64 = 60 * 60 * 1000;

#[derive(Debug)]
pub struct Transactions {
    metastore: Metastore,
    membership: Arc<Membership>,
    replicas: Arc<ReplicaManager>,
    producer_ids: Arc<ProducerIds>,
    config: TxnConfig,
    /// Transactional ids whose markers this agent is writing now.
    completing: Mutex<HashSet<String>>,
    /// Wakes [`Transactions::run`]: a transaction was just prepared.
    prepared: Notify,
    /// Prepared transactions whose markers this agent wrote, by transactional id, until
    /// their completion is written: the next change to the record completes it first.
    written: Mutex<HashMap<String, TxnRecord>>,
    /// Wakes [`Transactions::run`] to write the completions in `written`'s queue.
    due: Notify,
    /// The transactions in `written` whose completion is still to be started.
    due_ids: Mutex<Vec<(String, TxnRecord)>>,
}

/// What DescribeTransactions and the HTTP API show of a transaction.
pub type Described = (String, TxnRecord);

impl Transactions {
    pub fn new(
        metastore: Metastore,
        membership: Arc<Membership>,
        replicas: Arc<ReplicaManager>,
        producer_ids: Arc<ProducerIds>,
        config: TxnConfig,
    ) -> Transactions {
        Transactions {
            metastore,
            membership,
            replicas,
            producer_ids,
            config,
            completing: Mutex::new(HashSet::new()),
            prepared: Notify::new(),
            written: Mutex::default(),
            due: Notify::new(),
            due_ids: Mutex::default(),
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    fn now_ms(&self) -> i64 {
        self.membership.clock().wall_ms()
    }

    /// Refuses a request for a transactional id another agent coordinates.
    fn check_owner(&self, transactional_id: &str) -> Result<(), TxnError> {
        if self
            .membership
            .coordinates(self.membership.node_id(), transactional_id)
        {
            Ok(())
        } else {
            Err(TxnError::NotCoordinator)
        }
    }

    async fn fresh_id(&self) -> Result<i64, TxnError> {
        self.producer_ids
            .next()
            .await
            .map_err(|e| TxnError::CoordinatorNotAvailable(e.to_string()))
    }

    /// Changes `transactional_id`'s record by `change`, in one metastore transaction. A
    /// record still prepared whose markers this agent has written is completed first.
    async fn change<T: Send + 'static>(
        &self,
        transactional_id: &str,
        change: impl Fn(Option<&TxnRecord>) -> strata_metastore::Change<T> + Send + Sync + 'static,
    ) -> Result<T, TxnError> {
        let written = self.written_map().get(transactional_id).cloned();
        let now = self.now_ms();
        self.metastore
            .change_transaction(transactional_id, move |r| {
                let completed = written
                    .as_ref()
                    .and_then(|w| state::complete(r, w, now).record);
                Ok(match completed {
                    None => change(r),
                    Some(completed) => {
                        let mut next = change(Some(&completed));
                        next.record.get_or_insert(completed);
                        next
                    }
                })
            })
            .await
            .map_err(|e| {
                tracing::warn!(transactional_id, error = %e, "cannot change a transaction record");
                TxnError::CoordinatorNotAvailable(e.to_string())
            })
    }

    /// InitProducerId with a transactional id.
    pub async fn init_producer_id(
        &self,
        transactional_id: &str,
        timeout_ms: i64,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(i64, i16), TxnError> {
        self.check_owner(transactional_id)?;
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(TxnError::InvalidTimeout {
                requested: timeout_ms,
                max: self.config.max_timeout_ms,
            });
        }
        let req = state::Init {
            timeout_ms,
            producer_id,
            producer_epoch,
            fresh_id: self.fresh_id().await?,
            now_ms: self.now_ms(),
        };
        let answer = self
            .change(transactional_id, move |r| state::init(r, req))
            .await?;
        if answer == Err(TxnError::ConcurrentTransactions) {
            // An open transaction was just aborted (or one is completing): finish it.
            self.prepared.notify_one();
        }
        answer
    }

    /// AddPartitionsToTxn (v0–3, or v4+ not verify-only), or a KIP-890 v2 leader adding
    /// a partition on the producer's first write to it (`version` 2).
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TopicPartition>,
        version: i16,
        check_owner: bool,
    ) -> Result<(), TxnError> {
        let producer = (producer_id, producer_epoch);
        self.add(
            transactional_id,
            producer,
            partitions,
            None,
            version,
            check_owner,
        )
        .await
    }

    /// AddOffsetsToTxn, or a v2 TxnOffsetCommit adding its group.
    pub async fn add_group(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
        version: i16,
        check_owner: bool,
    ) -> Result<(), TxnError> {
        let producer = (producer_id, producer_epoch);
        let group = Some(group.to_string());
        self.add(
            transactional_id,
            producer,
            Vec::new(),
            group,
            version,
            check_owner,
        )
        .await
    }

    async fn add(
        &self,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        partitions: Vec<TopicPartition>,
        group: Option<String>,
        version: i16,
        check_owner: bool,
    ) -> Result<(), TxnError> {
        if check_owner {
            self.check_owner(transactional_id)?;
        }
        let now = self.now_ms();
        self.change(transactional_id, move |r| {
            let group = group.as_deref();
            state::add(
                r,
                producer_id,
                producer_epoch,
                &partitions,
                group,
                version,
                now,
            )
        })
        .await?
    }

    /// Whether the group `group` is in the producer's ongoing transaction (for
    /// TxnOffsetCommit from a v1 producer, which added it with AddOffsetsToTxn).
    pub async fn verify_group(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
    ) -> Result<(), TxnError> {
        let record = self.read(transactional_id).await?;
        let record = record.ok_or(TxnError::InvalidProducerIdMapping)?;
        if record.producer_id != producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if record.producer_epoch != producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        if record.state != TxnState::Ongoing || !record.groups.contains(group) {
            return Err(TxnError::InvalidTxnState(
                record.state.name(),
                format!("group {group} was not added to the transaction (AddOffsetsToTxn)"),
            ));
        }
        Ok(())
    }

    /// KIP-890's check of a producer's first transactional write to a partition led
    /// here: v1 producers must have added it (AddPartitionsToTxn); for v2 producers
    /// (Produce v12+) the leader adds it.
    pub async fn verify_partition(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: TopicPartition,
        v2: bool,
    ) -> Result<(), TxnError> {
        if v2 {
            return self
                .add_partitions(
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    vec![partition],
                    2,
                    false,
                )
                .await;
        }
        let record = self.read(transactional_id).await?;
        state::verify(record.as_ref(), producer_id, producer_epoch, &partition)
    }

    /// EndTxn: records the decision, then writes the markers before answering (Kafka
    /// answers first; waiting here saves the producer a CONCURRENT_TRANSACTIONS retry on
    /// its next transaction). The completion is written after the answer.
    pub async fn end(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        v2: bool,
    ) -> Result<state::Ended, TxnError> {
        self.check_owner(transactional_id)?;
        let fresh = self.fresh_id().await?;
        let now = self.now_ms();
        let (ended, prepared) = self
            .change(transactional_id, move |r| {
                let change = state::end(r, producer_id, producer_epoch, commit, v2, fresh, now);
                let prepared = change.record.clone();
                strata_metastore::Change {
                    answer: change.answer.map(|ended| (ended, prepared)),
                    record: change.record,
                    settle: change.settle,
                }
            })
            .await??;
        if let Some(record) = prepared.filter(|_| ended.markers)
            && self.claim(transactional_id)
        {
            // The decision is durable; write the markers now, so the producer's next
            // transaction does not find this one still completing (it would be told
            // CONCURRENT_TRANSACTIONS and back off). If that fails, the coordinator's
            // loop finishes it; the answer is the same.
            // The prepare bumped the coordinator epoch already: no takeover needed.
            // Bounded well within clients' request timeouts: a partition without a
            // leader for longer is left to the loop, which takes the record over.
            let written = tokio::time::timeout(
                INLINE_MARKERS,
                markers::write_all(&self.replicas, &self.membership, &self.metastore, &record),
            )
            .await;
            if written == Ok(true) {
                // The loop writes the completion; until then `written` keeps the loop's
                // pass from taking the record over.
                self.written_map()
                    .insert(transactional_id.to_string(), record.clone());
                self.due_list().push((transactional_id.to_string(), record));
                self.due.notify_one();
            } else {
                tracing::debug!(
                    transactional_id,
                    "markers still pending; the coordinator's loop goes on"
                );
                self.prepared.notify_one();
            }
            self.completing_set().remove(transactional_id);
        }
        Ok(ended)
    }

    async fn read(&self, transactional_id: &str) -> Result<Option<TxnRecord>, TxnError> {
        self.metastore
            .transaction(transactional_id)
            .await
            .map_err(|e| TxnError::CoordinatorNotAvailable(e.to_string()))
    }

    /// DescribeTransactions of one id (any agent may answer from the metastore; the API
    /// refuses ids it does not coordinate, as Kafka does).
    pub async fn describe(
        &self,
        transactional_id: &str,
        check_owner: bool,
    ) -> Result<TxnRecord, TxnError> {
        if check_owner {
            self.check_owner(transactional_id)?;
        }
        self.read(transactional_id)
            .await?
            .ok_or(TxnError::TransactionalIdNotFound)
    }

    /// Every transaction record; with `owned_only`, those this agent coordinates
    /// (ListTransactions asks each broker for its own).
    pub async fn list(&self, owned_only: bool) -> Result<Vec<Described>, TxnError> {
        let all = self
            .metastore
            .transactions()
            .await
            .map_err(|e| TxnError::CoordinatorNotAvailable(e.to_string()))?;
        let me = self.membership.node_id();
        Ok(all
            .into_iter()
            .filter(|(id, _)| !owned_only || self.membership.coordinates(me, id))
            .collect())
    }

    /// Completes prepared transactions and aborts timed-out ones, for the ids this agent
    /// coordinates, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Stopped {
        let mut completions: JoinSet<()> = JoinSet::new();
        let mut last_abort_check = i64::MIN;
        let mut last_expiry_check = self.now_ms();
        loop {
            let now = self.now_ms();
            let check_timeouts =
                now.saturating_sub(last_abort_check) >= self.config.abort_check_interval_ms as i64;
            if check_timeouts {
                last_abort_check = now;
            }
            if let Err(e) = self.pass(&mut completions, check_timeouts).await {
                tracing::debug!(error = %e, "transaction coordinator pass failed");
            }
            if now - last_expiry_check >= EXPIRY_INTERVAL_MS {
                last_expiry_check = now;
                self.expire_ids().await;
            }
            while completions.try_join_next().is_some() {}
            let period = RESUME_INTERVAL_MS.min(self.config.abort_check_interval_ms.max(1));
            let next_pass = self.membership.clock().sleep(Duration::from_millis(period));
            tokio::pin!(next_pass);
            loop {
                self.start_completions(&mut completions);
                tokio::select! {
                    _ = shutdown.cancelled() => return Stopped::Shutdown,
                    _ = self.prepared.notified() => break,
                    _ = &mut next_pass => break,
                    _ = self.due.notified() => {}
                }
            }
        }
    }

    /// Starts writing the completions EndTxn left to the loop (their markers are in).
    fn start_completions(self: &Arc<Self>, completions: &mut JoinSet<()>) {
        for (id, record) in std::mem::take(&mut *self.due_list()) {
            let this = Arc::clone(self);
            completions.spawn(async move {
                this.write_complete(&id, record.clone()).await;
                // Unless the producer's next transaction is already prepared here.
                let mut written = this.written_map();
                if written.get(&id) == Some(&record) {
                    written.remove(&id);
                }
            });
        }
        while completions.try_join_next().is_some() {}
    }

    /// One look at every transaction this agent coordinates.
    async fn pass(
        self: &Arc<Self>,
        completions: &mut JoinSet<()>,
        check_timeouts: bool,
    ) -> Result<(), TxnError> {
        for (id, record) in self.list(true).await? {
            let due = check_timeouts
                && record.state == TxnState::Ongoing
                && record.start_ms + record.timeout_ms < self.now_ms();
            if due {
                let fresh = self.fresh_id().await?;
                let now = self.now_ms();
                let aborted = self
                    .change(&id, move |r| state::expire(r, fresh, now))
                    .await?;
                if aborted {
                    tracing::info!(transactional_id = %id, producer_id = record.producer_id, "aborting a transaction past its timeout");
                }
            }
            // A transaction in `written` has its markers; its completion is under way.
            let completing = self.written_map().contains_key(&id);
            if (due || record.state.is_prepared()) && !completing && self.claim(&id) {
                let this = Arc::clone(self);
                completions.spawn(async move {
                    this.complete(&id).await;
                    this.completing_set().remove(&id);
                });
            }
        }
        Ok(())
    }

    fn completing_set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.completing.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn written_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, TxnRecord>> {
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn due_list(&self) -> std::sync::MutexGuard<'_, Vec<(String, TxnRecord)>> {
        self.due_ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this agent may start completing `id` (no completion of it is running).
    fn claim(&self, id: &str) -> bool {
        self.completing_set().insert(id.to_string())
    }

    /// Takes `id`'s prepared transaction over (a new coordinator epoch), writes its
    /// markers and completes it.
    async fn complete(&self, id: &str) {
        let now = self.now_ms();
        match self.change(id, move |r| state::take_over(r, now)).await {
            Ok(Some(record)) => self.finish(id, record).await,
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(transactional_id = id, error = %e, "cannot take a transaction over");
            }
        }
    }

    /// Writes the markers of `record` (`id`'s prepared transaction, under this agent's
    /// coordinator epoch) and completes it.
    async fn finish(&self, id: &str, record: TxnRecord) {
        let written =
            markers::write_all(&self.replicas, &self.membership, &self.metastore, &record).await;
        if written {
            self.write_complete(id, record).await;
        }
    }

    /// Every marker of `record` is written: the transaction is complete.
    async fn write_complete(&self, id: &str, record: TxnRecord) {
        let now = self.now_ms();
        let done = record.clone();
        match self
            .change(id, move |r| state::complete(r, &done, now))
            .await
        {
            Ok(true) => tracing::debug!(
                transactional_id = id,
                state = record.state.name(),
                partitions = record.partitions.len(),
                "transaction complete"
            ),
            Ok(false) => {}
            Err(e) => {
                tracing::debug!(transactional_id = id, error = %e, "cannot complete a transaction")
            }
        }
    }

    /// Forgets transactional ids idle past `transactional.id.expiration.ms`.
    async fn expire_ids(&self) {
        let Ok(all) = self.list(true).await else {
            return;
        };
        let cutoff = self.now_ms() - self.config.id_expiration_ms;
        for (id, record) in all {
            let idle = matches!(
                record.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            ) && record.last_update_ms < cutoff;
            if idle && let Err(e) = self.metastore.delete_transaction(&id).await {
                tracing::debug!(transactional_id = %id, error = %e, "cannot expire a transactional id");
            }
        }
    }

    /// For the HTTP API: transactions open on partitions this agent leads, each with
    /// whether the coordinator's record disagrees (a hanging transaction: its marker
    /// never came).
    pub async fn open_on_partitions(&self) -> Vec<OpenOnPartition> {
        let records: HashMap<(i64, i16), TxnRecord> = match self.list(false).await {
            Ok(all) => all
                .into_iter()
                .map(|(_, r)| ((r.producer_id, r.producer_epoch), r))
                .collect(),
            Err(_) => HashMap::new(),
        };
        let mut out = Vec::new();
        for topic in self.replicas.topics() {
            for p in topic.local_partitions() {
                if p.leader_epoch().is_none() {
                    continue;
                }
                for open in p.open_transactions() {
                    let tp = (p.topic.clone(), p.index);
                    let hanging = !records
                        .get(&(open.producer_id, open.producer_epoch))
                        .is_some_and(|r| {
                            r.partitions.contains(&tp)
                                && matches!(
                                    r.state,
                                    TxnState::Ongoing
                                        | TxnState::PrepareCommit
                                        | TxnState::PrepareAbort
                                        | TxnState::PrepareEpochFence
                                )
                        });
                    out.push(OpenOnPartition {
                        topic: p.topic.clone(),
                        partition: p.index,
                        open,
                        hanging,
                    });
                }
            }
        }
        out
    }

    /// Ends a transaction open on one partition led here by writing an abort marker
    /// for it, as KIP-664's AbortTransaction does (for a hanging transaction whose
    /// coordinator will never send one). Returns the marker's offset.
    pub async fn abort_on_partition(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<i64, crate::error::Error> {
        markers::write_local(
            &self.replicas,
            topic,
            partition,
            producer_id,
            producer_epoch,
            strata_log::txn::ControlRecord {
                marker: strata_log::txn::Marker::Abort,
                coordinator_epoch,
            },
        )
        .await
    }
}

/// Writes one marker to a partition this agent leads (WriteTxnMarkers) and waits until
/// it is committed; its offset.
pub async fn write_marker(
    replicas: &Arc<ReplicaManager>,
    topic: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
    control: strata_log::txn::ControlRecord,
) -> Result<i64, crate::error::Error> {
    markers::write_local(
        replicas,
        topic,
        partition,
        producer_id,
        producer_epoch,
        control,
    )
    .await
}

/// A transaction open on a partition this agent leads.
#[derive(Debug, Clone)]
pub struct OpenOnPartition {
    pub topic: String,
    pub partition: i32,
    pub open: crate::partition::OpenTransaction,
    pub hanging: bool,
}
