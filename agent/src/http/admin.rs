//! Topic and group administration over HTTP (`docs/http.md`, "Administration"): the
//! same services the Kafka admin APIs call, so a topic created here is the topic
//! `kafka-topics.sh` describes, and a group's offsets reset here are the ones its Kafka
//! consumers resume from. Every change is audited (`audit.rs`).
//!
//! - `GET /v1/topics`, `POST /v1/topics`, `GET|DELETE /v1/topics/{topic}`,
//!   `PATCH /v1/topics/{topic}/configs`, `POST /v1/topics/{topic}/partitions`;
//! - `GET /v1/groups`, `GET|DELETE /v1/groups/{group}` (describe with lag),
//!   `POST /v1/groups/{group}/offsets` (reset or replay: to the earliest or latest
//!   offset, an offset, or a timestamp; with `dry_run`).
//!
//! Group requests that reach another agent are redirected (307) to the group's
//! coordinator, as consume and commit are.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{Extensions, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::HttpApi;
use super::cluster::redirect;
use super::json::{self, whole};
use super::model::{
    Cluster, LiveAgent, OffsetOrError, PartitionsAdded, Topic, TopicConfigEntry, TopicConfigs,
    TopicCreated, TopicDeleted, TopicList, TopicNamed, TopicPartition, TopicSummary,
    TopicValidated,
};
use super::model::{
    Group, GroupDeleted, GroupList, GroupMember, GroupOffset, GroupSummary, OffsetsReset,
    TopicPartitions, Unreachable,
};
use super::problem::{Body, Extracted, Problem, extract};
use crate::caller::Caller;
use crate::group::GroupError;
use crate::service::admin::{AdminError, NewTopicSpec, TopicState, topic_id};
use crate::service::configs::{ConfigError, Op, Resource};
use crate::service::offsets::{Asker, Query};
use crate::service::reset::{self, ResetError, ResetSpec, Target};

/// Who sent the request, for the audit log.
pub fn caller(extensions: &Extensions) -> Caller {
    let address = extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    Caller {
        principal: super::auth::authenticated(extensions),
        address,
        via: "http",
    }
}

fn unknown_topic(topic: &str) -> Problem {
    Problem::unknown_topic_or_partition(format!("topic {topic:?} does not exist"))
}

/// The topic as the metastore holds it now, not as this agent last heard: a change made
/// through another agent a moment ago is seen, and built on. A name no topic can have
/// is simply unknown.
async fn fresh_topic(http: &HttpApi, topic: &str) -> Result<Arc<TopicState>, Problem> {
    match http.broker.admin().fresh_topic(topic).await {
        Ok(state) => Ok(state),
        Err(AdminError::UnknownTopic(_)) => Err(unknown_topic(topic)),
        Err(e) => Err(Problem::from(&e)),
    }
}

/// The offsets ListOffsets gives for `timestamp` (-2 earliest, -1 latest, else a time
/// in ms) on `partitions` of `topic`, for `who` (DESCRIBE on the topic: the offsets
/// service decides), each asked of its leader: this agent's from the offsets service,
/// the others' over their Kafka listener. A partition's error is Kafka's error name
/// (or, for a leader that cannot be reached, why); `Err` when the caller may not look
/// at the topic at all.
pub async fn list_offsets(
    http: &HttpApi,
    who: &Caller,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> Result<BTreeMap<i32, Result<i64, String>>, Problem> {
    let offsets = http.broker.offsets();
    let permit = offsets
        .permit(who, Asker::Client, topic)
        .map_err(|e| Problem::from(&e))?;
    let query = Query::from_kafka(timestamp, false);
    let found = offsets.lookup_at_leaders(&permit, partitions, query).await;
    // Kafka's error name, or for a leader that cannot be reached, why.
    let text = |e: crate::error::Error| match e {
        e @ crate::error::Error::Unreachable { .. } => e.to_string(),
        other => other.kafka_name(),
    };
    Ok(found
        .into_iter()
        .map(|(p, o)| (p, o.map_err(text)))
        .collect())
}

/// `GET /v1/topics`: every topic the metastore holds.
#[utoipa::path(
    get,
    path = "/v1/topics",
    summary = "Every topic",
    description = "The topics the metastore holds that the caller may describe, with their partition count, replication factor and the partitions whose writes are disabled.",
    responses(
        (status = 200, description = "The topics", body = TopicList),
        super::openapi::ListTopicsProblems,
    ),
)]
pub async fn list_topics(State(http): State<Arc<HttpApi>>, extensions: Extensions) -> Response {
    match http
        .broker
        .admin()
        .listed_topics(&caller(&extensions))
        .await
    {
        Ok(topics) => {
            let topics = topics
                .iter()
                .map(|t| TopicSummary {
                    name: t.name.clone(),
                    topic_id: topic_id(&t.id),
                    partitions: t.partitions.len(),
                    replication_factor: t.replication_factor,
                    disabled_partitions: t.disabled.keys().copied().collect(),
                })
                .collect();
            axum::Json(TopicList { topics }).into_response()
        }
        Err(e) => Problem::from(&e).into_response(),
    }
}

