//! HTTP consumers: members of a consumer group that strata runs on a client's behalf.
//!
//! A `POST /v1/topics/{topic}/consume` runs on a consumer instance on the group's
//! coordinator: a member of the group as any other (protocol type `consumer`, the
//! `range` assignor, so Kafka consumers can share the group). A call that names only
//! the `group_id` uses the caller's *implicit* instance: one per group, topic and
//! principal, created by the first such call and found again by the next ones, so a
//! client that knows nothing but its group reads on where its last call stopped, and
//! commits with `POST /v1/topics/{topic}/commit` naming only the group too. A call with
//! `"new_consumer": true` creates another instance, and calls naming its `consumer_id`
//! use it: several members for one caller. strata heartbeats for every instance and
//! rejoins on a rebalance, and after [`INSTANCE_TIMEOUT`] without a call the instance
//! leaves the group. Positions start at the group's committed offsets (else
//! `auto_offset_reset`, `earliest` by default: see `docs/http.md`) and advance with
//! every answer; they are committed only by a commit, and a rebalance goes back to the
//! committed offsets (at least once, as an eager Kafka consumer).
//!
//! Requests that reach another agent are redirected (307) to the coordinator, or, for
//! a `consumer_id`, to the agent that runs it (its id starts with that agent's node id).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{Extensions, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use super::HttpApi;
use super::cluster::redirect;
use super::json::{self, whole};
use super::model::{
    CommitResponse, ConsumeResponse, ConsumedHeader, ConsumedMessage, Encoding, IsolationLevel,
};
use super::problem::{Body, Extracted, Problem, extract};
use crate::caller::Caller;
use crate::error::Error;
use crate::group::GroupError;
use crate::group::consumer_protocol::{ASSIGNOR, assigned, subscription};
use crate::group::state::{JoinRequest, Leaving};
use crate::partition::Offsets;
use crate::service::fetch::{Asked, Message, Permit, Reader};
use crate::service::groups::Member as GroupMember;

/// An instance without calls for this long leaves its group.
pub const INSTANCE_TIMEOUT: Duration = Duration::from_secs(300);
const SESSION_TIMEOUT_MS: i64 = 10_000;
const REBALANCE_TIMEOUT_MS: i64 = 30_000;
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
const DEFAULT_MAX_MESSAGES: usize = 100;
const MAX_MESSAGES: usize = 10_000;
const DEFAULT_TIMEOUT_MS: u64 = 1_000;
const MAX_TIMEOUT_MS: u64 = 30_000;
/// Bytes read per partition per pass.
const PARTITION_READ_BYTES: usize = 1024 * 1024;
/// The longest a remote leader is asked to hold a fetch (under the connection's
/// response timeout).
const REMOTE_WAIT: Duration = Duration::from_secs(5);

pub(super) use super::model::Reset;

/// The instance's place in its group, as the last rebalance left it.
#[derive(Debug, Clone)]
struct Member {
    member_id: String,
    generation: i32,
    assignment: Vec<i32>,
}

/// One HTTP consumer.
pub struct Instance {
    id: String,
    /// Who created it: the group service decides its joins, heartbeats and commits by
    /// this caller's ACLs, as a Kafka consumer's are decided by its connection's.
    owner: Caller,
    group: String,
    topic: String,
    reset: Reset,
    read_committed: bool,
    member: Mutex<Option<Member>>,
    /// Next offset per partition, for the generation they were set in.
    positions: tokio::sync::Mutex<(i32, HashMap<i32, i64>)>,
    rebalanced: Notify,
    last_used_ms: AtomicI64,
    gone: CancellationToken,
}

impl Instance {
    fn member(&self) -> Option<Member> {
        self.member
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn touch(&self) {
        self.last_used_ms
            .store(crate::clock::now_ms(), Ordering::Relaxed);
    }
}

/// Whose implicit instance: the group, the topic and the caller's principal.
type ImplicitKey = (String, String, String);

/// One caller's implicit instance: its id once made (it may have expired since). Locked
/// while it is found or made, so that two first calls at once make one, and a first
/// call joining a group holds up no other caller.
type ImplicitSlot = Arc<tokio::sync::Mutex<Option<String>>>;

/// The consumer instances on this agent.
#[derive(Default)]
pub struct Consumers {
    instances: Mutex<HashMap<String, Arc<Instance>>>,
    implicit: Mutex<HashMap<ImplicitKey, ImplicitSlot>>,
}

impl Consumers {
    /// The slot of the caller's implicit instance for `key` (made if it has none).
    fn implicit_slot(&self, key: ImplicitKey) -> ImplicitSlot {
        let mut implicit = self.implicit.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(implicit.entry(key).or_default())
    }

