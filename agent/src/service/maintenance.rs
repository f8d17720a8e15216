//! An operator's repairs of one partition's archive: tiering its closed segments now
//! (after a fault in the object store was fixed, say; done by the partition's leader)
//! and reading its archive back to check it against the manifest (by any agent). Both
//! need ALTER on the cluster and are audited here (`partition.tier`,
//! `partition.verify`), refusals included, whichever edge asked.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use strata_tiering::TieringWorker;
use strata_tiering::verify::Verification;
use utoipa::ToSchema;

use crate::audit::Audit;
use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::error::Error;
use crate::partition::Partition;
use crate::replicas::ReplicaManager;

/// Why a repair did not happen.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    /// Refused (no ALTER on the cluster), or no such partition.
    #[error(transparent)]
    Refused(#[from] Error),
    /// Another agent leads the partition: the repair is its to do.
    #[error("agent {leader} leads {topic}-{partition}")]
    LedElsewhere {
        topic: String,
        partition: i32,
        leader: i32,
    },
    /// This agent runs no tiering worker (`tiering_enabled = false`).
    #[error("tiering runs in another process here (tiering_enabled = false): run the repair there")]
    TieringElsewhere,
    #[error("topic {0} is not tiered (remote.storage.enable is false)")]
    NotTiered(String),
    /// The manifest could not be read from the metastore.
    #[error("cannot read the manifest: {0}")]
    Manifest(String),
    /// The object store failed the repair.
    #[error("{0}")]
    Archive(String),
}

/// What a tiering pass run now did: as the HTTP API answers it and the audit log
/// records it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Tiered {
    pub topic: String,
    pub partition: i32,
    /// The last archived offset before; -1 for none
    pub archived_upto_before: i64,
    /// The last archived offset now; -1 for none
    pub archived_upto: i64,
    /// Present when records wait in the active segment, which is not archived until it
    /// closes
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

/// Why records past `archived_upto` wait: they are in the active segment alone.
const ACTIVE_SEGMENT: &str =
    "the active segment to close (segment.bytes or segment.ms): only closed segments are archived";

/// The repairs, for the partitions this agent leads.
pub struct Maintenance<'a> {
    pub replicas: &'a Arc<ReplicaManager>,
    pub tiering: Option<&'a Arc<TieringWorker>>,
    pub authorizer: &'a Authorizer,
    pub audit: &'a Audit,
}

