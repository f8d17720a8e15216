//! The HTTP API's typed answers on the data path: what the handlers write, what the
//! CLI reads, and what the OpenAPI document is generated from (`openapi.rs`). The
//! requests are typed where they are parsed (`produce.rs`, `consume.rs`, `read.rs`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An RFC 9457 problem: every error answer's body.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = Problem)]
pub struct ProblemBody<'a> {
    /// `about:blank`: the status says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: Cow<'a, str>,
    pub title: Cow<'a, str>,
    pub status: u16,
    pub detail: Cow<'a, str>,
    /// Kafka's name for the error, as Kafka clients print it
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_error: Option<Cow<'a, str>>,
    /// For a produce that wrote nothing: each message's error
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub offsets: Option<Vec<MessageOutcome<'a>>>,
}

/// Each message's partition and offset, or its error, in the order sent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProduceResponse<'a> {
    #[serde(borrow)]
    pub offsets: Vec<MessageOutcome<'a>>,
}

/// One message's outcome.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum MessageOutcome<'a> {
    Written(Written),
    #[serde(borrow)]
    Failed(Failed<'a>),
}

/// A message written.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Written {
    pub partition: i32,
    /// null for acks 0
    pub offset: Option<i64>,
}

/// A message not written, and why.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Failed<'a> {
    /// null where no partition was chosen
    pub partition: Option<i32>,
    /// Kafka's name for the error
    pub error: Cow<'a, str>,
    #[serde(borrow)]
    pub message: Cow<'a, str>,
}

/// How keys, values and header values are written: in a request, and in an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Encoding {
    #[serde(rename = "utf-8")]
    Utf8,
    #[serde(rename = "base64")]
    Base64,
}

/// Which records a read returns: all, or only those of committed transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum IsolationLevel {
    ReadUncommitted,
    ReadCommitted,
}

/// Where a position without a committed or given offset starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reset {
    Earliest,
    Latest,
}

/// A message read.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConsumedMessage {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    /// UTF-8 text, or base64 when `encoding` is `base64`; null for none
    pub key: Option<String>,
    /// UTF-8 text, or base64 when `encoding` is `base64`; null for none
    pub value: Option<String>,
    pub headers: Vec<ConsumedHeader>,
    /// base64 also where text was asked for but the bytes are not UTF-8
    pub encoding: Encoding,
}

/// A header of a message read.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumedHeader {
    pub key: String,
    /// UTF-8 text, or base64 when the message's `encoding` is `base64`; null for none
    pub value: Option<String>,
}

/// Messages from a consumer instance's positions.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConsumeResponse {
    /// The instance that read: name it in a commit to commit under its generation
    pub consumer_id: String,
    /// The instance's generation in its group; -1 before it has joined
    pub generation_id: i32,
    /// The partitions of the topic assigned to the instance
    pub assignment: Vec<i32>,
    pub messages: Vec<ConsumedMessage>,
    /// More are there already: consume again at once
    pub has_more: bool,
}

/// Messages from the positions asked, and where each partition continues.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReadResponse {
    pub messages: Vec<ConsumedMessage>,
    /// Where each partition read continues: the offsets for the next call
    pub next_offsets: BTreeMap<String, i64>,
    /// More are there already: read again at once
    pub has_more: bool,
}

/// The offsets committed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CommitResponse {
    pub group_id: String,
    /// The generation they were committed under; -1 from outside the group
    pub generation_id: i32,
    /// Partition (as a string) to the next offset to read
    pub offsets: BTreeMap<String, i64>,
}

/// The cluster: its id, the controller and every live agent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Cluster {
    pub cluster_id: String,
    /// The controller's node id
    pub controller: i32,
    /// The agent that answered
    pub node_id: i32,
    pub version: String,
    /// The live agents
    pub agents: Vec<LiveAgent>,
}

/// A live agent, as clients are told of it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = Agent)]
pub struct LiveAgent {
    pub node_id: i32,
    /// host:port of its Kafka listener, as clients are told
    pub kafka: String,
    /// host:port of its HTTP API
    pub http: String,
    pub rack: Option<String>,
}

/// An agent no longer drained.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Undrained {
    pub node_id: i32,
    /// Always false: no drain is in force now
    pub draining: bool,
    /// Whether a drain was in force before
    pub was_draining: bool,
}

/// Every topic.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicList {
    pub topics: Vec<TopicSummary>,
}

/// A topic in a list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicSummary {
    pub name: String,
    /// Kafka's text form of the topic id (URL-safe base64, no padding)
    pub topic_id: String,
    /// How many
    pub partitions: usize,
    pub replication_factor: i16,
    /// Partitions whose writes are disabled
    pub disabled_partitions: Vec<u32>,
}