    /// The caller's live implicit instance, if it has one.
    async fn implicit(&self, key: &ImplicitKey) -> Option<Arc<Instance>> {
        let slot = self
            .implicit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()?;
        let id = slot.lock().await.clone()?;
        self.get(&id)
    }

    fn get(&self, id: &str) -> Option<Arc<Instance>> {
        self.instances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn remove(&self, id: &str) -> Option<Arc<Instance>> {
        self.instances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
    }
}

/// Messages to read as a member of `group_id`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ConsumeRequest)]
pub(crate) struct ConsumeBody {
    #[schema(min_length = 1)]
    pub(crate) group_id: String,
    /// An instance a consume with new_consumer answered; without it, the caller's
    /// implicit instance for the group and topic (created by the first such call)
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) consumer_id: Option<String>,
    /// Create another instance in the group rather than use the caller's implicit one;
    /// later calls name its consumer_id
    #[serde(default)]
    pub(crate) new_consumer: bool,
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = 1, maximum = 10000, default = 100)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_messages: Option<usize>,
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = 0, maximum = 30000, default = 1000)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
    /// Where the group starts on a partition without a committed offset (earliest by
    /// default)
    #[serde(default)]
    #[schema(value_type = Option<Reset>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) auto_offset_reset: Option<String>,
    /// read_uncommitted by default
    #[serde(default)]
    #[schema(value_type = Option<IsolationLevel>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) isolation_level: Option<String>,
    /// utf-8 by default
    #[serde(default)]
    #[schema(value_type = Option<Encoding>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) encoding: Option<String>,
}

/// Offsets to commit for `group_id`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CommitRequest)]
pub(crate) struct CommitBody {
    #[schema(min_length = 1)]
    pub(crate) group_id: String,
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) consumer_id: Option<String>,
    /// The generation the offsets were consumed in (a consume answers it); the
    /// instance's current one if absent.
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = -2147483648, maximum = 2147483647)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) generation_id: Option<i32>,
    /// Partition (as a string) to the next offset to read
    #[schema(schema_with = super::openapi::commit_offsets)]
    pub(crate) offsets: BTreeMap<String, serde_json::Number>,
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) metadata: Option<String>,
}

/// Consuming, committing and leaving need READ on the group (as JoinGroup and
/// OffsetCommit do); consuming READ on the topic too (the fetch service's permit), and
/// committing READ on the topic before the handler.
fn may_read_group(http: &HttpApi, extensions: &Extensions, group: &str) -> Result<(), Problem> {
    let principal = super::auth::authenticated(extensions);
    let host = super::auth::peer_of(extensions);
    super::auth::allowed(
        &http.broker,
        &principal,
        host,
        crate::authz::Operation::Read,
        crate::authz::ResourceType::Group,
        group,
    )
}

/// The fetch service's leave for the caller to read `topic` (READ on it), asked before
/// anything is said of the topic.
pub(super) fn read_permit(
    http: &HttpApi,
    extensions: &Extensions,
    topic: &str,
) -> Result<Permit, Problem> {
    http.broker
        .fetching()
        .permit(&super::admin::caller(extensions), Reader::Consumer, topic)
        .map_err(|e| Problem::from(&e))
}

fn check_group_id(group: &str) -> Result<(), Problem> {
    if group.is_empty() {
        return Err(Problem::from(GroupError::InvalidGroupId).detail("group_id must not be empty"));
    }
    Ok(())
}

/// The agent that must serve a request for `group` (or for instance `consumer_id`),
/// when it is not this one.
fn elsewhere(
    http: &HttpApi,
    group: &str,
    consumer_id: Option<&str>,
) -> Option<crate::service::agents::AgentRecord> {
    let membership = http.broker.membership();
    let node_id = http.broker.node_id();
    let owner = match consumer_id {
        Some(id) => id
            .split_once('-')
            .and_then(|(n, _)| n.parse::<i32>().ok())?,
        None => {
            return (!membership.coordinates(node_id, group))
                .then(|| membership.coordinator_of(group));
        }
    };
    if owner == node_id {
        return None;
    }
    membership.live().into_iter().find(|a| a.node_id == owner)
}

fn gone(id: &str) -> Problem {
    let mut problem = Problem::from(GroupError::UnknownMemberId).detail(format!(
            "no consumer instance {id:?} here: it expired after {} s without a call, was deleted, or its agent restarted; consume without consumer_id to create another",
            INSTANCE_TIMEOUT.as_secs()
        ));
    problem.status = StatusCode::NOT_FOUND;
    problem
}

