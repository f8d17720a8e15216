//! What this agent reports about itself to an operator: whether it is ready, its
//! tiering progress, its replicas as each sees itself, and the leader's view of one
//! partition. Reads only; the HTTP routes that show them need DESCRIBE on the cluster,
//! a partition's view DESCRIBE on its topic, and `/readyz` nothing.

use std::sync::Arc;

use serde_json::{Value, json};
use strata_tiering::TieringWorker;

use crate::replicas::ReplicaManager;
use crate::service::maintenance::MaintenanceError;

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
    pub fn tiering(&self) -> Value {
        let reader = self.replicas.archive();
        let archive = reader.archive().url.clone();
        let failures = reader.read_failures();
        match self.tiering {
            Some(worker) => {
                let now = crate::clock::now_ms();
                let started = worker.pass_started_ms();
                json!({
                    "archive": archive,
                    "partitions": self.explained(worker.status()),
                    // A pass running for long is stuck on the store (calls time out
                    // after 60 s).
                    "pass_running_ms": started.map(|s| (now - s).max(0)),
                    "archive_read_failures": failures,
                })
            }
            None => json!({
                "archive": archive,
                "partitions": [],
                "archive_read_failures": failures,
                "note": "tiering runs in another process",
            }),
        }
    }

    fn explained(&self, status: Vec<strata_tiering::PartitionStatus>) -> Vec<Value> {
        status
            .into_iter()
            .map(|s| {
                let topic = self.replicas.topic(&s.topic);
                let waiting = s.lag_records > 0
                    && topic
                        .as_ref()
                        .and_then(|t| t.replica(s.partition))
                        .is_some_and(|p| p.segments_from(s.archived_upto + 1).1 == 1);
                let mut v = serde_json::to_value(&s).unwrap_or_default();
                if waiting {
                    v["waiting_for"] = "the active segment to close (segment.bytes or segment.ms): only closed segments are archived".into();
                }
                v
            })
            .collect()
    }

    /// The leader's view of `partition` of `topic` (this agent must lead it, or the
    /// error says which agent does): its replicas, epoch, log start (the archive's
    /// included) and end, high watermark, ISR, each follower's progress, and whether an
    /// operator disabled its writes.
    pub async fn partition(&self, topic: &str, partition: i32) -> Result<Value, MaintenanceError> {
        let replica =
            crate::service::maintenance::led_here(self.replicas, topic, partition).await?;
        let state = self.replicas.topic(topic);
        let record = state
            .as_ref()
            .and_then(|s| s.record.partitions.get(partition as usize).cloned());
        let mut status = replica.status(crate::clock::now_ms());
        status["node_id"] = self.node_id.into();
        status["log_start_offset"] = self.replicas.log_start_offset(&replica).await.into();
        status["local_log_start_offset"] = replica.log_start_offset().into();
        if let Some(record) = record {
            status["replicas"] = json!(record.replicas);
            status["adding_replicas"] = json!(record.adding);
            status["removing_replicas"] = json!(record.removing);
        }
        status["disabled"] = json!(
            state
                .as_ref()
                .and_then(|s| s.record.disabled.get(&(partition as u32)))
        );
        Ok(status)
    }

    /// This agent's replicas, leaders and followers, as each sees itself now.
    pub fn partitions(&self) -> Value {
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
        json!({ "node_id": self.node_id, "partitions": replicas })
    }
}