/// `GET /v1/topics/{topic}`: placement, leadership and offsets of every partition, and
/// the effective configs with where each comes from.
#[utoipa::path(
    get,
    path = "/v1/topics/{topic}",
    summary = "Describe a topic",
    description = "Placement, leadership, offsets and the disabled flag of every partition (offsets asked of each partition's leader; one that cannot answer shows `{\"error\"}`), and the effective configs with where each comes from. Needs DESCRIBE on the topic.",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')")),
    responses(
        (status = 200, description = "The topic", body = Topic),
        super::openapi::DescribeTopicProblems,
    ),
)]
pub async fn describe_topic(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    topic: Extracted<String>,
) -> Response {
    let topic = match topic {
        Ok(t) => t.0,
        Err(e) => return Problem::from(e).into_response(),
    };
    match describe(&http, &caller(&extensions), &topic).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(p) => p.into_response(),
    }
}

async fn describe(http: &HttpApi, who: &Caller, topic: &str) -> Result<Topic, Problem> {
    let state = fresh_topic(http, topic).await?;
    let indexes: Vec<i32> = (0..state.record.partitions.len() as i32).collect();
    let (starts, ends) = tokio::join!(
        list_offsets(http, who, topic, &indexes, -2),
        list_offsets(http, who, topic, &indexes, -1)
    );
    let (starts, ends) = (starts?, ends?);
    let offset = |m: &BTreeMap<i32, Result<i64, String>>, p: i32| match m.get(&p) {
        Some(Ok(o)) => Some(OffsetOrError::Offset(*o)),
        Some(Err(e)) => Some(OffsetOrError::Error { error: e.clone() }),
        None => None,
    };
    let partitions = state
        .record
        .partitions
        .iter()
        .map(|p| {
            let i = p.index as i32;
            TopicPartition {
                partition: i,
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                eligible_leader_replicas: p.elr.clone(),
                directories: (p.directories.iter())
                    .map(|(node, dir)| (node.to_string(), dir.clone()))
                    .collect(),
                adding_replicas: p.adding.clone(),
                removing_replicas: p.removing.clone(),
                disabled: state.record.disabled.get(&p.index).cloned(),
                log_start_offset: offset(&starts, i),
                high_watermark: offset(&ends, i),
            }
        })
        .collect();
    let configs = state
        .config
        .entries()
        .map(|(name, value, source)| {
            let entry = TopicConfigEntry {
                value: value.to_string(),
                source,
            };
            (name.to_string(), entry)
        })
        .collect();
    Ok(Topic {
        name: topic.to_string(),
        topic_id: topic_id(&state.record.id),
        replication_factor: state.record.replication_factor,
        partitions,
        configs,
    })
}