#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/consume",
    summary = "Read messages as a member of a consumer group",
    description = "Without `consumer_id`, reads as the caller's implicit instance for the group and topic (created, and joined to `group_id`, by the first such call), so each call continues where the last one stopped; `new_consumer` creates another instance, whose `consumer_id` later calls name. Waits up to `timeout_ms` for a first message.",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')")),
    request_body = ConsumeBody,
    responses(
        (status = 200, description = "Messages from the instance's positions", body = ConsumeResponse),
        super::openapi::Redirected,
        super::openapi::GroupProblems,
    ),
)]
pub async fn consume(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    topic: Extracted<String>,
    uri: Uri,
    body: Body,
) -> Response {
    let (topic, body) = match extract(topic, body) {
        Ok(parts) => parts,
        Err(problem) => return problem.into_response(),
    };
    match consume_inner(&http, &extensions, &topic, &uri, &body).await {
        Ok(r) => r,
        Err(p) => p.into_response(),
    }
}

async fn consume_inner(
    http: &Arc<HttpApi>,
    extensions: &Extensions,
    topic: &str,
    uri: &Uri,
    body: &[u8],
) -> Result<Response, Problem> {
    // READ on the topic before anything else, then on the group.
    let permit = read_permit(http, extensions, topic)?;
    let body: ConsumeBody = json::parse(body, "consume")?;
    check_group_id(&body.group_id)?;
    may_read_group(http, extensions, &body.group_id)?;
    let limits = Limits::parse(
        body.max_messages,
        body.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
        body.isolation_level.as_deref(),
        body.encoding.as_deref(),
    )?;
    let (max_messages, timeout_ms, read_committed, encoding) = (
        limits.max_messages,
        limits.timeout_ms,
        limits.read_committed,
        limits.encoding,
    );
    let reset = Reset::parse("auto_offset_reset", body.auto_offset_reset.as_deref())?;
    if let Some(agent) = elsewhere(http, &body.group_id, body.consumer_id.as_deref()) {
        return Ok(redirect(&agent, uri));
    }
    if http.broker.fetching().partitions(topic).is_none() {
        return Err(Problem::unknown_topic_or_partition(format!(
            "topic {topic:?} does not exist"
        )));
    }
    let fresh = || {
        let owner = super::admin::caller(extensions);
        create(http, owner, &body.group_id, topic, reset, read_committed)
    };
    let instance = match &body.consumer_id {
        Some(id) => {
            let instance = http.consumers.get(id).ok_or_else(|| gone(id))?;
            if instance.group != body.group_id || instance.topic != topic {
                // The instance's state, not the request's shape, is in the way.
                return Err(Problem::new(
                    StatusCode::CONFLICT,
                    format!(
                        "consumer instance {id:?} consumes topic {:?} for group {:?}",
                        instance.topic, instance.group
                    ),
                ));
            }
            instance
        }
        None if body.new_consumer => fresh().await?,
        None => {
            let key = implicit_key(extensions, &body.group_id, topic);
            let slot = http.consumers.implicit_slot(key);
            let mut id = slot.lock().await;
            match id.as_deref().and_then(|id| http.consumers.get(id)) {
                Some(instance) => instance,
                None => {
                    let instance = fresh().await?;
                    *id = Some(instance.id.clone());
                    instance
                }
            }
        }
    };
    instance.touch();
    let deadline = crate::clock::instant() + Duration::from_millis(timeout_ms);
    let (messages, has_more) =
        poll(http, &permit, &instance, max_messages, encoding, deadline).await?;
    instance.touch();
    let member = instance.member();
    let answer = ConsumeResponse {
        consumer_id: instance.id.clone(),
        generation_id: member.as_ref().map_or(-1, |m| m.generation),
        assignment: member.map(|m| m.assignment).unwrap_or_default(),
        messages,
        has_more,
    };
    Ok(throttled_answer(http, extensions, json::text(&answer)).await)
}

/// Messages read: the answer counts against the caller's consumer_byte_rate, and waits
/// out any throttle (its messages are delivered: the positions have moved past them).
pub(super) async fn throttled_answer(
    http: &HttpApi,
    extensions: &Extensions,
    answer: String,
) -> Response {
    let throttle = crate::quota::edge::http_throttle(
        http.broker.quotas(),
        crate::quota::QuotaKind::Fetch,
        &super::auth::authenticated(extensions).name,
        answer.len(),
    );
    if !throttle.is_zero() {
        crate::clock::pause(throttle).await;
    }
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer,
    )
        .into_response()
}

/// What a read asks, checked: how many messages, how long to wait for a first one,
/// which isolation, which encoding.
pub(super) struct Limits {
    pub(super) max_messages: usize,
    pub(super) timeout_ms: u64,
    pub(super) read_committed: bool,
    pub(super) encoding: Encoding,
}

