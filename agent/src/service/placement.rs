//! Moving replicas and leaders on request, in domain terms: reassigning a partition's
//! replicas and cancelling that (KIP-455), listing the reassignments under way, and
//! electing leaders (KIP-460). Kafka's AlterPartitionReassignments,
//! ListPartitionReassignments and ElectLeaders (`api/reassign.rs`) translate to these
//! calls and [`PlacementError`] to codes.
//!
//! A reassignment is written to the partition record at once (the new replicas join the
//! replica list and start copying from the leader); the controller completes it when
//! every new replica is in sync, removing the old ones in a new leader epoch
//! (`strata_replication::{reassign, finish_reassignment}`). Nothing switches before the
//! new replicas caught up.
//!
//! The service decides who may (ALTER on the cluster to move, DESCRIBE to list) and
//! audits each move (`partition.reassign`, `partition.elect_leader`), refusals included.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use strata_replication::PartitionRecord;

use crate::audit::Audit;
use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::replicas::{ReplicaManager, SyncError};

/// Why a move is refused; the Kafka edge maps each kind to its code.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// CLUSTER_AUTHORIZATION_FAILED.
    #[error("{principal} may not {operation} CLUSTER {CLUSTER_NAME}")]
    Denied {
        principal: String,
        operation: &'static str,
    },
    #[error("{0}")]
    UnknownPartition(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("no reassignment in progress")]
    NoReassignmentInProgress,
    #[error("{0}")]
    ElectionNotNeeded(&'static str),
    #[error("no replica is live")]
    EligibleLeadersNotAvailable,
    #[error("the preferred replica is not live and in sync")]
    PreferredLeaderNotAvailable,
    #[error(transparent)]
    Metastore(#[from] strata_metastore::Error),
    #[error(transparent)]
    Sync(#[from] SyncError),
}

impl PlacementError {
    /// Kafka's name for it (the audit log puts it before the message).
    fn name(&self) -> &'static str {
        match self {
            PlacementError::Denied { .. } => "CLUSTER_AUTHORIZATION_FAILED",
            PlacementError::UnknownPartition(_) => "UNKNOWN_TOPIC_OR_PARTITION",
            PlacementError::InvalidReplicaAssignment(_) => "INVALID_REPLICA_ASSIGNMENT",
            PlacementError::NoReassignmentInProgress => "NO_REASSIGNMENT_IN_PROGRESS",
            PlacementError::ElectionNotNeeded(_) => "ELECTION_NOT_NEEDED",
            PlacementError::EligibleLeadersNotAvailable => "ELIGIBLE_LEADERS_NOT_AVAILABLE",
            PlacementError::PreferredLeaderNotAvailable => "PREFERRED_LEADER_NOT_AVAILABLE",
            PlacementError::Metastore(_) => "METASTORE_ERROR",
            PlacementError::Sync(_) => "NOT_SERVED",
        }
    }

    fn audited(&self) -> String {
        format!("{}: {self}", self.name())
    }
}

/// A reassignment under way: the partition's replicas, those being added and those
/// being removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ongoing {
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// Partitions by topic: `None` for every partition of every topic.
pub type Partitions = Option<Vec<(String, Vec<i32>)>>;

/// Each partition's outcome, by topic.
pub type Outcomes = Vec<(String, Vec<(i32, Result<(), PlacementError>)>)>;

/// What a request wants done to one partition record, checked inside the metastore
/// transaction: `Err` refuses with that error and changes nothing.
type Change =
    Box<dyn Fn(&PartitionRecord) -> Result<PartitionRecord, PlacementError> + Send + Sync>;

/// The placement service, on what it borrows from the broker (`Broker::placement`).
#[derive(Clone, Copy)]
pub struct Placement<'a> {
    pub replicas: &'a Arc<ReplicaManager>,
    pub authorizer: &'a Authorizer,
    pub audit: &'a Audit,
}

