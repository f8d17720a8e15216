//! What an operator sees of one replica (`GET /v1/partitions`, and the leader's view of
//! a partition, `GET /v1/topics/{topic}/partitions/{partition}`): typed, so that the
//! HTTP API's document is generated from them and the CLI reads them back.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One replica as it sees itself now.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = ReplicaStatus)]
pub struct ReplicaView {
    pub topic: String,
    pub partition: i32,
    pub leader_epoch: i32,
    /// The first offset on this agent's disk; in the leader's view of a partition, the
    /// first offset held, archive included
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    /// An fsync failed: the partition takes no writes
    pub offline: bool,
    #[serde(flatten)]
    pub role: RoleView,
}

/// A replica's role, and what it knows in that role.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "role", rename_all = "lowercase")]
#[schema(as = ReplicaRole)]
pub enum RoleView {
    Leader {
        /// The in-sync replicas, as the metastore has them
        isr: Vec<i32>,
        /// An ISR change sent to the metastore and not answered yet
        isr_change_pending: Option<Vec<i32>>,
        followers: Vec<FollowerView>,
    },
    Follower {
        leader: i32,
        /// Whether the newest partition record lists this replica in the ISR
        in_isr: bool,
        /// What it copied while out of sync, when it copied any
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rebuild: Option<RebuildView>,
    },
}

/// A leader's view of one follower.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = FollowerProgress)]
pub struct FollowerView {
    pub node_id: i32,
    /// Where it last fetched from; null before its first fetch in this epoch
    pub log_end_offset: Option<i64>,
    pub caught_up_ms_ago: i64,
}

/// A replica rebuilding (copying while out of sync), or rebuilt.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RebuildProgress)]
pub struct RebuildView {
    /// Still out of sync, so still copying
    pub copying: bool,
    /// Where the last copy came from: `archive` or `leader`
    pub source: Option<String>,
    pub from_archive_bytes: u64,
    pub from_leader_bytes: u64,
    /// The leader's high watermark, as its last answer said
    pub leader_high_watermark: i64,
    pub offsets_left: i64,
    /// Bytes left, at the bytes per offset of what this replica holds
    pub estimated_bytes_left: u64,
}

/// The leader's view of its partition: its replica's, with where the log starts in the
/// archive and what the partition's record says.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = PartitionStatus)]
pub struct PartitionView {
    /// The agent that answered
    pub node_id: i32,
    #[serde(flatten)]
    pub replica: ReplicaView,
    /// The first offset on this agent's disk (`log_start_offset` counts the archive's)
    pub local_log_start_offset: i64,
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    /// Why writes are disabled; null when they are not
    pub disabled: Option<String>,
}

/// This agent's replicas.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = ReplicaList)]
pub struct ReplicaList {
    pub node_id: i32,
    pub partitions: Vec<ReplicaView>,
}