impl Limits {
    pub(super) fn parse(
        max_messages: Option<usize>,
        timeout_ms: u64,
        isolation_level: Option<&str>,
        encoding: Option<&str>,
    ) -> Result<Limits, Problem> {
        let max_messages = max_messages.unwrap_or(DEFAULT_MAX_MESSAGES);
        if max_messages == 0 || max_messages > MAX_MESSAGES {
            return Err(Problem::bad_request(format!(
                "max_messages must be 1 to {MAX_MESSAGES}, not {max_messages}"
            )));
        }
        if timeout_ms > MAX_TIMEOUT_MS {
            return Err(Problem::bad_request(format!(
                "timeout_ms must be 0 to {MAX_TIMEOUT_MS}, not {timeout_ms}"
            )));
        }
        let isolation = match isolation_level {
            None | Some("read_uncommitted") => IsolationLevel::ReadUncommitted,
            Some("read_committed") => IsolationLevel::ReadCommitted,
            Some(other) => {
                return Err(Problem::bad_request(format!(
                    "isolation_level must be \"read_uncommitted\" or \"read_committed\", not {other:?}"
                )));
            }
        };
        Ok(Limits {
            max_messages,
            timeout_ms,
            read_committed: isolation == IsolationLevel::ReadCommitted,
            encoding: Encoding::parse(encoding)?,
        })
    }
}

impl Reset {
    /// `field` (`auto_offset_reset`, `from`): `earliest` (the default) or `latest`.
    pub(super) fn parse(field: &str, value: Option<&str>) -> Result<Reset, Problem> {
        match value {
            None | Some("earliest") => Ok(Reset::Earliest),
            Some("latest") => Ok(Reset::Latest),
            Some(other) => Err(Problem::bad_request(format!(
                "{field} must be \"earliest\" or \"latest\", not {other:?}"
            ))),
        }
    }
}

fn implicit_key(extensions: &Extensions, group: &str, topic: &str) -> ImplicitKey {
    (
        group.to_string(),
        topic.to_string(),
        super::auth::authenticated(extensions).to_string(),
    )
}

async fn create(
    http: &Arc<HttpApi>,
    owner: Caller,
    group: &str,
    topic: &str,
    reset: Reset,
    read_committed: bool,
) -> Result<Arc<Instance>, Problem> {
    let id = format!(
        "{}-{}",
        http.broker.node_id(),
        uuid::Uuid::new_v4().simple()
    );
    let instance = Arc::new(Instance {
        id: id.clone(),
        owner,
        group: group.to_string(),
        topic: topic.to_string(),
        reset,
        read_committed,
        member: Mutex::new(None),
        positions: tokio::sync::Mutex::new((-1, HashMap::new())),
        rebalanced: Notify::new(),
        last_used_ms: AtomicI64::new(crate::clock::now_ms()),
        gone: http.broker.shutdown().child_token(),
    });
    join(http, &instance).await?;
    http.consumers
        .instances
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone(), Arc::clone(&instance));
    tracing::info!(group, topic, consumer = %id, "HTTP consumer joined its group");
    tokio::spawn(heartbeat(Arc::clone(http), Arc::clone(&instance)));
    Ok(instance)
}

/// Joins (or rejoins) the group and takes this member's assignment.
async fn join(http: &HttpApi, instance: &Instance) -> Result<(), Problem> {
    let groups = http.broker.groups();
    let mut member_id = instance.member().map(|m| m.member_id).unwrap_or_default();
    for _ in 0..5 {
        let joined = groups
            .join(
                &instance.owner,
                &instance.group,
                JoinRequest {
                    member_id: member_id.clone(),
                    group_instance_id: None,
                    client_id: "strata-http".to_string(),
                    client_host: "/127.0.0.1".to_string(),
                    session_timeout_ms: SESSION_TIMEOUT_MS,
                    rebalance_timeout_ms: REBALANCE_TIMEOUT_MS,
                    protocol_type: "consumer".to_string(),
                    protocols: vec![(ASSIGNOR.to_string(), subscription(&instance.topic))],
                    require_known_member_id: false,
                    fresh_member_id: format!("strata-http-{}", uuid::Uuid::new_v4()),
                },
            )
            .await;
        match joined.error {
            None => {}
            Some(GroupError::UnknownMemberId | GroupError::IllegalGeneration) => {
                member_id.clear();
                continue;
            }
            Some(GroupError::RebalanceInProgress) => continue,
            Some(e) => return Err(Problem::from(e)),
        }
        member_id = joined.member_id.clone();
        let assignments = if joined.leader == joined.member_id && !joined.skip_assignment {
            groups.range_assignment(&joined.members)
        } else {
            Vec::new()
        };
        let synced = groups
            .sync(
                &instance.owner,
                &instance.group,
                GroupMember {
                    member_id: &member_id,
                    group_instance_id: None,
                    generation_id: joined.generation_id,
                },
                Some("consumer"),
                joined.protocol_name.as_deref(),
                assignments,
            )
            .await;
        match synced.error {
            None => {}
            Some(GroupError::RebalanceInProgress) => continue,
            Some(GroupError::UnknownMemberId | GroupError::IllegalGeneration) => {
                member_id.clear();
                continue;
            }
            Some(e) => return Err(Problem::from(e)),
        }
        let assignment = assigned(&synced.assignment, &instance.topic);
        *instance.member.lock().unwrap_or_else(|p| p.into_inner()) = Some(Member {
            member_id: member_id.clone(),
            generation: joined.generation_id,
            assignment,
        });
        instance.rebalanced.notify_waiters();
        return Ok(());
    }
    Err(Problem::from(GroupError::RebalanceInProgress)
        .detail("the group kept rebalancing while the HTTP consumer joined; try again"))
}