/// A topic to create.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateTopicRequest)]
pub(crate) struct CreateTopic {
    /// Kafka's rules: 1 to 249 ASCII letters, digits, '.', '_' and '-', and not '.' or
    /// '..'
    #[schema(pattern = "^[a-zA-Z0-9._-]{1,249}$")]
    pub(crate) name: String,
    /// How many; -1 or null for the broker's `num_partitions`
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(schema_with = super::openapi::partition_count)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partitions: Option<i32>,
    /// Replicas per partition, at most the live agents (else INVALID_REPLICATION_FACTOR,
    /// 400); -1 or null for the broker's `replication_factor`
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(schema_with = super::openapi::replication_factor)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) replication_factor: Option<i16>,
    /// Configs set on the topic; the others are the broker's defaults
    #[serde(default)]
    #[schema(schema_with = super::openapi::nullable_topic_configs)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) configs: Option<BTreeMap<String, String>>,
    /// Check the request, create nothing
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) validate_only: Option<bool>,
}

/// `POST /v1/topics`: `{"name", "partitions"?, "replication_factor"?, "configs"?,
/// "validate_only"?}`, as CreateTopics (the broker's defaults where left out).
#[utoipa::path(
    post,
    path = "/v1/topics",
    summary = "Create a topic",
    description = "As CreateTopics: the broker's defaults (`num_partitions`, `replication_factor`) where a field is left out or -1. With `validate_only`, checks the request and creates nothing. Needs CREATE on the cluster or the topic; audited (`topic.create`, `topic.validate`).",
    request_body = CreateTopic,
    responses(
        (status = 200, description = "`validate_only`: the topic would be created so", body = TopicValidated),
        (status = 201, description = "The topic, created, as `GET /v1/topics/{topic}` describes it (or only named, where it cannot be described now)", body = TopicCreated),
        super::openapi::CreateTopicProblems,
    ),
)]
pub async fn create_topic(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    body: Body,
) -> Response {
    let caller = caller(&extensions);
    let body = match body {
        Ok(b) => b,
        Err(e) => return Problem::from(e).into_response(),
    };
    let req: CreateTopic = match json::parse(&body, "topic creation") {
        Ok(r) => r,
        Err(p) => return p.into_response(),
    };
    let validate_only = req.validate_only.unwrap_or(false);
    let spec = NewTopicSpec {
        name: req.name.clone(),
        num_partitions: req.partitions.unwrap_or(-1),
        replication_factor: req.replication_factor.unwrap_or(-1),
        configs: req.configs.unwrap_or_default(),
        ..NewTopicSpec::defaults()
    };
    let answer = match http
        .broker
        .admin()
        .create_topic(&caller, spec, validate_only)
        .await
    {
        Ok(created) if validate_only => {
            let validated = TopicValidated {
                name: req.name,
                partitions: created.num_partitions,
                replication_factor: created.replication_factor,
                validate_only: true,
            };
            Ok((StatusCode::OK, axum::Json(validated).into_response()))
        }
        // Created: a describe that fails now does not make it less so.
        Ok(_) => {
            let created = match describe(&http, &caller, &req.name).await {
                Ok(topic) => TopicCreated::Described(topic),
                Err(_) => TopicCreated::Named(TopicNamed { name: req.name }),
            };
            Ok((StatusCode::CREATED, axum::Json(created).into_response()))
        }
        Err(e) => Err(Problem::from(&e)),
    };
    match answer {
        Ok((status, body)) => (status, body).into_response(),
        Err(p) => p.into_response(),
    }
}

/// `DELETE /v1/topics/{topic}`.
#[utoipa::path(
    delete,
    path = "/v1/topics/{topic}",
    summary = "Delete a topic and its data",
    description = "As DeleteTopics; the archive's objects go after the lifecycle's grace period. Needs DELETE on the topic; audited (`topic.delete`).",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')")),
    responses(
        (status = 200, description = "The topic is deleted", body = TopicDeleted),
        super::openapi::ChangeTopicProblems,
    ),
)]
pub async fn delete_topic(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    topic: Extracted<String>,
) -> Response {
    let caller = caller(&extensions);
    let topic = match topic {
        Ok(t) => t.0,
        Err(e) => return Problem::from(e).into_response(),
    };
    let deleted = http
        .broker
        .admin()
        .delete_topic(&caller, Some(&topic), &[0; 16])
        .await;
    match deleted {
        Ok((deleted, _)) => axum::Json(TopicDeleted { deleted }).into_response(),
        Err(AdminError::UnknownTopic(_)) => unknown_topic(&topic).into_response(),
        Err(e) => Problem::from(&e).into_response(),
    }
}