/// A topic: every partition's placement, leadership and offsets, and every config.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Topic {
    pub name: String,
    /// Kafka's text form of the topic id (URL-safe base64, no padding)
    pub topic_id: String,
    pub replication_factor: i16,
    pub partitions: Vec<TopicPartition>,
    /// Every topic config, effective value and where it comes from
    pub configs: BTreeMap<String, TopicConfigEntry>,
}

/// A partition of a topic described.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicPartition {
    pub partition: i32,
    /// The leader's node id; -1 for none
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Replicas that left the ISR while it was below min.insync.replicas and may still
    /// lead (KIP-966)
    pub eligible_leader_replicas: Vec<i32>,
    /// By replica (node id): the id of the data directory holding its log; empty: not
    /// opened yet
    pub directories: BTreeMap<String, String>,
    /// A reassignment in progress: replicas being added
    pub adding_replicas: Vec<i32>,
    /// A reassignment in progress: replicas to remove
    pub removing_replicas: Vec<i32>,
    /// Why writes are disabled; null when they are not
    pub disabled: Option<String>,
    /// The first offset held, archive included (ListOffsets earliest), or why the
    /// leader did not answer
    pub log_start_offset: Option<OffsetOrError>,
    /// ListOffsets latest, or why the leader did not answer
    pub high_watermark: Option<OffsetOrError>,
}

/// An offset a partition's leader gave, or why it gave none.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum OffsetOrError {
    Offset(i64),
    Error {
        /// Kafka's error name, or why the leader could not be asked
        error: String,
    },
}

/// A config's effective value and where it comes from.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicConfigEntry {
    pub value: String,
    pub source: crate::topic_config::Source,
}

/// A topic creation checked (`validate_only`): the topic would be created so.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicValidated {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Always true
    pub validate_only: bool,
}

/// A topic deleted.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicDeleted {
    /// The topic's name
    pub deleted: String,
}

/// The configs a topic sets (not the defaults).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicConfigs {
    pub name: String,
    /// Every config set on the topic (not the defaults)
    pub configs: BTreeMap<String, String>,
}

/// A topic grown (or, with `validate_only`, that would be).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PartitionsAdded {
    pub name: String,
    pub partitions: i32,
    pub validate_only: bool,
}

/// A topic created: described as `GET /v1/topics/{topic}` describes it, or, where it
/// cannot be described now (the caller may not DESCRIBE it, or its leaders do not
/// answer yet), named.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum TopicCreated {
    Described(Topic),
    Named(TopicNamed),
}

/// A topic, by name only.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopicNamed {
    pub name: String,
}

/// Every consumer group of every live agent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupList {
    pub groups: Vec<GroupSummary>,
    /// Agents that did not answer, when some did not
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreachable: Vec<Unreachable>,
}

/// A group in a list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupSummary {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
    /// The node id of the agent that coordinates it
    pub coordinator: i32,
}

/// An agent that did not answer, and why.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Unreachable {
    pub node_id: i32,
    pub error: String,
}

/// A group: its members and their assignments, and per partition the committed offset,
/// the high watermark and the lag between them.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Group {
    pub group_id: String,
    /// Kafka's state name: Empty, PreparingRebalance, CompletingRebalance, Stable
    pub state: String,
    pub protocol_type: String,
    /// The assignor chosen; empty for an empty group
    pub protocol: String,
    pub coordinator: i32,
    pub members: Vec<GroupMember>,
    pub offsets: Vec<GroupOffset>,
    /// The sum of the lags known
    pub total_lag: i64,
}

/// A member of a group.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub assignment: Vec<TopicPartitions>,
}

/// Partitions of a topic.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// A partition a group has committed an offset for, or one assigned to a member.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset; null for a partition assigned to a member before
    /// anything is committed
    pub committed_offset: Option<i64>,
    pub metadata: Option<String>,
    /// The partition's high watermark, why its leader did not answer, or null
    pub high_watermark: Option<OffsetOrError>,
    /// High watermark minus committed offset (0 or more); null without a high watermark
    /// or a committed offset
    pub lag: Option<i64>,
    /// The member assigned the partition; null for none
    pub member_id: Option<String>,
}

/// A group deleted.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupDeleted {
    /// The group's id
    pub deleted: String,
}

/// A partition's writes, switched.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WriteSwitch {
    pub topic: String,
    pub partition: i32,
    pub writes: Writes,
    /// Why writes are disabled; null when they are enabled
    pub reason: Option<String>,
}

/// Whether a partition takes produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Writes {
    Disabled,
    Enabled,
}

/// The last entries of an agent's audit log, newest last.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditLog {
    /// The agent that answered
    pub node_id: i32,
    /// The log's file on that agent
    pub path: String,
    pub entries: Vec<crate::audit::Entry>,
}

/// The coordinator's transactions, and those open on partitions led here.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TransactionList {
    /// Every transactional id the metastore holds, with its transaction
    pub transactions: Vec<Transaction>,
    /// Transactions open on the partitions this agent leads
    pub open: Vec<OpenTransaction>,
}