/// Keeps the instance in its group until it is deleted, expires or fails.
async fn heartbeat(http: Arc<HttpApi>, instance: Arc<Instance>) {
    let groups = http.broker.groups();
    loop {
        tokio::select! {
            () = instance.gone.cancelled() => break,
            () = http.broker.membership().clock().sleep(HEARTBEAT_EVERY) => {}
        }
        let idle_ms = crate::clock::now_ms() - instance.last_used_ms.load(Ordering::Relaxed);
        if idle_ms > INSTANCE_TIMEOUT.as_millis() as i64 {
            tracing::info!(group = %instance.group, consumer = %instance.id, "HTTP consumer expired without calls; leaving its group");
            break;
        }
        let Some(member) = instance.member() else {
            break;
        };
        let beat = groups.heartbeat(
            &instance.owner,
            &instance.group,
            GroupMember {
                member_id: &member.member_id,
                group_instance_id: None,
                generation_id: member.generation,
            },
        );
        let rejoin = match beat {
            Ok(()) => false,
            Err(GroupError::RebalanceInProgress) => true,
            Err(GroupError::UnknownMemberId | GroupError::IllegalGeneration) => true,
            Err(e) => {
                tracing::info!(group = %instance.group, consumer = %instance.id, error = %e, "HTTP consumer lost its group");
                break;
            }
        };
        if rejoin && let Err(e) = join(&http, &instance).await {
            tracing::info!(group = %instance.group, consumer = %instance.id, error = %e.detail, "HTTP consumer could not rejoin its group");
            break;
        }
    }
    leave(&http, &instance);
}

fn leave(http: &HttpApi, instance: &Instance) {
    instance.gone.cancel();
    if http.consumers.remove(&instance.id).is_none() {
        return;
    }
    if let Some(member) = instance
        .member
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        let _ = http.broker.groups().leave(
            &instance.owner,
            &instance.group,
            &[Leaving {
                member_id: member.member_id,
                group_instance_id: None,
            }],
        );
    }
    instance.rebalanced.notify_waiters();
}

/// `DELETE /v1/consumers/{consumer_id}`: the instance leaves its group at once.
#[utoipa::path(
    delete,
    path = "/v1/consumers/{consumer_id}",
    summary = "Remove a consumer instance from its group",
    params(("consumer_id" = String, Path, description = "An instance a consume answered")),
    responses(
        (status = 204, description = "The instance left its group"),
        super::openapi::Redirected,
        super::openapi::LeaveProblems,
    ),
)]
pub async fn delete(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    Path(id): Path<String>,
    uri: Uri,
) -> Response {
    if let Some(agent) = elsewhere(&http, "", Some(&id)) {
        return redirect(&agent, &uri);
    }
    match http.consumers.get(&id) {
        None => gone(&id).into_response(),
        Some(instance) => {
            if let Err(denied) = may_read_group(&http, &extensions, &instance.group) {
                return denied.into_response();
            }
            leave(&http, &instance);
            tracing::info!(group = %instance.group, consumer = %id, "HTTP consumer deleted; left its group");
            StatusCode::NO_CONTENT.into_response()
        }
    }
}

/// What a read of one partition gave.
pub(super) struct Read {
    records: Bytes,
    pub(super) high_watermark: i64,
    /// `(producer id, first offset)` of aborted transactions in the records.
    aborted: Vec<(i64, i64)>,
}

/// Why a read gave nothing, with the partition's bounds where known.
pub(super) struct Unread {
    pub(super) error: Error,
    pub(super) high_watermark: i64,
    pub(super) log_start_offset: i64,
}

impl Unread {
    /// The offset read is outside the log (the bounds say where it is).
    pub(super) fn out_of_range(&self) -> bool {
        self.error.is_offset_out_of_range()
    }
}