/// At least one config to set or delete; `set` wins over `delete` for a config in both.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AlterConfigsRequest)]
pub(crate) struct AlterConfigs {
    /// Configs to give these values
    #[serde(default)]
    #[schema(schema_with = super::openapi::topic_configs)]
    pub(crate) set: BTreeMap<String, String>,
    /// Configs to return to their defaults
    #[serde(default)]
    #[schema(schema_with = super::openapi::topic_config_names)]
    pub(crate) delete: Vec<String>,
    /// Check the change, store nothing
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) validate_only: Option<bool>,
}

/// `PATCH /v1/topics/{topic}/configs`: `{"set": {name: value}, "delete": [name]}`, as
/// IncrementalAlterConfigs (SET and DELETE); the others keep their values.
#[utoipa::path(
    patch,
    path = "/v1/topics/{topic}/configs",
    summary = "Set or remove topic configs",
    description = "As IncrementalAlterConfigs with SET and DELETE: `set` gives configs their values, `delete` returns them to their defaults, and the others keep theirs. Needs ALTER_CONFIGS on the topic; audited (`topic.alter_configs`).",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')")),
    request_body = AlterConfigs,
    responses(
        (status = 200, description = "The configs the topic now sets (or, with `validate_only`, would set)", body = TopicConfigs),
        super::openapi::AlterConfigsProblems,
    ),
)]
pub async fn alter_configs(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    topic: Extracted<String>,
    body: Body,
) -> Response {
    let caller = caller(&extensions);
    let (topic, body) = match extract(topic, body) {
        Ok(parts) => parts,
        Err(p) => return p.into_response(),
    };
    let req: AlterConfigs = match json::parse(&body, "config change") {
        Ok(r) => r,
        Err(p) => return p.into_response(),
    };
    if req.set.is_empty() && req.delete.is_empty() {
        return Problem::bad_request("nothing to change: give \"set\" or \"delete\"")
            .into_response();
    }
    let ops: Vec<(String, Op)> = req
        .delete
        .into_iter()
        .map(|name| (name, Op::Delete))
        .chain(req.set.into_iter().map(|(k, v)| (k, Op::Set(v))))
        .collect();
    let altered = http
        .broker
        .configs()
        .alter(
            &caller,
            &Resource::Topic(topic.clone()),
            ops,
            req.validate_only.unwrap_or(false),
        )
        .await;
    match altered {
        Ok(configs) => axum::Json(TopicConfigs {
            name: topic,
            configs: configs.unwrap_or_default(),
        })
        .into_response(),
        Err(ConfigError::UnknownTopic(_)) => unknown_topic(&topic).into_response(),
        Err(e) => Problem::from(&e).into_response(),
    }
}

/// The new number of partitions.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AddPartitionsRequest)]
pub(crate) struct AddPartitions {
    /// The new number of partitions, above the current one
    #[serde(deserialize_with = "json::opt", default)]
    #[schema(required = true, value_type = i32, minimum = 1, maximum = 10000)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) count: Option<i32>,
    /// Check the request, add nothing
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) validate_only: Option<bool>,
}

