//! Topic administration in domain terms: creating a topic (validation and replica
//! placement), deleting one, and adding partitions. The Kafka handlers
//! (`api/topics.rs`, Metadata's auto-creation) and the HTTP API (`http/admin.rs`, the
//! HTTP produce's auto-creation) translate their requests to these calls and
//! [`AdminError`] to Kafka codes or HTTP statuses. Validation follows Kafka's rules,
//! and the messages are Kafka's words.
//!
//! The service decides who may, and records what was done: each call takes the
//! [`Caller`], checks the operation Kafka's broker asks (CREATE on the cluster or the
//! topic, DELETE or ALTER on the topic) before it looks at anything else, and writes
//! the audit entry (`topic.create`, `topic.validate`, `topic.delete`,
//! `topic.add_partitions`) with how it ended, refusals included. Neither edge checks or
//! audits these itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};
use strata_metastore::{AgentRecord, NewTopic};

use crate::audit::Audit;
use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::config::MAX_PARTITIONS_PER_TOPIC;
/// A topic as this agent serves it: what the topic service's calls answer.
pub use crate::replicas::TopicState;
use crate::replicas::{ReplicaManager, SyncError};
use crate::topic_config::{self, TopicConfig};

/// Kafka's longest topic name.
const MAX_NAME_LENGTH: usize = 249;

/// Why an administrative request is refused. The names are Kafka's error names; each
/// carries Kafka's message.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The caller may not do this to the topic (TOPIC_AUTHORIZATION_FAILED).
    #[error("{principal} may not {operation} TOPIC {topic}")]
    Denied {
        principal: String,
        operation: &'static str,
        topic: String,
    },
    /// The caller may not do this to the cluster (CLUSTER_AUTHORIZATION_FAILED).
    #[error("{principal} may not {operation} CLUSTER {CLUSTER_NAME}")]
    ClusterDenied {
        principal: String,
        operation: &'static str,
    },
    #[error("{0}")]
    InvalidTopic(String),
    #[error("{0}")]
    TopicExists(String),
    #[error("{0}")]
    UnknownTopic(String),
    #[error("{0}")]
    UnknownTopicId(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Metastore(#[from] strata_metastore::Error),
    #[error(transparent)]
    Sync(#[from] SyncError),
}

impl AdminError {
    /// Kafka's name for the refusal, which the audit log puts before its message.
    fn name(&self) -> &'static str {
        match self {
            AdminError::Denied { .. } => "TOPIC_AUTHORIZATION_FAILED",
            AdminError::ClusterDenied { .. } => "CLUSTER_AUTHORIZATION_FAILED",
            AdminError::InvalidTopic(_) => "INVALID_TOPIC_EXCEPTION",
            AdminError::TopicExists(_) => "TOPIC_ALREADY_EXISTS",
            AdminError::UnknownTopic(_) => "UNKNOWN_TOPIC_OR_PARTITION",
            AdminError::UnknownTopicId(_) => "UNKNOWN_TOPIC_ID",
            AdminError::InvalidPartitions(_) => "INVALID_PARTITIONS",
            AdminError::InvalidReplicationFactor(_) => "INVALID_REPLICATION_FACTOR",
            AdminError::InvalidReplicaAssignment(_) => "INVALID_REPLICA_ASSIGNMENT",
            AdminError::InvalidConfig(_) => "INVALID_CONFIG",
            AdminError::InvalidRequest(_) => "INVALID_REQUEST",
            AdminError::Metastore(_) => "METASTORE_ERROR",
            AdminError::Sync(_) => "NOT_SERVED",
        }
    }
}

/// Kafka's text form of a topic id (as `kafka-topics.sh --describe` prints it).
pub fn topic_id(id: &[u8; 16]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id)
}