/// Reads `partition` from `offset` at its leader (the fetch service's
/// [`read_at_leader`](crate::service::fetch::Fetching::read_at_leader)); locally, `watch`
/// is set to a receiver that changes when the partition's offsets do.
pub(super) async fn read(
    http: &HttpApi,
    permit: &Permit,
    partition: i32,
    offset: i64,
    read_committed: bool,
    remote_wait: Duration,
    watch: &mut Option<watch::Receiver<Offsets>>,
) -> Result<Read, Unread> {
    let read = http
        .broker
        .fetching()
        .read_at_leader(
            permit,
            partition,
            offset,
            Asked {
                max_bytes: PARTITION_READ_BYTES,
                read_committed,
                remote_wait,
            },
            watch,
        )
        .await;
    match read {
        Ok(r) => Ok(Read {
            records: r.records,
            high_watermark: r.high_watermark,
            aborted: r.aborted,
        }),
        Err(failed) => Err(Unread {
            error: failed.error,
            high_watermark: failed.high_watermark,
            log_start_offset: failed.log_start_offset,
        }),
    }
}

/// Where a partition without a committed offset starts.
async fn reset_position(
    http: &HttpApi,
    permit: &Permit,
    instance: &Instance,
    partition: i32,
) -> Option<i64> {
    start_at(http, permit, partition, instance.reset).await
}

/// A partition's log start (`Earliest`) or high watermark (`Latest`), asked of its
/// leader; `None` if it cannot be read.
pub(super) async fn start_at(
    http: &HttpApi,
    permit: &Permit,
    partition: i32,
    reset: Reset,
) -> Option<i64> {
    // A read past any log end answers OFFSET_OUT_OF_RANGE with both bounds.
    let mut watch = None;
    let bounds = match read(
        http,
        permit,
        partition,
        i64::MAX,
        false,
        Duration::ZERO,
        &mut watch,
    )
    .await
    {
        Ok(r) => (r.high_watermark, -1),
        Err(u) => (u.high_watermark, u.log_start_offset),
    };
    match reset {
        Reset::Latest => (bounds.0 >= 0).then_some(bounds.0),
        Reset::Earliest => (bounds.1 >= 0).then_some(bounds.1),
    }
}

/// Reads up to `max` messages from the instance's positions, waiting until `deadline`
/// for the first; answers them and whether more are already there.
async fn poll(
    http: &HttpApi,
    permit: &Permit,
    instance: &Instance,
    max: usize,
    encoding: Encoding,
    deadline: tokio::time::Instant,
) -> Result<(Vec<ConsumedMessage>, bool), Problem> {
    let mut positions = instance.positions.lock().await;
    loop {
        let rebalanced = instance.rebalanced.notified();
        tokio::pin!(rebalanced);
        rebalanced.as_mut().enable();
        let Some(member) = instance.member() else {
            return Err(gone(&instance.id));
        };
        if positions.0 != member.generation {
            *positions = (member.generation, HashMap::new());
        }
        let missing: Vec<i32> = member
            .assignment
            .iter()
            .copied()
            .filter(|p| !positions.1.contains_key(p))
            .collect();
        if !missing.is_empty() {
            let committed = http
                .broker
                .groups()
                .committed(&instance.owner, &instance.group)
                .await
                .map_err(Problem::from)?;
            for p in missing {
                let start = match committed.get(&(instance.topic.clone(), p)) {
                    Some(c) if c.offset >= 0 => Some(c.offset),
                    _ => reset_position(http, permit, instance, p).await,
                };
                if let Some(start) = start {
                    positions.1.insert(p, start);
                }
            }
        }
        // The assigned partitions' positions, in assignment order; written back after.
        let mut order: Vec<(i32, i64)> = member
            .assignment
            .iter()
            .filter_map(|p| positions.1.get(p).map(|o| (*p, *o)))
            .collect();
        let pass = read_pass(
            http,
            permit,
            &mut order,
            instance.read_committed,
            instance.reset,
            max,
            encoding,
        )
        .await;
        positions.1.extend(order);
        // A position was out of range: the caller reads on at once.
        let has_more = pass.has_more || pass.out_of_range;
        if !pass.messages.is_empty() || has_more || crate::clock::instant() >= deadline {
            return Ok((pass.messages, has_more));
        }
        // Nothing yet: wait for an append here, a remote leader's data, a rebalance or
        // the deadline, then read again.
        pass.wait(http, permit, instance.read_committed, deadline, rebalanced)
            .await;
    }
}