impl Placement<'_> {
    fn authorize(&self, who: &Caller, operation: Operation) -> Result<(), PlacementError> {
        if self
            .authorizer
            .allows(who.authz(), operation, ResourceType::Cluster, CLUSTER_NAME)
        {
            return Ok(());
        }
        Err(PlacementError::Denied {
            principal: who.principal.to_string(),
            operation: operation.name(),
        })
    }

    fn record(
        &self,
        who: &Caller,
        action: &str,
        resource: String,
        request: Value,
        outcome: Result<Value, String>,
    ) {
        self.audit.record(who, action, &resource, request, outcome);
    }

    /// Moves partition `index` of `topic` to the `target` replicas, or with `None`
    /// cancels the reassignment under way: ALTER on the cluster. Audited.
    pub async fn reassign(
        &self,
        who: &Caller,
        topic: &str,
        index: i32,
        target: Option<Vec<i32>>,
    ) -> Result<(), PlacementError> {
        let request = json!({ "replicas": target });
        let outcome = match self.authorize(who, Operation::Alter) {
            Err(e) => Err(e),
            Ok(()) => match target {
                Some(target) => {
                    let live = self.replicas.membership().live_ids();
                    match check_target(&target, &live) {
                        Ok(()) => {
                            let change: Change = Box::new(move |cur| {
                                if cur.replicas == target && cur.adding.is_empty() {
                                    return Ok(cur.clone());
                                }
                                strata_replication::reassign(cur, &target).map_err(refused)
                            });
                            self.update(topic, index, change).await
                        }
                        Err(e) => Err(e),
                    }
                }
                None => {
                    let change: Change = Box::new(|cur| {
                        if cur.adding.is_empty() && cur.removing.is_empty() {
                            Err(PlacementError::NoReassignmentInProgress)
                        } else {
                            strata_replication::cancel_reassignment(cur).map_err(refused)
                        }
                    });
                    self.update(topic, index, change).await
                }
            },
        };
        if outcome.is_ok() {
            tracing::info!(topic, partition = index, "reassignment requested");
        }
        let recorded = outcome
            .as_ref()
            .map(|()| json!({}))
            .map_err(PlacementError::audited);
        self.record(
            who,
            "partition.reassign",
            partition(topic, index),
            request,
            recorded,
        );
        outcome
    }

    /// The reassignments under way among `wanted`: DESCRIBE on the cluster. Read from
    /// the metastore, not this agent's copy, so that a reassignment the controller just
    /// completed is never listed as ongoing.
    pub async fn reassignments(
        &self,
        who: &Caller,
        wanted: &Partitions,
    ) -> Result<Vec<(String, Vec<Ongoing>)>, PlacementError> {
        self.authorize(who, Operation::Describe)?;
        let records = self.replicas.metastore().topics().await?;
        let wanted = |topic: &str, index: i32| match wanted {
            None => true,
            Some(topics) => topics
                .iter()
                .any(|(t, ps)| t == topic && ps.contains(&index)),
        };
        Ok(records
            .into_iter()
            .filter_map(|record| {
                let ongoing: Vec<Ongoing> = record
                    .partitions
                    .iter()
                    .filter(|p| !p.adding.is_empty() || !p.removing.is_empty())
                    .filter(|p| wanted(&record.name, p.index as i32))
                    .map(|p| Ongoing {
                        partition: p.index as i32,
                        replicas: p.replicas.clone(),
                        adding: p.adding.clone(),
                        removing: p.removing.clone(),
                    })
                    .collect();
                (!ongoing.is_empty()).then_some((record.name, ongoing))
            })
            .collect())
    }

    /// Elects leaders for `targets`: the preferred replica, or with `unclean` any live
    /// replica for a partition without a live in-sync one. ALTER on the cluster.
    /// Audited: a partition at a time, or one entry for every partition (`None`).
    pub async fn elect(
        &self,
        who: &Caller,
        unclean: bool,
        targets: Partitions,
    ) -> Result<Outcomes, PlacementError> {
        let kind = if unclean { "unclean" } else { "preferred" };
        let request = json!({ "election": kind });
        if let Err(e) = self.authorize(who, Operation::Alter) {
            let recorded = Err(e.audited());
            match &targets {
                None => self.record(
                    who,
                    "partition.elect_leader",
                    "partition:<all>".into(),
                    request,
                    recorded,
                ),
                Some(tps) => {
                    for (t, ps) in tps {
                        for p in ps {
                            self.record(
                                who,
                                "partition.elect_leader",
                                partition(t, *p),
                                request.clone(),
                                recorded.clone(),
                            );
                        }
                    }
                }
            }
            return Err(e);
        }
        let every = targets.is_none();
        let targets: Vec<(String, Vec<i32>)> = targets.unwrap_or_else(|| {
            self.replicas
                .topics()
                .iter()
                .map(|t| {
                    let all = t.record.partitions.iter().map(|p| p.index as i32).collect();
                    (t.record.name.clone(), all)
                })
                .collect()
        });
        let live = self.replicas.membership().live_agents();
        let mut out = Vec::with_capacity(targets.len());
        let mut each = serde_json::Map::new();
        for (topic, partitions) in targets {
            let min_insync = self
                .replicas
                .topic(&topic)
                .map_or(1, |t| t.config.min_insync_replicas());
            let mut results = Vec::with_capacity(partitions.len());
            for index in partitions {
                let live = live.clone();
                let change: Change = Box::new(move |cur| {
                    let elected = if unclean {
                        strata_replication::elect(cur, &live, true, min_insync)
                    } else {
                        strata_replication::prefer(cur, &live)
                    };
                    match elected {
                        Some(next) => Ok(next),
                        None if !unclean && cur.replicas.first() == Some(&cur.leader) => Err(
                            PlacementError::ElectionNotNeeded("the preferred replica leads"),
                        ),
                        None if unclean && live.holds(cur, cur.leader) => Err(
                            PlacementError::ElectionNotNeeded("the partition has a live leader"),
                        ),
                        None if unclean => Err(PlacementError::EligibleLeadersNotAvailable),
                        None => Err(PlacementError::PreferredLeaderNotAvailable),
                    }
                });
                let outcome = self.update(&topic, index, change).await;
                let recorded = outcome
                    .as_ref()
                    .map(|()| json!({}))
                    .map_err(PlacementError::audited);
                if every {
                    let shown = recorded.as_ref().map_or_else(|e| json!(e), |_| json!("ok"));
                    each.insert(partition(&topic, index), shown);
                } else {
                    self.record(
                        who,
                        "partition.elect_leader",
                        partition(&topic, index),
                        request.clone(),
                        recorded,
                    );
                }
                results.push((index, outcome));
            }
            out.push((topic, results));
        }
        if every {
            self.record(
                who,
                "partition.elect_leader",
                "partition:<all>".into(),
                request,
                Ok(json!({ "resources": each })),
            );
        }
        Ok(out)
    }

    /// Applies `change` to partition `index` of `topic` in one metastore transaction and
    /// brings this agent in line.
    async fn update(&self, topic: &str, index: i32, change: Change) -> Result<(), PlacementError> {
        let Ok(index) = u32::try_from(index) else {
            return Err(PlacementError::UnknownPartition("no such partition".into()));
        };
        let refusal = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&refusal);
        let after = self
            .replicas
            .metastore()
            .update_partition(topic, index, move |cur| match change(cur) {
                Ok(next) => {
                    *seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    Some(next)
                }
                Err(e) => {
                    *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    None
                }
            })
            .await?;
        if after.is_none() {
            return Err(PlacementError::UnknownPartition(format!(
                "{topic}-{index} does not exist"
            )));
        }
        if let Some(e) = refusal.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        self.replicas.sync_topic(topic).await?;
        Ok(())
    }
}

/// A partition as the audit log names it.
fn partition(topic: &str, index: i32) -> String {
    format!("partition:{topic}-{index}")
}

fn refused(e: strata_replication::ReassignError) -> PlacementError {
    match e {
        strata_replication::ReassignError::NoInSyncReplicaLeft => {
            PlacementError::InvalidReplicaAssignment(
                "every in-sync replica would leave the replica list; wait until a replica that stays is in sync"
                    .into(),
            )
        }
    }
}

fn check_target(target: &[i32], live: &[i32]) -> Result<(), PlacementError> {
    let invalid = |m: String| Err(PlacementError::InvalidReplicaAssignment(m));
    if target.is_empty() {
        return invalid("the target replica list is empty".to_string());
    }
    let mut distinct = target.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != target.len() {
        return invalid(format!("the target replicas {target:?} repeat a broker"));
    }
    if let Some(r) = target.iter().find(|r| !live.contains(r)) {
        return invalid(format!("broker {r} in the target replicas is not alive"));
    }
    Ok(())
}