/// `POST /v1/topics/{topic}/partitions`: `{"count": n}`, the new total, as
/// CreatePartitions.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/partitions",
    summary = "Grow a topic to `count` partitions",
    description = "As CreatePartitions: `count` is the new total, above the current one. Needs ALTER on the topic; audited (`topic.add_partitions`).",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')")),
    request_body = AddPartitions,
    responses(
        (status = 200, description = "The topic has (or, with `validate_only`, would have) `partitions` partitions", body = PartitionsAdded),
        super::openapi::AddPartitionsProblems,
    ),
)]
pub async fn add_partitions(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    topic: Extracted<String>,
    body: Body,
) -> Response {
    let caller = caller(&extensions);
    let (topic, body) = match extract(topic, body) {
        Ok(parts) => parts,
        Err(p) => return p.into_response(),
    };
    let req: AddPartitions = match json::parse(&body, "partition increase") {
        Ok(r) => r,
        Err(p) => return p.into_response(),
    };
    let Some(count) = req.count else {
        return Problem::bad_request("\"count\" (the new number of partitions) is required")
            .into_response();
    };
    let validate_only = req.validate_only.unwrap_or(false);
    let grown = http
        .broker
        .admin()
        .create_partitions(&caller, &topic, count, None, validate_only)
        .await;
    match grown {
        Ok(()) => axum::Json(PartitionsAdded {
            name: topic,
            partitions: count,
            validate_only,
        })
        .into_response(),
        Err(e) => Problem::from(&e).into_response(),
    }
}

#[utoipa::path(
    get,
    path = "/v1/groups",
    summary = "Every consumer group of every live agent",
    description = "ListGroups to every live agent's coordinator, showing the groups the caller may describe; agents that do not answer are listed in `unreachable`.",
    responses(
        (status = 200, description = "The groups", body = GroupList),
        super::openapi::CallerProblems,
    ),
)]
pub async fn list_groups(State(http): State<Arc<HttpApi>>, extensions: Extensions) -> Response {
    let who = caller(&extensions);
    // Every agent's groups, as the group service shows them to the caller.
    let (listed, failed) = http.broker.groups().list_everywhere(&who).await;
    // By id: a group listed by two agents (one that lost it a moment ago) once.
    let groups: BTreeMap<String, GroupSummary> = listed
        .into_iter()
        .map(|(id, protocol_type, state, node_id)| {
            let entry = GroupSummary {
                group_id: id.clone(),
                protocol_type,
                state: state.to_string(),
                coordinator: node_id,
            };
            (id, entry)
        })
        .collect();
    let unreachable = failed
        .into_iter()
        .map(|(node_id, e)| {
            let error = match &e {
                crate::error::Error::Unreachable { why, .. } => why.clone(),
                other => other.kafka_name(),
            };
            Unreachable { node_id, error }
        })
        .collect();
    axum::Json(GroupList {
        groups: groups.into_values().collect(),
        unreachable,
    })
    .into_response()
}

fn check_group(group: &str) -> Result<(), Problem> {
    if group.is_empty() {
        return Err(Problem::from(GroupError::InvalidGroupId).detail("the group id is empty"));
    }
    Ok(())
}

/// The coordinator of `group`, when it is not this agent.
fn coordinator_elsewhere(
    http: &HttpApi,
    group: &str,
) -> Option<crate::service::agents::AgentRecord> {
    let membership = http.broker.membership();
    (!membership.coordinates(http.broker.node_id(), group))
        .then(|| membership.coordinator_of(group))
}

/// `GET /v1/groups/{group}`: state, members and their assignments, and per partition
/// the committed offset, the high watermark and the lag between them.
#[utoipa::path(
    get,
    path = "/v1/groups/{group}",
    summary = "Describe a group, with its lag",
    description = "State, members and their assignments, and for every partition with a committed offset or assigned to a member: the offset, its metadata, the partition's high watermark, the lag between them and the member that owns the partition. Served by the group's coordinator. Needs DESCRIBE on the group.",
    params(("group" = String, Path, min_length = 1, description = "The consumer group's id")),
    responses(
        (status = 200, description = "The group", body = Group),
        super::openapi::CoordinatorRedirected,
        super::openapi::DescribeGroupProblems,
    ),
)]
pub async fn describe_group(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    group: Extracted<String>,
    uri: Uri,
) -> Response {
    let group = match group {
        Ok(g) => g.0,
        Err(e) => return Problem::from(e).into_response(),
    };
    if let Err(p) = check_group(&group) {
        return p.into_response();
    }
    if let Some(agent) = coordinator_elsewhere(&http, &group) {
        return redirect(&agent, &uri);
    }
    match describe_group_here(&http, &caller(&extensions), &group).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(p) => p.into_response(),
    }
}

