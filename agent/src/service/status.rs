//! What this agent reports about itself to an operator: whether it is ready, its
//! tiering progress, its replicas as each sees itself, and the leader's view of one
//! partition. Reads only; the HTTP routes that show them need DESCRIBE on the cluster,
//! a partition's view DESCRIBE on its topic, and `/readyz` nothing.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strata_tiering::TieringWorker;
use utoipa::ToSchema;

use crate::partition::{PartitionView, ReplicaList};
use crate::replicas::ReplicaManager;
use crate::service::maintenance::MaintenanceError;

/// Tiering progress on this agent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = TieringStatus)]
pub struct TieringView {
    /// The archive's URL
    pub archive: String,
    /// The partitions this agent's tiering worker archives (it leads them)
    pub partitions: Vec<TieringPartition>,
    /// How long the running pass has run; null between passes. A pass running for
    /// long is stuck on the object store (its calls time out after 60 s)
    pub pass_running_ms: Option<i64>,
    /// Reads of the archive that failed since the agent started
    pub archive_read_failures: u64,
    /// Why there are no partitions, when tiering runs in another process
    pub note: Option<String>,
}

/// One partition's tiering progress.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TieringPartition {
    #[serde(flatten)]
    pub progress: strata_tiering::PartitionStatus,
    /// What the records not yet archived wait for, when they wait for more than the
    /// next pass
    pub waiting_for: Option<String>,
}

/// This agent's own state.
pub struct Status<'a> {
    pub replicas: &'a Arc<ReplicaManager>,
    pub metastore: &'a strata_metastore::Metastore,
    pub tiering: Option<&'a Arc<TieringWorker>>,
    pub node_id: i32,
}

impl Status<'_> {
    /// Ready while the metastore answers; why not otherwise.
    pub async fn ready(&self) -> Result<(), String> {
        match self.metastore.cluster().await {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("metastore: {e}")),
        }
    }

    /// Tiering progress per partition: the highest archived offset and the lag in
    /// records, with, where records wait in the active segment alone, why (only closed
    /// segments are archived).
    pub fn tiering(&self) -> TieringView {
        let reader = self.replicas.archive();
        let archive = reader.archive().url.clone();
        let archive_read_failures = reader.read_failures();
        let Some(worker) = self.tiering else {
            return TieringView {
                archive,
                partitions: Vec::new(),
                pass_running_ms: None,
                archive_read_failures,
                note: Some("tiering runs in another process".to_string()),
            };
        };
        let now = crate::clock::now_ms();
        TieringView {
            archive,
            partitions: self.explained(worker.status()),
            // A pass running for long is stuck on the store (calls time out after 60 s).
            pass_running_ms: worker.pass_started_ms().map(|s| (now - s).max(0)),
            archive_read_failures,
            note: None,
        }
    }

    fn explained(&self, status: Vec<strata_tiering::PartitionStatus>) -> Vec<TieringPartition> {
        status
            .into_iter()
            .map(|s| {
                let topic = self.replicas.topic(&s.topic);
                let waiting = s.lag_records > 0
                    && topic
                        .as_ref()
                        .and_then(|t| t.replica(s.partition))
                        .is_some_and(|p| p.segments_from(s.archived_upto + 1).1 == 1);
                TieringPartition {
                    progress: s,
                    waiting_for: waiting.then(|| {
                        "the active segment to close (segment.bytes or segment.ms): only closed segments are archived".to_string()
                    }),
                }
            })
            .collect()
    }

    /// The leader's view of `partition` of `topic` (this agent must lead it, or the
    /// error says which agent does): its replicas, epoch, log start (the archive's
    /// included) and end, high watermark, ISR, each follower's progress, and whether an
    /// operator disabled its writes.
    pub async fn partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionView, MaintenanceError> {
        let replica =
            crate::service::maintenance::led_here(self.replicas, topic, partition).await?;
        let state = self.replicas.topic(topic);
        let (replicas, adding_replicas, removing_replicas) = state
            .as_ref()
            .and_then(|s| s.record.partitions.get(partition as usize))
            .map(|r| (r.replicas.clone(), r.adding.clone(), r.removing.clone()))
            .unwrap_or_default();
        let mut view = replica.status(crate::clock::now_ms());
        view.log_start_offset = self.replicas.log_start_offset(&replica).await;
        Ok(PartitionView {
            node_id: self.node_id,
            replica: view,
            local_log_start_offset: replica.log_start_offset(),
            replicas,
            adding_replicas,
            removing_replicas,
            disabled: state
                .as_ref()
                .and_then(|s| s.record.disabled.get(&(partition as u32)).cloned()),
        })
    }

    /// This agent's replicas, leaders and followers, as each sees itself now.
    pub fn partitions(&self) -> ReplicaList {
        let now = crate::clock::now_ms();
        let replicas: Vec<_> = self
            .replicas
            .topics()
            .iter()
            .flat_map(|t| {
                t.local_partitions()
                    .map(|p| p.status(now))
                    .collect::<Vec<_>>()
            })
            .collect();
        ReplicaList {
            node_id: self.node_id,
            partitions: replicas,
        }
    }
}