/// A transactional id's transaction, as the coordinator holds it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Transaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Kafka's state name: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
    /// CompleteAbort, PrepareEpochFence, Dead
    pub state: String,
    pub timeout_ms: i64,
    /// When the transaction began (milliseconds since the epoch); -1 for none
    pub start_ms: i64,
    pub last_update_ms: i64,
    pub coordinator_epoch: i32,
    /// The transaction protocol version the producer speaks (1, or 2 for KIP-890's)
    pub transaction_version: i16,
    /// The partitions in the transaction
    pub partitions: Vec<PartitionRef>,
    /// The consumer groups whose offsets it commits
    pub groups: Vec<String>,
}

/// A partition, by topic and index.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = TransactionPartition)]
pub struct PartitionRef {
    pub topic: String,
    pub partition: i32,
}

/// A transaction open on a partition led here.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OpenTransaction {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Its first record's offset: the last stable offset cannot pass it
    pub first_offset: i64,
    pub last_timestamp_ms: i64,
    /// The coordinator does not count the partition in an open transaction of that
    /// producer, so no marker will come: an operator may abort it
    pub hanging: bool,
}

/// An archive read back and checked against its manifest.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = VerificationReport)]
pub struct Verified {
    #[serde(flatten)]
    pub report: strata_tiering::verify::Verification,
    /// No mismatch: every object the manifest names is there, whole, and holds the
    /// offsets it says
    pub ok: bool,
}

/// A hanging transaction ended by an operator.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TransactionAborted {
    /// The abort marker's offset
    pub marker_offset: i64,
}

/// A group's committed offsets of one topic, moved (or, in a dry run, the plan).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OffsetsReset {
    pub group_id: String,
    pub topic: String,
    /// Nothing was committed: this is the plan
    pub dry_run: bool,
    pub partitions: Vec<PartitionReset>,
}

/// One partition of an [`OffsetsReset`].
pub use crate::service::reset::PartitionReset;

/// An ACL binding, its names in Kafka's spelling.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AclBinding {
    /// TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN or USER
    pub resource_type: String,
    /// `*` (LITERAL) for every resource of the type
    pub resource_name: String,
    /// LITERAL or PREFIXED
    pub pattern_type: String,
    /// `User:alice`; `User:*` for every principal
    pub principal: String,
    /// `*` for any host
    pub host: String,
    /// ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
    /// DESCRIBE_CONFIGS, ALTER_CONFIGS or IDEMPOTENT_WRITE
    pub operation: String,
    /// ALLOW or DENY
    pub permission: String,
}

/// The bindings a filter selects.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AclList {
    pub acls: Vec<AclBinding>,
}

/// The bindings created, as stored (names in Kafka's spelling, defaults filled in).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AclsCreated {
    pub created: Vec<AclBinding>,
}

/// The bindings deleted.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AclsDeleted {
    pub deleted: Vec<AclBinding>,
}

/// One credential of a user: its mechanism and iteration count (never the credential
/// itself).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = ScramCredentialInfo)]
pub struct ScramCredential {
    /// SCRAM-SHA-256 or SCRAM-SHA-512
    pub mechanism: String,
    pub iterations: u32,
}

/// A SCRAM user and its credentials.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ScramUser {
    pub user: String,
    pub credentials: Vec<ScramCredential>,
}

/// Every user with a SCRAM credential.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UserList {
    pub users: Vec<ScramUser>,
}

/// A user's credentials deleted.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UserCredentialsDeleted {
    pub user: String,
    /// The mechanisms whose credentials are deleted
    pub deleted: Vec<String>,
}

/// An entity and its quotas.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QuotaEntry {
    /// Entity type (`user`, `client-id`, `ip`) to name; null for the type's default
    #[schema(schema_with = super::openapi::quota_entity_ref)]
    pub entity: BTreeMap<String, Option<String>>,
    /// Quota to value: `producer_byte_rate`, `consumer_byte_rate`, `request_percentage`
    /// (user and client-id entities), `connection_creation_rate` (ip entities)
    pub values: BTreeMap<String, f64>,
}

/// The entities a query selects, and their quotas.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QuotaList {
    pub quotas: Vec<QuotaEntry>,
}

// The requests, as the handlers read them and the CLI writes them. (They live beside
// their handlers, whose schemas and parsing rules they carry.)
pub(crate) use super::admin::{AddPartitions, AlterConfigs, CreateTopic, ResetOffsets};
pub(crate) use super::consume::{CommitBody as CommitRequest, ConsumeBody as ConsumeRequest};
pub(crate) use super::operate::Disable as DisableRequest;
pub(crate) use super::produce::{
    HeaderEntry, Headers, Message as ProducedMessage, Request as ProduceRequest,
};
pub(crate) use super::read::ReadBody as ReadRequest;
pub(crate) use super::security::{
    AlterQuotas as AlterQuotasRequest, Binding as AclBindingInput, CreateAcls as CreateAclsRequest,
    SetUser as SetUserRequest,
};