async fn describe_group_here(http: &HttpApi, who: &Caller, group: &str) -> Result<Group, Problem> {
    let groups = http.broker.groups();
    let summary = groups.describe(who, group).await.map_err(Problem::from)?;
    let offsets = groups.committed(who, group).await.map_err(Problem::from)?;
    let Some(summary) = summary.or_else(|| {
        (!offsets.is_empty()).then(|| crate::group::GroupSummary {
            state: "Empty",
            protocol_type: "consumer".to_string(),
            protocol_name: String::new(),
            members: Vec::new(),
        })
    }) else {
        return Err(Problem::from(GroupError::GroupIdNotFound)
            .detail(format!("group {group:?} does not exist")));
    };
    let mut owner: HashMap<(String, i32), String> = HashMap::new();
    let members = summary
        .members
        .iter()
        .map(|m| {
            let assigned = crate::group::consumer_protocol::assigned_all(&m.assignment);
            for (t, ps) in &assigned {
                for p in ps {
                    owner.insert((t.clone(), *p), m.member_id.clone());
                }
            }
            GroupMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                assignment: assigned
                    .into_iter()
                    .map(|(topic, partitions)| TopicPartitions { topic, partitions })
                    .collect(),
            }
        })
        .collect();
    // The high watermark of every partition with a committed offset or assigned to a
    // member, one ListOffsets per topic.
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in offsets.keys().chain(owner.keys()) {
        let ps = by_topic.entry(t.as_str()).or_default();
        if !ps.contains(p) {
            ps.push(*p);
        }
    }
    let mut ends: HashMap<(String, i32), Result<i64, String>> = HashMap::new();
    for (t, ps) in &by_topic {
        match list_offsets(http, who, t, ps, -1).await {
            Ok(found) => {
                for (p, end) in found {
                    ends.insert((t.to_string(), p), end);
                }
            }
            // The caller may describe the group but not the topic: its lag is not told.
            Err(refused) => {
                let why = refused.kafka_error.unwrap_or(refused.detail);
                for p in ps {
                    ends.insert((t.to_string(), *p), Err(why.clone()));
                }
            }
        }
    }
    // Every partition with a committed offset, and every assigned one without (its
    // committed offset and lag null, as kafka-consumer-groups shows `-`: where its
    // member reads is the member's own), in topic and partition order.
    let mut rows: BTreeMap<(String, i32), Option<&crate::service::groups::CommittedOffset>> =
        offsets
            .iter()
            .map(|(k, committed)| (k.clone(), Some(committed)))
            .collect();
    for k in owner.keys() {
        rows.entry(k.clone()).or_insert(None);
    }
    let mut total_lag = 0i64;
    let partitions = rows
        .iter()
        .map(|((t, p), committed)| {
            let end = ends.get(&(t.clone(), *p)).cloned();
            let (high_watermark, lag) = match (end, committed) {
                (Some(Ok(end)), Some(committed)) => {
                    let lag = (end - committed.offset).max(0);
                    total_lag += lag;
                    (Some(OffsetOrError::Offset(end)), Some(lag))
                }
                (Some(Ok(end)), None) => (Some(OffsetOrError::Offset(end)), None),
                (Some(Err(error)), _) => (Some(OffsetOrError::Error { error }), None),
                (None, _) => (None, None),
            };
            GroupOffset {
                topic: t.clone(),
                partition: *p,
                committed_offset: committed.map(|c| c.offset),
                metadata: committed.and_then(|c| c.metadata.clone()),
                high_watermark,
                lag,
                member_id: owner.get(&(t.clone(), *p)).cloned(),
            }
        })
        .collect();
    Ok(Group {
        group_id: group.to_string(),
        state: summary.state.to_string(),
        protocol_type: summary.protocol_type,
        protocol: summary.protocol_name,
        coordinator: http.broker.node_id(),
        members,
        offsets: partitions,
        total_lag,
    })
}