/// Checks a topic name the way Kafka does (INVALID_TOPIC_EXCEPTION).
pub fn validate_topic_name(name: &str) -> Result<(), AdminError> {
    let invalid = |why: String| Err(AdminError::InvalidTopic(why));
    if name.is_empty() {
        return invalid("Topic name is illegal, it can't be empty".to_string());
    }
    if name == "." || name == ".." {
        return invalid("Topic name cannot be \".\" or \"..\"".to_string());
    }
    if name.len() > MAX_NAME_LENGTH {
        return invalid(format!(
            "Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return invalid(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// A topic to create, with Kafka's `-1` meaning "the broker's default".
#[derive(Debug, Clone)]
pub struct NewTopicSpec {
    pub name: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    /// Explicit replica lists by partition index.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: BTreeMap<String, String>,
}

impl NewTopicSpec {
    pub fn defaults() -> Self {
        NewTopicSpec {
            name: String::new(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: Vec::new(),
            configs: BTreeMap::new(),
        }
    }
}

/// What a successful (or validated-only) creation resolved to.
pub struct Created {
    pub state: Option<Arc<TopicState>>,
    pub num_partitions: i32,
    pub replication_factor: i16,
    /// The topic's configuration; `None` for a caller who may not DESCRIBE_CONFIGS it
    /// (Kafka answers CreateTopics so).
    pub config: Option<TopicConfig>,
}

/// The topic administration service, on what it borrows from the broker
/// (`Broker::admin`).
#[derive(Clone, Copy)]
pub struct Admin<'a> {
    pub replicas: &'a Arc<ReplicaManager>,
    pub authorizer: &'a Authorizer,
    pub audit: &'a Audit,
}

impl Admin<'_> {
    /// May `who` do `operation` to topic `name`? A refusal is logged (throttled) by
    /// the authorizer.
    fn authorize(&self, who: &Caller, operation: Operation, name: &str) -> Result<(), AdminError> {
        if self
            .authorizer
            .allows(who.authz(), operation, ResourceType::Topic, name)
        {
            return Ok(());
        }
        Err(AdminError::Denied {
            principal: who.principal.to_string(),
            operation: operation.name(),
            topic: name.to_string(),
        })
    }

    /// CREATE on the cluster, or on the topic, as Kafka's CreateTopics and
    /// auto-creation ask.
    fn may_create(&self, who: &Caller, name: &str) -> Result<(), AdminError> {
        let on_cluster = self.authorizer.decide(
            who.authz(),
            Operation::Create,
            ResourceType::Cluster,
            CLUSTER_NAME,
        );
        if on_cluster {
            Ok(())
        } else {
            self.authorize(who, Operation::Create, name)
        }
    }

    fn record<T>(
        &self,
        who: &Caller,
        action: &str,
        resource: &str,
        request: Value,
        outcome: &Result<T, AdminError>,
        done: impl FnOnce(&T) -> Value,
    ) {
        let outcome = match outcome {
            Ok(t) => Ok(done(t)),
            Err(e) => Err(format!("{}: {e}", e.name())),
        };
        self.audit.record(who, action, resource, request, outcome);
    }

    /// Validates and (unless `validate_only`) creates a topic, then serves it: for a
    /// caller with CREATE on the cluster or on the topic. Audited.
    pub async fn create_topic(
        &self,
        who: &Caller,
        spec: NewTopicSpec,
        validate_only: bool,
    ) -> Result<Created, AdminError> {
        let action = if validate_only {
            "topic.validate"
        } else {
            "topic.create"
        };
        let resource = format!("topic:{}", spec.name);
        let request = json!({
            "partitions": spec.num_partitions,
            "replication_factor": spec.replication_factor,
            "assignments": spec.assignments.iter().cloned().collect::<BTreeMap<_, _>>(),
            "configs": spec.configs,
        });
        let name = spec.name.clone();
        let outcome = self.create_checked(who, spec, validate_only).await;
        self.record(who, action, &resource, request, &outcome, |c| {
            json!({
                "name": name,
                "topic_id": c.state.as_ref().map(|s| topic_id(&s.record.id)),
                "partitions": c.num_partitions,
                "replication_factor": c.replication_factor,
            })
        });
        outcome
    }

    /// The topic `name`. One that does not exist is created with the defaults when
    /// `auto_create` (Kafka's `auto.create.topics.enable`, for Metadata and the HTTP
    /// produce), which needs CREATE as [`Admin::create_topic`] does. A topic created so
    /// is audited (`"auto_created": true`); a refusal is not: clients ask again and
    /// again, and the authorizer logs it.
    pub async fn topic_or_create(
        &self,
        who: &Caller,
        name: &str,
        auto_create: bool,
    ) -> Result<Arc<TopicState>, AdminError> {
        if let Some(t) = self.replicas.topic(name) {
            return Ok(t);
        }
        if !auto_create {
            return Err(AdminError::UnknownTopic(format!(
                "topic {name:?} does not exist"
            )));
        }
        // Another agent may have just created it: no CREATE is needed for that one. One
        // read of that topic's record, not of every topic.
        if let Ok(Some(t)) = self.replicas.sync_topic(name).await {
            return Ok(t);
        }
        let spec = NewTopicSpec {
            name: name.to_string(),
            ..NewTopicSpec::defaults()
        };
        let request = json!({ "auto_created": true });
        match self.create_checked(who, spec, false).await {
            Ok(created) => {
                let resource = format!("topic:{name}");
                let outcome = Ok(created);
                self.record(who, "topic.create", &resource, request, &outcome, |c| {
                    json!({
                        "name": name,
                        "topic_id": c.state.as_ref().map(|s| topic_id(&s.record.id)),
                        "partitions": c.num_partitions,
                        "replication_factor": c.replication_factor,
                    })
                });
                tracing::info!(topic = name, "auto-created topic");
                outcome?.state.ok_or_else(|| vanished(name))
            }
            // Someone else created it meanwhile.
            Err(e @ AdminError::TopicExists(_)) => match self.replicas.sync_topic(name).await {
                Ok(Some(t)) => Ok(t),
                _ => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    async fn create_checked(
        &self,
        who: &Caller,
        spec: NewTopicSpec,
        validate_only: bool,
    ) -> Result<Created, AdminError> {
        self.may_create(who, &spec.name)?;
        let name = spec.name.clone();
        let mut created = self.create(spec, validate_only).await?;
        let describes = self.authorizer.decide(
            who.authz(),
            Operation::DescribeConfigs,
            ResourceType::Topic,
            &name,
        );
        if !describes {
            created.config = None;
        }
        Ok(created)
    }

    fn now_ms(&self) -> i64 {
        self.replicas.membership().clock().wall_ms()
    }

    /// The live agents to place replicas on, in placement order (see
    /// [`rack_alternated`]): agents being drained take no new replicas, unless every
    /// live agent is. Placement is rare; read the freshest view.
    async fn live_agents(&self) -> Vec<i32> {
        let membership = self.replicas.membership();
        if let Err(e) = membership.refresh().await {
            tracing::warn!(error = %e, "cannot read the live agents; placing on the last known");
        }
        let agents = membership.live_agents();
        let mut live = membership.live();
        if live.iter().any(|a| !agents.is_draining(a.node_id)) {
            live.retain(|a| !agents.is_draining(a.node_id));
        }
        rack_alternated(&live)
    }

    async fn create(&self, spec: NewTopicSpec, validate_only: bool) -> Result<Created, AdminError> {
        validate_topic_name(&spec.name)?;
        if self.replicas.topic(&spec.name).is_some() {
            return Err(AdminError::TopicExists(format!(
                "Topic '{}' already exists.",
                spec.name
            )));
        }
        let live = self.live_agents().await;
        let assignments: Vec<Vec<i32>> = if spec.assignments.is_empty() {
            let partitions = match spec.num_partitions {
                -1 => self.replicas.broker_config().num_partitions(),
                n if n > 0 => n,
                n => {
                    return Err(AdminError::InvalidPartitions(format!(
                        "Number of partitions was set to an invalid non-positive value: {n}."
                    )));
                }
            };
            check_partition_count(partitions)?;
            let rf = match spec.replication_factor {
                -1 => self.replicas.broker_config().replication_factor(),
                n if n > 0 => n,
                n => {
                    return Err(AdminError::InvalidReplicationFactor(format!(
                        "Replication factor must be larger than 0, or -1 to use the default value, not {n}."
                    )));
                }
            };
            if rf as usize > live.len() {
                return Err(AdminError::InvalidReplicationFactor(format!(
                    "Replication factor: {rf} larger than available brokers: {}.",
                    live.len()
                )));
            }
            place(&live, 0, partitions as usize, rf as usize)
        } else {
            if spec.num_partitions != -1 || spec.replication_factor != -1 {
                return Err(AdminError::InvalidRequest(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".to_string(),
                ));
            }
            check_partition_count(i32::try_from(spec.assignments.len()).unwrap_or(i32::MAX))?;
            let mut by_index = spec.assignments.clone();
            by_index.sort_by_key(|(p, _)| *p);
            for (i, (p, replicas)) in by_index.iter().enumerate() {
                if *p != i as i32 {
                    return Err(AdminError::InvalidReplicaAssignment(
                        "Partitions should be a consecutive 0-based integer sequence".to_string(),
                    ));
                }
                check_replicas(&live, replicas)?;
                if replicas.len() != by_index[0].1.len() {
                    return Err(AdminError::InvalidReplicaAssignment(
                        "All partitions should have the same number of replicas".to_string(),
                    ));
                }
            }
            by_index.into_iter().map(|(_, r)| r).collect()
        };
        topic_config::validate_all(&spec.configs).map_err(AdminError::InvalidConfig)?;
        let config =
            TopicConfig::resolve(&self.replicas.broker_config().inherited(), &spec.configs);
        self.replicas
            .check_file_budget(&assignments)
            .map_err(AdminError::InvalidPartitions)?;
        let num_partitions = assignments.len() as i32;
        let replication_factor = assignments.first().map_or(0, Vec::len) as i16;
        if validate_only {
            return Ok(Created {
                state: None,
                num_partitions,
                replication_factor,
                config: Some(config),
            });
        }
        self.replicas
            .metastore()
            .create_topic(NewTopic {
                name: spec.name.clone(),
                replication_factor,
                configs: spec.configs,
                assignments,
            })
            .await?;
        let state = match self.replicas.sync_topic(&spec.name).await {
            Ok(Some(state)) => state,
            Ok(None) => return Err(vanished(&spec.name)),
            Err(e) => {
                // The topic cannot be served here: take it back out of the metastore, so
                // that a failed creation leaves nothing behind (sync_topic closed what it
                // opened).
                tracing::warn!(topic = %spec.name, error = %e, "created topic cannot be served; removing it");
                if let Err(d) = self
                    .replicas
                    .metastore()
                    .delete_topic(&spec.name, self.now_ms())
                    .await
                {
                    tracing::error!(topic = %spec.name, error = %d, "cannot remove a topic that failed to open");
                } else if let Err(d) = self.replicas.sync_topic(&spec.name).await {
                    tracing::warn!(topic = %spec.name, error = %d, "cannot forget a topic that failed to open");
                }
                return Err(e.into());
            }
        };
        tracing::info!(topic = %spec.name, partitions = num_partitions, "created topic");
        Ok(Created {
            state: Some(state),
            num_partitions,
            replication_factor,
            config: Some(config),
        })
    }

    /// The name and id of the topic named `name`, or (without a name) of the one with
    /// id `id`, for a deletion. The metastore is the authority: a topic this agent could
    /// not serve can still be deleted by name.
    async fn find_topic(
        &self,
        name: Option<&str>,
        id: &[u8; 16],
    ) -> Result<(String, [u8; 16]), AdminError> {
        match name {
            Some(n) => match self.replicas.topic(n) {
                Some(t) => Ok((t.record.name.clone(), t.record.id)),
                None => match self.replicas.metastore().topic(n).await? {
                    Some(r) => Ok((r.name, r.id)),
                    None => Err(AdminError::UnknownTopic(
                        "This server does not host this topic-partition.".to_string(),
                    )),
                },
            },
            None => self
                .replicas
                .topic_by_id(id)
                .map(|t| (t.record.name.clone(), t.record.id))
                .ok_or_else(|| {
                    AdminError::UnknownTopicId(
                        "This server does not host this topic ID.".to_string(),
                    )
                }),
        }
    }

    /// The topics `who` may DESCRIBE, as Metadata of all topics and the HTTP topic list
    /// show them (the others are left out, without a refusal logged).
    pub fn visible_topics(&self, who: &Caller) -> Vec<Arc<TopicState>> {
        let mut topics = self.replicas.topics();
        topics.retain(|t| {
            self.authorizer.decide(
                who.authz(),
                Operation::Describe,
                ResourceType::Topic,
                &t.record.name,
            )
        });
        topics
    }

    /// Every topic the metastore holds that `who` may DESCRIBE (the HTTP topic list:
    /// the metastore, not this agent's view, so a topic just created elsewhere shows).
    pub async fn listed_topics(
        &self,
        who: &Caller,
    ) -> Result<Vec<strata_metastore::TopicRecord>, AdminError> {
        let mut topics = self.replicas.metastore().topics().await?;
        topics.retain(|t| {
            self.authorizer.decide(
                who.authz(),
                Operation::Describe,
                ResourceType::Topic,
                &t.name,
            )
        });
        Ok(topics)
    }

    /// The topic named `name` as this agent serves it now (no caller's check: for
    /// naming what a request names before a service decides on it).
    pub fn topic(&self, name: &str) -> Option<Arc<TopicState>> {
        self.replicas.topic(name)
    }

    /// The topic whose id is `id`, as this agent serves it now (no caller's check, as
    /// [`Admin::topic`]).
    pub fn topic_by_id(&self, id: &[u8; 16]) -> Option<Arc<TopicState>> {
        self.replicas.topic_by_id(id)
    }

    /// The topic as the metastore holds it now, not as this agent last heard: a change
    /// made through another agent a moment ago is seen, and built on. A name no topic
    /// can have is simply unknown.
    pub async fn fresh_topic(&self, name: &str) -> Result<Arc<TopicState>, AdminError> {
        let unknown = || AdminError::UnknownTopic(format!("topic {name:?} does not exist"));
        validate_topic_name(name).map_err(|_| unknown())?;
        self.replicas.sync_topic(name).await?.ok_or_else(unknown)
    }

    /// The topic `name` as Metadata names it: DESCRIBE on it first (nothing is created
    /// for a caller refused), then [`Admin::topic_or_create`].
    pub async fn described_topic(
        &self,
        who: &Caller,
        name: &str,
        auto_create: bool,
    ) -> Result<Arc<TopicState>, AdminError> {
        self.authorize(who, Operation::Describe, name)?;
        self.topic_or_create(who, name, auto_create).await
    }

    /// The topic with id `id`, for a caller with DESCRIBE on it (refused without naming
    /// it).
    pub fn described_topic_by_id(
        &self,
        who: &Caller,
        id: &[u8; 16],
    ) -> Result<Arc<TopicState>, AdminError> {
        let topic = self.replicas.topic_by_id(id).ok_or_else(|| {
            AdminError::UnknownTopicId("This server does not host this topic ID.".to_string())
        })?;
        self.authorize(who, Operation::Describe, &topic.record.name)
            .map_err(|_| AdminError::Denied {
                principal: who.principal.to_string(),
                operation: Operation::Describe.name(),
                topic: topic_id(id),
            })?;
        Ok(topic)
    }

    /// KIP-430: the operations `who` may do on topic `name`, as Kafka's bit field.
    pub fn topic_operations(&self, who: &Caller, name: &str) -> i32 {
        self.authorizer
            .operations(who.authz(), ResourceType::Topic, name)
    }

    /// KIP-430: the operations `who` may do on the cluster, told only to a caller with
    /// DESCRIBE on it (none otherwise), as Kafka answers Metadata and DescribeCluster.
    pub fn cluster_operations(&self, who: &Caller) -> i32 {
        let describes = self.authorizer.decide(
            who.authz(),
            Operation::Describe,
            ResourceType::Cluster,
            CLUSTER_NAME,
        );
        if describes {
            self.authorizer
                .operations(who.authz(), ResourceType::Cluster, CLUSTER_NAME)
        } else {
            0
        }
    }

    /// Disables writes to `partition` of `topic`, an incident switch: producers are
    /// refused (POLICY_VIOLATION, not retriable) and reads go on. The flag is in the
    /// metastore, so every agent and every later leader honours it; this agent applies
    /// it before it answers. For a caller with ALTER on the cluster. Audited
    /// (`partition.disable`). The reason in force (`reason`, or "no reason given").
    pub async fn disable_writes(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
        reason: Option<String>,
    ) -> Result<String, AdminError> {
        let request = json!({ "reason": reason });
        let reason = reason
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| "no reason given".to_string());
        let outcome = self
            .switch_writes(who, topic, partition, Some(reason))
            .await
            .map(|r| r.unwrap_or_default());
        let resource = format!("partition:{topic}-{partition}");
        self.record(who, "partition.disable", &resource, request, &outcome, |r| {
            json!({ "topic": topic, "partition": partition, "writes": "disabled", "reason": r })
        });
        outcome
    }

    /// Enables writes to `partition` of `topic` again ([`Admin::disable_writes`]). For
    /// a caller with ALTER on the cluster. Audited (`partition.enable`).
    pub async fn enable_writes(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
    ) -> Result<(), AdminError> {
        let outcome = self
            .switch_writes(who, topic, partition, None)
            .await
            .map(|_| ());
        let resource = format!("partition:{topic}-{partition}");
        self.record(
            who,
            "partition.enable",
            &resource,
            json!({}),
            &outcome,
            |()| json!({ "topic": topic, "partition": partition, "writes": "enabled" }),
        );
        outcome
    }

    /// Sets (or with `None` clears) the partition's disabled flag: the reason now in
    /// force.
    async fn switch_writes(
        &self,
        who: &Caller,
        topic: &str,
        partition: i32,
        reason: Option<String>,
    ) -> Result<Option<String>, AdminError> {
        let alters = self.authorizer.allows(
            who.authz(),
            Operation::Alter,
            ResourceType::Cluster,
            CLUSTER_NAME,
        );
        if !alters {
            return Err(AdminError::ClusterDenied {
                principal: who.principal.to_string(),
                operation: Operation::Alter.name(),
            });
        }
        let unknown =
            || AdminError::UnknownTopic(format!("partition {topic}-{partition} does not exist"));
        let index = u32::try_from(partition).map_err(|_| unknown())?;
        validate_topic_name(topic).map_err(|_| unknown())?;
        let record =
            self.replicas
                .metastore()
                .set_partition_disabled(topic, index, reason)
                .await
                .map_err(|e| match e {
                    strata_metastore::Error::UnknownTopic(_)
                    | strata_metastore::Error::Invalid(_) => unknown(),
                    e => AdminError::Metastore(e),
                })?;
        // This agent at once; the others follow the metastore's topic watch.
        self.replicas.sync_topic(topic).await?;
        Ok(record.disabled.get(&index).cloned())
    }

    /// Deletes the topic named `name`, or (without a name) the one with id `id`, and
    /// stops serving it: for a caller with DELETE on it (checked before whether it
    /// exists, for a name). Answers its name and id. Audited.
    pub async fn delete_topic(
        &self,
        who: &Caller,
        name: Option<&str>,
        id: &[u8; 16],
    ) -> Result<(String, [u8; 16]), AdminError> {
        let outcome = async {
            if let Some(name) = name {
                self.authorize(who, Operation::Delete, name)?;
            }
            let (found, found_id) = self.find_topic(name, id).await?;
            if name.is_none() {
                self.authorize(who, Operation::Delete, &found)?;
            }
            self.delete(&found).await?;
            Ok((found, found_id))
        }
        .await;
        let resource = match (name, &outcome) {
            (Some(n), _) => format!("topic:{n}"),
            (None, Ok((n, _))) => format!("topic:{n}"),
            (None, Err(_)) => format!("topic:{}", uuid::Uuid::from_bytes(*id)),
        };
        self.record(
            who,
            "topic.delete",
            &resource,
            json!({}),
            &outcome,
            |(n, i)| json!({ "deleted": n, "topic_id": topic_id(i) }),
        );
        outcome
    }

    async fn delete(&self, name: &str) -> Result<(), AdminError> {
        self.replicas
            .metastore()
            .delete_topic(name, self.now_ms())
            .await?;
        self.replicas.sync_topic(name).await?;
        Ok(())
    }

    /// Grows topic `name` to `count` partitions, placing the new ones (or on the given
    /// replica lists, one per new partition): for a caller with ALTER on it. Audited.
    pub async fn create_partitions(
        &self,
        who: &Caller,
        name: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        let request = json!({
            "count": count,
            "validate_only": validate_only,
            "assignments": assignments,
        });
        let outcome = match self.authorize(who, Operation::Alter, name) {
            Ok(()) => self.grow(name, count, assignments, validate_only).await,
            Err(e) => Err(e),
        };
        let resource = format!("topic:{name}");
        self.record(
            who,
            "topic.add_partitions",
            &resource,
            request,
            &outcome,
            |_| json!({ "partitions": count }),
        );
        outcome
    }

    async fn grow(
        &self,
        name: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        let topic = self.replicas.topic(name).ok_or_else(|| {
            AdminError::UnknownTopic(format!("The topic '{name}' does not exist."))
        })?;
        let current = topic.partitions.len() as i32;
        check_partition_count(count)?;
        if count <= current {
            return Err(AdminError::InvalidPartitions(format!(
                "Topic currently has {current} partitions, which is higher than or equal to the requested {count}."
            )));
        }
        let added = (count - current) as usize;
        let rf = topic.record.replication_factor.max(1) as usize;
        let live = self.live_agents().await;
        let assignments: Vec<Vec<i32>> = match assignments.filter(|a| !a.is_empty()) {
            Some(lists) => {
                if lists.len() != added {
                    return Err(AdminError::InvalidReplicaAssignment(format!(
                        "Increasing the number of partitions by {added} but {} assignments provided.",
                        lists.len()
                    )));
                }
                for l in &lists {
                    check_replicas(&live, l)?;
                    if l.len() != rf {
                        return Err(AdminError::InvalidReplicaAssignment(format!(
                            "Inconsistent replication factor between partitions, partition 0 has {rf} while the new assignment has {}.",
                            l.len()
                        )));
                    }
                }
                lists
            }
            None if rf > live.len() => {
                return Err(AdminError::InvalidReplicationFactor(format!(
                    "Replication factor: {rf} larger than available brokers: {}.",
                    live.len()
                )));
            }
            None => place(&live, current as usize, added, rf),
        };
        self.replicas
            .check_file_budget(&assignments)
            .map_err(AdminError::InvalidPartitions)?;
        if validate_only {
            return Ok(());
        }
        self.replicas
            .metastore()
            .add_partitions(name, current as usize, assignments)
            .await?;
        self.replicas.sync_topic(name).await?;
        Ok(())
    }
}

/// A topic deleted while it was being created or read.
pub fn vanished(name: &str) -> AdminError {
    AdminError::UnknownTopic(format!("Topic '{name}' was deleted concurrently."))
}

/// The live agents in placement order: alternating between racks (each rack's agents by
/// node id, racks by name; agents without a rack form one group), as Kafka's rack-aware
/// assignment does.
fn rack_alternated(live: &[AgentRecord]) -> Vec<i32> {
    let mut racks: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for a in live {
        racks.entry(a.rack.as_deref()).or_default().push(a.node_id);
    }
    for nodes in racks.values_mut() {
        nodes.sort_unstable();
    }
    let mut order = Vec::with_capacity(live.len());
    for i in 0.. {
        let before = order.len();
        order.extend(racks.values().filter_map(|nodes| nodes.get(i)));
        if order.len() == before {
            break;
        }
    }
    order
}

/// Replica lists for partitions `first..first + count`: partition *p* is led by the
/// *p*-th agent of `order` and copied to the next `rf - 1`, so leaders spread evenly and,
/// with racks, a partition's replicas sit on different racks where there are enough.
fn place(order: &[i32], first: usize, count: usize, rf: usize) -> Vec<Vec<i32>> {
    (first..first + count)
        .map(|p| (0..rf).map(|r| order[(p + r) % order.len()]).collect())
        .collect()
}

/// Refuses a topic of more than [`MAX_PARTITIONS_PER_TOPIC`] partitions, before
/// anything is placed or allocated for it.
fn check_partition_count(count: i32) -> Result<(), AdminError> {
    if count > MAX_PARTITIONS_PER_TOPIC {
        return Err(AdminError::InvalidPartitions(format!(
            "Number of partitions {count} is above the limit of {MAX_PARTITIONS_PER_TOPIC} partitions per topic."
        )));
    }
    Ok(())
}

fn check_replicas(live: &[i32], replicas: &[i32]) -> Result<(), AdminError> {
    let invalid = |why: String| Err(AdminError::InvalidReplicaAssignment(why));
    if replicas.is_empty() {
        return invalid("A replica list may not be empty".to_string());
    }
    let mut seen = replicas.to_vec();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != replicas.len() {
        return invalid("A replica list names a broker twice".to_string());
    }
    if let Some(unknown) = replicas.iter().find(|r| !live.contains(r)) {
        return invalid(format!(
            "Broker {unknown} in the replica assignment is not alive"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod placement_tests {
    use super::*;

    fn agent(node_id: i32, rack: Option<&str>) -> strata_metastore::AgentRecord {
        strata_metastore::AgentRecord {
            node_id,
            listeners: Vec::new(),
            host: "127.0.0.1".to_string(),
            port: 9092,
            http: String::new(),
            rack: rack.map(str::to_string),
            incarnation: String::new(),
            data_dir_id: String::new(),
            lease_until_ms: 0,
        }
    }

    #[test]
    fn replicas_spread_leaders_and_racks() {
        let live = [
            agent(1, Some("a")),
            agent(2, Some("a")),
            agent(3, Some("b")),
            agent(4, Some("b")),
        ];
        let order = rack_alternated(&live);
        assert_eq!(order, vec![1, 3, 2, 4]);
        let lists = place(&order, 0, 4, 2);
        assert_eq!(lists, vec![vec![1, 3], vec![3, 2], vec![2, 4], vec![4, 1]]);
        for l in &lists {
            let racks: Vec<_> = l
                .iter()
                .map(|n| live[(*n - 1) as usize].rack.clone())
                .collect();
            assert_ne!(racks[0], racks[1], "replicas {l:?} share a rack");
        }
        // No racks: node order, round robin.
        let plain = [agent(1, None), agent(2, None), agent(3, None)];
        assert_eq!(
            place(&rack_alternated(&plain), 4, 2, 3),
            vec![vec![2, 3, 1], vec![3, 1, 2]]
        );
    }
}