/// What one pass over a caller's positions read.
pub(super) struct Pass {
    pub(super) messages: Vec<ConsumedMessage>,
    /// More are already there: read again at once.
    pub(super) has_more: bool,
    /// A position was out of range (`moved`: and moved to where the reset said).
    pub(super) out_of_range: bool,
    pub(super) moved: bool,
    /// Receivers of the partitions read here, which change at an append.
    watches: Vec<watch::Receiver<Offsets>>,
    /// Positions read at other agents, for a long poll there.
    remote: Vec<(i32, i64)>,
}

/// Reads each partition once from its position (at most `max` messages in all), moving
/// each position past what it took; a position out of range moves to the log start or
/// the end, as `reset` says.
pub(super) async fn read_pass(
    http: &HttpApi,
    permit: &Permit,
    positions: &mut [(i32, i64)],
    read_committed: bool,
    reset: Reset,
    max: usize,
    encoding: Encoding,
) -> Pass {
    let topic = permit.topic();
    let mut pass = Pass {
        messages: Vec::new(),
        has_more: false,
        out_of_range: false,
        moved: false,
        watches: Vec::new(),
        remote: Vec::new(),
    };
    for (p, position) in positions.iter_mut() {
        let p = *p;
        if pass.messages.len() >= max {
            pass.has_more = true;
            break;
        }
        let mut watch = None;
        let room = max - pass.messages.len();
        match read(
            http,
            permit,
            p,
            *position,
            read_committed,
            Duration::ZERO,
            &mut watch,
        )
        .await
        {
            Ok(r) => {
                *position = take(&r, p, *position, room, encoding, &mut pass.messages);
                pass.has_more |= *position < r.high_watermark;
                match watch {
                    Some(w) => pass.watches.push(w),
                    None => pass.remote.push((p, *position)),
                }
            }
            Err(u) if u.out_of_range() => {
                let to = match reset {
                    Reset::Earliest => u.log_start_offset,
                    Reset::Latest => u.high_watermark,
                };
                tracing::info!(
                    topic,
                    partition = p,
                    position = *position,
                    to,
                    "HTTP read position is out of range; reset"
                );
                pass.out_of_range = true;
                if to >= 0 {
                    *position = to;
                    pass.moved = true;
                }
            }
            Err(u) => {
                tracing::debug!(topic, partition = p, error = %u.error, "HTTP read could not read a partition");
            }
        }
    }
    pass
}

impl Pass {
    /// Waits until an append here changes a partition read, a remote leader has data
    /// at a position read there, `also` completes, or `deadline` passes.
    pub(super) async fn wait(
        self,
        http: &HttpApi,
        permit: &Permit,
        read_committed: bool,
        deadline: tokio::time::Instant,
        also: impl std::future::Future<Output = ()> + Send,
    ) {
        let mut waits: Vec<futures::future::BoxFuture<'_, ()>> = Vec::new();
        for mut w in self.watches {
            waits.push(Box::pin(async move {
                let _ = w.changed().await;
            }));
        }
        let left = deadline.saturating_duration_since(crate::clock::instant());
        for (p, offset) in self.remote {
            let wait = left.min(REMOTE_WAIT);
            waits.push(Box::pin(async move {
                let mut none = None;
                let _ = read(http, permit, p, offset, read_committed, wait, &mut none).await;
            }));
        }
        waits.push(Box::pin(also));
        let _ = tokio::time::timeout_at(deadline, futures::future::select_all(waits)).await;
    }
}

/// Appends the records of `read` at or after `position` (at most `room`) to `out`; the
/// next position.
pub(super) fn take(
    read: &Read,
    partition: i32,
    position: i64,
    room: usize,
    encoding: Encoding,
    out: &mut Vec<ConsumedMessage>,
) -> i64 {
    let (messages, next) =
        crate::service::fetch::messages(&read.records, &read.aborted, position, room);
    out.extend(messages.iter().map(|m| consumed(partition, m, encoding)));
    next
}

fn consumed(partition: i32, m: &Message, encoding: Encoding) -> ConsumedMessage {
    // Text was asked for but some bytes are not UTF-8: the message is answered in
    // base64, and says so, rather than altered.
    let text = |b: &Option<Bytes>| b.as_ref().is_none_or(|b| std::str::from_utf8(b).is_ok());
    let encoding = if encoding == Encoding::Utf8
        && text(&m.key)
        && text(&m.value)
        && m.headers.iter().all(|h| text(&h.1))
    {
        Encoding::Utf8
    } else {
        Encoding::Base64
    };
    let field = |b: &Option<Bytes>| b.as_ref().map(|b| encoding.encode(b));
    ConsumedMessage {
        partition,
        offset: m.offset,
        timestamp: m.timestamp,
        key: field(&m.key),
        value: field(&m.value),
        headers: m
            .headers
            .iter()
            .map(|h| ConsumedHeader {
                key: h.0.clone(),
                value: field(&h.1),
            })
            .collect(),
        encoding,
    }
}