impl Maintenance<'_> {
    /// Archives the closed segments of `partition` of `topic` not yet archived, now.
    pub async fn tier_now(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
    ) -> Result<Tiered, MaintenanceError> {
        let outcome = self.tiered(who, topic, partition).await;
        self.record(who, "partition.tier", topic, partition, &outcome, |t| {
            serde_json::to_value(t).unwrap_or_default()
        });
        outcome
    }

    async fn tiered(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
    ) -> Result<Tiered, MaintenanceError> {
        let replica = self.led_here(who, topic, partition).await?;
        let worker = self.tiering.ok_or(MaintenanceError::TieringElsewhere)?;
        let tiered = self
            .replicas
            .topic(topic)
            .is_some_and(|t| t.config.tiered());
        if !tiered {
            return Err(MaintenanceError::NotTiered(topic.to_string()));
        }
        let reader = self.replicas.archive();
        let archived_upto = || async {
            reader
                .manifest(topic, partition, true)
                .await
                .map(|m| m.last().map_or(-1, |e| e.last_offset))
        };
        let before = archived_upto().await.unwrap_or(-1);
        worker.tier_partition(replica.as_ref()).await.map_err(|e| {
            MaintenanceError::Archive(format!("tiering {topic}-{partition} failed: {e}"))
        })?;
        let after = archived_upto().await.unwrap_or(before);
        let waiting =
            replica.segments_from(after + 1).1 == 1 && replica.log_end_offset() > after + 1;
        Ok(Tiered {
            topic: topic.to_string(),
            partition,
            archived_upto_before: before,
            archived_upto: after,
            waiting_for: waiting.then(|| ACTIVE_SEGMENT.to_string()),
        })
    }

    /// Reads the archive of `partition` of `topic` back and checks it against the
    /// manifest.
    pub async fn verify(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
    ) -> Result<Verification, MaintenanceError> {
        let outcome = self.verified(who, topic, partition).await;
        self.record(
            who,
            "partition.verify",
            topic,
            partition,
            &outcome,
            |v| {
                let mismatches = v.mismatches.len();
                json!({ "topic": topic, "partition": partition, "ok": v.ok(), "mismatches": mismatches })
            },
        );
        outcome
    }

    async fn verified(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
    ) -> Result<Verification, MaintenanceError> {
        self.may_repair(who)?;
        if !fresh(self.replicas, topic, partition)
            .await?
            .has_partition(partition)
        {
            return Err(unknown(topic, partition));
        }
        let reader = self.replicas.archive();
        let manifest = reader
            .manifest(topic, partition, true)
            .await
            .map_err(|e| MaintenanceError::Manifest(e.to_string()))?;
        strata_tiering::verify::verify_partition(reader.archive(), topic, partition, &manifest)
            .await
            .map_err(|e| MaintenanceError::Archive(format!("cannot read the archive: {e}")))
    }

    fn may_repair(&self, who: &Caller) -> Result<(), MaintenanceError> {
        if allows(self.authorizer, who) {
            return Ok(());
        }
        Err(Error::denied(who, Operation::Alter, ResourceType::Cluster, CLUSTER_NAME).into())
    }

    /// The replica of `partition`, for a caller with ALTER on the cluster.
    async fn led_here(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<Partition>, MaintenanceError> {
        self.may_repair(who)?;
        led_here(self.replicas, topic, partition).await
    }

    /// Audits a repair this agent answered (one sent on to the leader is the leader's
    /// to audit).
    fn record<T>(
        &self,
        who: &Caller,
        action: &str,
        topic: &str,
        partition: i32,
        outcome: &Result<T, MaintenanceError>,
        answer: impl FnOnce(&T) -> Value,
    ) {
        if matches!(outcome, Err(MaintenanceError::LedElsewhere { .. })) {
            return;
        }
        let logged = match outcome {
            Ok(t) => Ok(answer(t)),
            Err(e) => Err(e.to_string()),
        };
        let resource = format!("partition:{topic}-{partition}");
        self.audit.record(who, action, &resource, json!({}), logged);
    }
}

/// The replica of `partition` of `topic` if this agent leads it, as the metastore has
/// the topic now; otherwise which agent does ([`MaintenanceError::LedElsewhere`]).
pub(crate) async fn led_here(
    replicas: &ReplicaManager,
    topic: &str,
    partition: i32,
) -> Result<Arc<Partition>, MaintenanceError> {
    let state = fresh(replicas, topic, partition).await?;
    let record = state
        .record
        .partitions
        .get(usize::try_from(partition).unwrap_or(usize::MAX))
        .ok_or_else(|| unknown(topic, partition))?;
    match state.replica(partition) {
        Some(replica) if replica.leader_epoch().is_some() => Ok(Arc::clone(replica)),
        _ => Err(MaintenanceError::LedElsewhere {
            topic: topic.to_string(),
            partition,
            leader: record.leader,
        }),
    }
}

/// The topic as the metastore holds it now (a partition added through another agent a
/// moment ago is seen); a name no topic can have is simply unknown.
async fn fresh(
    replicas: &ReplicaManager,
    topic: &str,
    partition: i32,
) -> Result<Arc<crate::replicas::TopicState>, MaintenanceError> {
    if crate::service::admin::validate_topic_name(topic).is_err() {
        return Err(unknown(topic, partition));
    }
    match replicas.sync_topic(topic).await {
        Ok(Some(state)) => Ok(state),
        Ok(None) => Err(unknown(topic, partition)),
        Err(e) => Err(Error::Sync(e).into()),
    }
}

fn allows(authorizer: &Authorizer, who: &Caller) -> bool {
    authorizer.allows(
        who.authz(),
        Operation::Alter,
        ResourceType::Cluster,
        CLUSTER_NAME,
    )
}

fn unknown(topic: &str, partition: i32) -> MaintenanceError {
    MaintenanceError::Refused(Error::UnknownTopicOrPartition {
        topic: topic.to_string(),
        partition,
    })
}