/// `DELETE /v1/groups/{group}`: an empty group and its committed offsets.
#[utoipa::path(
    delete,
    path = "/v1/groups/{group}",
    summary = "Delete an empty group and its committed offsets",
    description = "As DeleteGroups: only a group without members. Served by the group's coordinator. Needs DELETE on the group; audited (`group.delete`).",
    params(("group" = String, Path, min_length = 1, description = "The consumer group's id")),
    responses(
        (status = 200, description = "The group is deleted", body = GroupDeleted),
        super::openapi::CoordinatorRedirected,
        super::openapi::DeleteGroupProblems,
    ),
)]
pub async fn delete_group(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    group: Extracted<String>,
    uri: Uri,
) -> Response {
    let caller = caller(&extensions);
    let group = match group {
        Ok(g) => g.0,
        Err(e) => return Problem::from(e).into_response(),
    };
    if let Err(p) = check_group(&group) {
        return p.into_response();
    }
    if let Some(agent) = coordinator_elsewhere(&http, &group) {
        return redirect(&agent, &uri);
    }
    match http.broker.groups().delete(&caller, &group).await {
        Ok(()) => axum::Json(GroupDeleted { deleted: group }).into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// Where to move a group's committed offsets of one topic. (Its schema is one object
/// per `to`, each with the field that `to` reads: [`super::openapi::reset_offsets`].)
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetOffsets {
    pub(crate) topic: String,
    /// `earliest`, `latest`, `offset` (with `offset`) or `timestamp` (with
    /// `timestamp_ms`).
    pub(crate) to: String,
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) offset: Option<serde_json::Number>,
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timestamp_ms: Option<serde_json::Number>,
    /// The partitions to move; all of the topic's when left out.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partitions: Option<Vec<serde_json::Number>>,
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dry_run: Option<bool>,
}

impl ResetOffsets {
    /// What the body asks, in the reset service's terms; a 400 for a `to` it does not
    /// know or without the field it reads.
    fn spec(self) -> Result<ResetSpec, Problem> {
        let to = self.to.as_str();
        let number = |n: &Option<serde_json::Number>, what: &str| {
            (n.as_ref().and_then(whole))
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    Problem::bad_request(format!(
                        "\"to\": {to:?} needs \"{what}\" (an integer, 0 or more)"
                    ))
                })
        };
        let target = match to {
            "earliest" => Target::Earliest,
            "latest" => Target::Latest,
            "offset" => Target::Offset(number(&self.offset, "offset")?),
            "timestamp" => Target::Timestamp(number(&self.timestamp_ms, "timestamp_ms")?),
            other => {
                return Err(Problem::bad_request(format!(
                    "\"to\" must be \"earliest\", \"latest\", \"offset\" or \"timestamp\", not {other:?}"
                )));
            }
        };
        let partitions = (self.partitions.as_ref())
            .map(|ps| {
                (ps.iter())
                    .map(|p| {
                        whole(p).ok_or_else(|| {
                            Problem::unknown_topic_or_partition(format!(
                                "partition {p} is not a partition number"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(ResetSpec {
            topic: self.topic,
            to: target,
            partitions,
            dry_run: self.dry_run.unwrap_or(false),
        })
    }
}

impl utoipa::PartialSchema for ResetOffsets {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        super::openapi::reset_offsets().into()
    }
}

impl utoipa::ToSchema for ResetOffsets {
    fn name() -> std::borrow::Cow<'static, str> {
        "ResetOffsetsRequest".into()
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        schemas.push(("TopicName".to_string(), super::openapi::topic_name().into()));
    }
}

/// `POST /v1/groups/{group}/offsets`: moves an inactive group's committed offsets of one
/// topic, as `kafka-consumer-groups.sh --reset-offsets` does: to the earliest or latest
/// offset, to an offset (kept within the log), or to the first offset at or after a
/// timestamp (replay). `dry_run` shows the plan without committing it.
#[utoipa::path(
    post,
    path = "/v1/groups/{group}/offsets",
    summary = "Reset or replay a group's committed offsets of one topic",
    description = "As `kafka-consumer-groups.sh --reset-offsets`: every partition of `topic` (or those in `partitions`) to the log start (`earliest`), the high watermark (`latest`), an `offset`, or the first offset at or after `timestamp_ms` (the high watermark when there is none). Targets are kept within [log start, high watermark]. Only while the group has no members (its consumers stopped). With `dry_run`, answers the plan and commits nothing. Served by the group's coordinator. Needs DESCRIBE on the group and the topic, and READ on both unless `dry_run`; audited (`group.reset_offsets`, `group.reset_offsets.dry_run`).",
    params(("group" = String, Path, min_length = 1, description = "The consumer group's id")),
    request_body = ResetOffsets,
    responses(
        (status = 200, description = "Each partition's previous and new offset (committed unless `dry_run`)", body = OffsetsReset),
        super::openapi::CoordinatorRedirected,
        super::openapi::ResetOffsetsProblems,
    ),
)]
pub async fn reset_offsets(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    group: Extracted<String>,
    uri: Uri,
    body: Body,
) -> Response {
    let who = caller(&extensions);
    let (group, body) = match extract(group, body) {
        Ok(parts) => parts,
        Err(p) => return p.into_response(),
    };
    if let Err(p) = check_group(&group) {
        return p.into_response();
    }
    if let Some(agent) = coordinator_elsewhere(&http, &group) {
        return redirect(&agent, &uri);
    }
    let spec =
        match json::parse::<ResetOffsets>(&body, "reset-offsets").and_then(ResetOffsets::spec) {
            Ok(s) => s,
            Err(p) => return p.into_response(),
        };
    let (topic, dry_run) = (spec.topic.clone(), spec.dry_run);
    match reset::reset_offsets(&http.broker.offsets_reset(), &who, &group, spec).await {
        Ok(partitions) => axum::Json(OffsetsReset {
            group_id: group,
            topic,
            dry_run,
            partitions,
        })
        .into_response(),
        Err(e) => reset_problem(e, &topic).into_response(),
    }
}

/// A reset's refusal as the HTTP API answers it.
fn reset_problem(e: ResetError, topic: &str) -> Problem {
    match e {
        ResetError::Group(e) => Problem::from(e),
        e @ ResetError::Live { .. } => {
            Problem::from(GroupError::NonEmptyGroup).detail(e.to_string())
        }
        ResetError::Topic(AdminError::UnknownTopic(_)) => unknown_topic(topic),
        ResetError::Topic(e) => Problem::from(&e),
        ResetError::Offsets(e) => Problem::from(&e),
        e @ ResetError::UnknownPartition { .. } => {
            Problem::unknown_topic_or_partition(e.to_string())
        }
        e @ ResetError::NoTarget { .. } => {
            Problem::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
    }
}

/// `GET /v1/cluster`: the cluster id, the controller and every live agent, with where
/// Kafka clients and HTTP clients reach it.
#[utoipa::path(
    get,
    path = "/v1/cluster",
    summary = "The cluster: its id, the controller and every live agent",
    responses(
        (status = 200, description = "The cluster", body = Cluster),
        super::openapi::CallerProblems,
    ),
)]
pub async fn cluster(State(http): State<Arc<HttpApi>>) -> Response {
    let membership = http.broker.membership();
    let agents = membership
        .live()
        .iter()
        .map(|a| LiveAgent {
            node_id: a.node_id,
            kafka: format!("{}:{}", a.host, a.port),
            http: super::cluster::http_address(a),
            rack: a.rack.clone(),
        })
        .collect();
    axum::Json(Cluster {
        cluster_id: http.broker.identity().cluster_id.clone(),
        controller: membership.controller_id(),
        node_id: http.broker.node_id(),
        version: crate::VERSION.to_string(),
        agents,
    })
    .into_response()
}