/// `POST /v1/topics/{topic}/commit`: `{"group_id", "offsets": {"2": 10543}}`, the next
/// offset to read per partition. With a `consumer_id`, under that instance's
/// generation (a stale one is refused, 409); without, as a client outside the group,
/// which Kafka allows only while the group has no members.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/commit",
    summary = "Commit a group's offsets",
    description = "Each offset is the next one to read, as in Kafka. With `consumer_id` under its generation (a stale `generation_id` is refused with 409); without, as the caller's implicit instance if it has one, else only while the group has no members.",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')")),
    request_body = CommitBody,
    responses(
        (status = 200, description = "The offsets committed", body = CommitResponse),
        super::openapi::Redirected,
        super::openapi::GroupProblems,
    ),
)]
pub async fn commit(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    topic: Extracted<String>,
    uri: Uri,
    body: Body,
) -> Response {
    let (topic, body) = match extract(topic, body) {
        Ok(parts) => parts,
        Err(problem) => return problem.into_response(),
    };
    match commit_inner(&http, &extensions, &topic, &uri, &body).await {
        Ok(r) => r,
        Err(p) => p.into_response(),
    }
}

async fn commit_inner(
    http: &HttpApi,
    extensions: &Extensions,
    topic: &str,
    uri: &Uri,
    body: &[u8],
) -> Result<Response, Problem> {
    let body: CommitBody = json::parse(body, "commit")?;
    check_group_id(&body.group_id)?;
    may_read_group(http, extensions, &body.group_id)?;
    if let Some(agent) = elsewhere(http, &body.group_id, body.consumer_id.as_deref()) {
        return Ok(redirect(&agent, uri));
    }
    let Some(count) = http.broker.fetching().partitions(topic) else {
        return Err(Problem::unknown_topic_or_partition(format!(
            "topic {topic:?} does not exist"
        )));
    };
    if body.offsets.is_empty() {
        return Err(Problem::bad_request("offsets is empty: nothing to commit"));
    }
    let now = crate::clock::now_ms();
    let mut offsets = Vec::with_capacity(body.offsets.len());
    let mut answered = BTreeMap::new();
    for (p, offset) in &body.offsets {
        let partition = p.parse::<i32>().ok().filter(|p| (0..count).contains(p));
        let Some(partition) = partition else {
            return Err(Problem::unknown_topic_or_partition(format!(
                "topic {topic} has {count} partitions; {p:?} is not one of them"
            )));
        };
        let Some(offset) = whole(offset).filter(|o| *o >= 0) else {
            return Err(Problem::bad_request(format!(
                "offset {offset} for partition {partition} is not an offset (an integer, 0 or more)"
            )));
        };
        answered.insert(partition.to_string(), offset);
        offsets.push((
            (topic.to_string(), partition),
            crate::service::groups::CommittedOffset {
                offset,
                leader_epoch: -1,
                metadata: body.metadata.clone(),
                commit_timestamp_ms: now,
            },
        ));
    }
    // Without a consumer_id: as the caller's implicit instance if it has one, else from
    // outside the group (refused while the group has members, as Kafka refuses it).
    let implicit = match &body.consumer_id {
        Some(_) => None,
        None => {
            http.consumers
                .implicit(&implicit_key(extensions, &body.group_id, topic))
                .await
        }
    };
    let (member_id, generation) = match body
        .consumer_id
        .as_ref()
        .or(implicit.as_ref().map(|i| &i.id))
    {
        None => (String::new(), -1),
        Some(id) => {
            let instance = http.consumers.get(id).ok_or_else(|| gone(id))?;
            if instance.group != body.group_id {
                return Err(Problem::new(
                    StatusCode::CONFLICT,
                    format!(
                        "consumer instance {id:?} is a member of group {:?}",
                        instance.group
                    ),
                ));
            }
            instance.touch();
            let member = instance.member().ok_or_else(|| gone(id))?;
            (
                member.member_id,
                body.generation_id.unwrap_or(member.generation),
            )
        }
    };
    let member = GroupMember {
        member_id: &member_id,
        group_instance_id: None,
        generation_id: generation,
    };
    let outcomes = http
        .broker
        .groups()
        .commit(
            &super::admin::caller(extensions),
            &body.group_id,
            member,
            offsets,
        )
        .await;
    if let Some(e) = outcomes.into_values().find_map(Result::err) {
        return Err(Problem::from(e));
    }
    Ok(axum::Json(CommitResponse {
        group_id: body.group_id,
        generation_id: generation,
        offsets: answered,
    })
    .into_response())
}
