//! The HTTP API beside the Kafka port: produce, consume and commit
//! (`/v1/topics/{topic}/…`, `docs/http.md`, described by `/v1/openapi.json`), and for
//! operators `/healthz` (the process is up),
//! `/metrics` (Prometheus),
//! `/readyz` (the Kafka listener accepts and the metastore answers), `/v1/tiering`
//! (archive progress), `/v1/partitions` (this agent's replicas: role, epoch,
//! offsets, and for leaders the ISR and each follower's progress) and
//! `/v1/compaction` (the data lifecycle of the partitions led here: log start, dirty
//! ratio, last and next pass, bytes reclaimed), `/v1/agents` (the agents: replicas,
//! leaderships, replacements pending, drains), and `/v1/transactions` (the
//! coordinator's transactions, those open on partitions led here, and the abort of a
//! hanging one: `docs/transactions.md`); `/v1/acls`, `/v1/users` and `/v1/quotas`
//! (ACL bindings, SCRAM users and client quotas: `http/security.rs`).

mod admin;
mod agents;
mod auth;
mod cluster;
mod consume;
mod json;
pub(crate) mod model;
mod openapi;
mod operate;
mod partitioner;
mod problem;
mod produce;
mod read;
mod security;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use tokio::net::TcpListener;

use crate::authz::{Operation, ResourceType};
use crate::broker::Broker;

/// What the produce, consume and commit endpoints share.
pub struct HttpApi {
    broker: Arc<Broker>,
    auth: auth::HttpAuth,
    remembered: produce::Remembered,
    consumers: consume::Consumers,
    /// What each route needs ([`table`]), by path and method.
    routes: std::collections::HashMap<(&'static str, &'static str), Needs>,
}

#[derive(Clone)]
struct Shared {
    broker: Arc<Broker>,
    api: Arc<HttpApi>,
}

impl FromRef<Shared> for Arc<Broker> {
    fn from_ref(s: &Shared) -> Arc<Broker> {
        Arc::clone(&s.broker)
    }
}

impl FromRef<Shared> for Arc<HttpApi> {
    fn from_ref(s: &Shared) -> Arc<HttpApi> {
        Arc::clone(&s.api)
    }
}

/// What a route needs of its caller before its handler runs. Every route names one:
/// the route table below is the only way a route is added, so none is unguarded by
/// omission ([`auth::guard`] refuses a route it has no entry for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing, not even credentials: liveness, readiness, metrics and the API's
    /// description (probes and scrapers carry none).
    Nothing,
    /// An authenticated caller, no ACL: what any Kafka client is shown (the cluster's
    /// agents, as Metadata and DescribeCluster show them).
    Caller,
    /// `operation` on the resource named by the path parameter (for the cluster, none):
    /// what the route's Kafka counterpart needs.
    On(Operation, ResourceType, &'static str),
    /// Checked by the handler, for the reason given: the resource is in the body, or
    /// a listing shows only what the caller may describe.
    InHandler(&'static str),
}

/// One route: method, path pattern and what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub needs: Needs,
}

type Handler = axum::routing::MethodRouter<Shared>;

/// Every route with its handler.
fn table() -> Vec<(Route, Handler)> {
    use Needs::{Caller, InHandler, Nothing, On};
    use Operation as O;
    use ResourceType as R;
    let route = |method, path, needs, handler| {
        (
            Route {
                method,
                path,
                needs,
            },
            handler,
        )
    };
    let topic = |op| On(op, R::Topic, "topic");
    let cluster = |op| On(op, R::Cluster, "");
    // ACLs, users and quotas: the security service decides (as for the Kafka APIs).
    const SECURITY: Needs =
        InHandler("the security service: DESCRIBE or ALTER (quotas: _CONFIGS) on the cluster");
    // Describing, deleting and moving the offsets of groups: the group service decides.
    const GROUPS: Needs = InHandler(
        "the group service: DESCRIBE or DELETE on the group; a reset DESCRIBE, then READ on the group and the topic",
    );
    // Creating, deleting and growing topics: the topic service decides.
    const TOPICS: Needs = InHandler(
        "the topic service: CREATE on the cluster or the topic, DELETE or ALTER on the topic",
    );
    vec![
        route("GET", "/healthz", Nothing, get(healthz)),
        route("GET", "/readyz", Nothing, get(readyz)),
        route("GET", "/metrics", Nothing, get(metrics)),
        route("GET", "/v1/openapi.json", Nothing, get(openapi)),
        route(
            "POST",
            "/v1/topics/{topic}/produce",
            InHandler("the produce service: WRITE on the topic (and CREATE to create it)"),
            post(produce::produce),
        ),
        route(
            "POST",
            "/v1/topics/{topic}/consume",
            InHandler("the fetch service: READ on the topic (then READ on the group)"),
            post(consume::consume),
        ),
        route(
            "POST",
            "/v1/topics/{topic}/read",
            InHandler("the fetch service: READ on the topic"),
            post(read::read_records),
        ),
        route(
            "POST",
            "/v1/topics/{topic}/commit",
            topic(O::Read),
            post(consume::commit),
        ),
        route(
            "DELETE",
            "/v1/consumers/{consumer_id}",
            InHandler("READ on the instance's group"),
            delete(consume::delete),
        ),
        route(
            "GET",
            "/v1/topics",
            InHandler("lists the topics the caller may describe"),
            get(admin::list_topics),
        ),
        route("POST", "/v1/topics", TOPICS, post(admin::create_topic)),
        route(
            "GET",
            "/v1/topics/{topic}",
            topic(O::Describe),
            get(admin::describe_topic),
        ),
        route(
            "DELETE",
            "/v1/topics/{topic}",
            TOPICS,
            delete(admin::delete_topic),
        ),
        route(
            "PATCH",
            "/v1/topics/{topic}/configs",
            InHandler("the config service: ALTER_CONFIGS on the topic"),
            patch(admin::alter_configs),
        ),
        route(
            "POST",
            "/v1/topics/{topic}/partitions",
            TOPICS,
            post(admin::add_partitions),
        ),
        route(
            "GET",
            "/v1/topics/{topic}/partitions/{partition}",
            topic(O::Describe),
            get(operate::inspect),
        ),
        route(
            "POST",
            "/v1/topics/{topic}/partitions/{partition}/disable",
            InHandler("the topic service: ALTER on the cluster"),
            post(operate::disable),
        ),
        route(
            "POST",
            "/v1/topics/{topic}/partitions/{partition}/enable",
            InHandler("the topic service: ALTER on the cluster"),
            post(operate::enable),
        ),
        route(
            "POST",
            "/v1/topics/{topic}/partitions/{partition}/tier",
            InHandler("the maintenance service: ALTER on the cluster"),
            post(operate::tier),
        ),
        route(
            "POST",
            "/v1/topics/{topic}/partitions/{partition}/verify",
            InHandler("the maintenance service: ALTER on the cluster"),
            post(operate::verify),
        ),
        route(
            "GET",
            "/v1/groups",
            InHandler("lists the groups the caller may describe"),
            get(admin::list_groups),
        ),
        route(
            "GET",
            "/v1/groups/{group}",
            GROUPS,
            get(admin::describe_group),
        ),
        route(
            "DELETE",
            "/v1/groups/{group}",
            GROUPS,
            delete(admin::delete_group),
        ),
        route(
            "POST",
            "/v1/groups/{group}/offsets",
            GROUPS,
            post(admin::reset_offsets),
        ),
        route(
            "GET",
            "/v1/audit",
            cluster(O::Describe),
            get(operate::audit),
        ),
        route("GET", "/v1/acls", SECURITY, get(security::list_acls)),
        route("POST", "/v1/acls", SECURITY, post(security::create_acls)),
        route(
            "DELETE",
            "/v1/acls",
            SECURITY,
            delete(security::delete_acls),
        ),
        route("GET", "/v1/users", SECURITY, get(security::list_users)),
        route("GET", "/v1/users/{user}", SECURITY, get(security::get_user)),
        route("PUT", "/v1/users/{user}", SECURITY, put(security::set_user)),
        route(
            "DELETE",
            "/v1/users/{user}",
            SECURITY,
            delete(security::delete_user),
        ),
        route("GET", "/v1/quotas", SECURITY, get(security::list_quotas)),
        route(
            "PATCH",
            "/v1/quotas",
            SECURITY,
            patch(security::alter_quotas),
        ),
        route("GET", "/v1/cluster", Caller, get(admin::cluster)),
        route(
            "GET",
            "/v1/cluster/health",
            cluster(O::Describe),
            get(agents::health),
        ),
        route("GET", "/v1/agents", cluster(O::Describe), get(agents::list)),
        route(
            "GET",
            "/v1/agents/{node_id}",
            cluster(O::Describe),
            get(agents::get),
        ),
        route(
            "POST",
            "/v1/agents/{node_id}/drain",
            InHandler("the agents service: ALTER on the cluster"),
            post(agents::drain),
        ),
        route(
            "DELETE",
            "/v1/agents/{node_id}/drain",
            InHandler("the agents service: ALTER on the cluster"),
            delete(agents::undrain),
        ),
        route("GET", "/v1/tiering", cluster(O::Describe), get(tiering)),
        route(
            "GET",
            "/v1/partitions",
            cluster(O::Describe),
            get(partitions),
        ),
        route(
            "GET",
            "/v1/compaction",
            cluster(O::Describe),
            get(compaction),
        ),
        route(
            "GET",
            "/v1/transactions",
            cluster(O::Describe),
            get(transactions),
        ),
        route(
            "POST",
            "/v1/transactions/abort",
            InHandler("the transaction service: ALTER on the cluster"),
            post(abort_transaction),
        ),
        route(
            "GET",
            "/v1/transactions/{id}",
            cluster(O::Describe),
            get(transaction),
        ),
    ]
}

/// Every route of the API and what it needs (the authorization tests walk them).
pub fn routes() -> Vec<Route> {
    table().into_iter().map(|(r, _)| r).collect()
}

pub fn router(broker: Arc<Broker>) -> Router {
    let table = table();
    let api = Arc::new(HttpApi {
        auth: http_auth(broker.settings()),
        remembered: produce::remembered(),
        consumers: consume::Consumers::default(),
        routes: table
            .iter()
            .map(|(r, _)| ((r.path, r.method), r.needs))
            .collect(),
        broker: Arc::clone(&broker),
    });
    let shared = Shared {
        broker: Arc::clone(&broker),
        api,
    };
    let mut router = Router::new();
    for (route, handler) in table {
        router = router.route(route.path, handler);
    }
    router
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            auth::guard,
        ))
        .fallback(not_found)
        .with_state(shared)
}

/// How HTTP callers authenticate, from the settings (checked at start).
fn http_auth(settings: &crate::config::Settings) -> auth::HttpAuth {
    let methods = settings.http_authentication_methods().unwrap_or_default();
    let bearer = if methods.iter().any(|m| m == "bearer") {
        match settings
            .oauth_settings()
            .and_then(|o| o.map(crate::sasl::oauth::Validator::load).transpose())
        {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "HTTP bearer tokens cannot be validated; they are refused");
                None
            }
        }
    } else {
        None
    };
    auth::HttpAuth::new(&methods, bearer)
}

/// The API's OpenAPI document (`http/openapi.rs`; `tests/clients/test_http_api.py` runs
/// schemathesis against it).
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    summary = "This document",
    responses((status = 200, description = "The OpenAPI document", body = Object, content_type = "application/json")),
)]
async fn openapi() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        openapi::text(),
    )
}

/// The process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    summary = "The process is up",
    responses((status = 200, description = "Up", body = String, content_type = "text/plain")),
)]
async fn healthz() -> &'static str {
    "ok\n"
}

/// Paths that are not served: a problem-details body naming the paths that are (from
/// the route table).
async fn not_found(
    State(http): State<Arc<HttpApi>>,
    uri: axum::http::Uri,
) -> impl axum::response::IntoResponse {
    let served: std::collections::BTreeSet<&str> = http.routes.keys().map(|(p, _)| *p).collect();
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Not Found",
        "status": 404,
        "detail": format!(
            "no endpoint at {}; served here: {} (docs/http.md)",
            uri.path(),
            served.into_iter().collect::<Vec<_>>().join(", ")
        ),
    });
    (
        StatusCode::NOT_FOUND,
        [(axum::http::header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
}

/// Ready while the agent is not shutting down and the metastore answers. The HTTP
/// listener starts after the Kafka listener, so it is never ready before Kafka is.
#[utoipa::path(
    get,
    path = "/readyz",
    summary = "The Kafka listener accepts and the metastore answers",
    responses(
        (status = 200, description = "Ready", body = String, content_type = "text/plain"),
        (status = 503, description = "Not ready, and why", body = String, content_type = "text/plain"),
    ),
)]
async fn readyz(State(broker): State<Arc<Broker>>) -> (StatusCode, String) {
    if broker.shutdown().is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n".to_string(),
        );
    }
    match broker.status().ready().await {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

/// Every series in Prometheus's text format (`observe.rs`, `docs/metrics.md`).
#[utoipa::path(
    get,
    path = "/metrics",
    summary = "Prometheus metrics (docs/metrics.md)",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")),
)]
async fn metrics(State(broker): State<Arc<Broker>>) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::observe::render(&broker).await,
    )
}

/// Tiering progress per partition: highest archived offset and lag in records.
#[utoipa::path(
    get,
    path = "/v1/tiering",
    summary = "Archive progress of the partitions this agent tiers",
    description = "For each partition this agent's tiering worker archives (those it leads): the last archived offset, the records not yet archived and, when they wait for the active segment to close, why. Needs DESCRIBE on the cluster.",
    responses(
        (status = 200, description = "Tiering progress", body = crate::service::status::TieringView),
        openapi::DescribeClusterProblems,
    ),
)]
async fn tiering(
    State(broker): State<Arc<Broker>>,
) -> axum::Json<crate::service::status::TieringView> {
    axum::Json(broker.status().tiering())
}

/// Retention and compaction on this agent.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct CompactionStatus {
    /// How often the lifecycle pass runs (`log_retention_check_interval_ms`)
    pub retention_check_interval_ms: u64,
    /// How long an archived object no manifest names is kept before it is deleted
    pub archive_gc_grace_ms: i64,
    /// What the last pass did to each partition led here
    pub partitions: Vec<crate::service::lifecycle::PartitionLifecycle>,
    pub note: String,
}

/// The data lifecycle of the partitions this agent leads, as of the last pass.
#[utoipa::path(
    get,
    path = "/v1/compaction",
    summary = "Retention and compaction of the partitions led here",
    description = "What the last lifecycle pass did to each partition this agent leads: its log start, when it ran and is due, the bytes reclaimed, and for compacted topics the dirty ratio and the records compacted away. Needs DESCRIBE on the cluster.",
    responses(
        (status = 200, description = "Lifecycle status", body = CompactionStatus),
        openapi::DescribeClusterProblems,
    ),
)]
async fn compaction(State(broker): State<Arc<Broker>>) -> axum::Json<CompactionStatus> {
    axum::Json(CompactionStatus {
        retention_check_interval_ms: broker.settings().log_retention_check_interval_ms,
        archive_gc_grace_ms: broker.settings().archive_gc_grace_ms,
        partitions: broker.lifecycle().status(),
        note: "dirty_ratio is shown for compacted topics (cleanup.policy=compact)".to_string(),
    })
}

/// This agent's replicas, leaders and followers, as each sees itself now.
#[utoipa::path(
    get,
    path = "/v1/partitions",
    summary = "This agent's replicas: role, epoch, offsets, ISR and follower progress",
    description = "Every replica on this agent as it sees itself now: a leader with its ISR and each follower's progress, a follower with its leader and, while it rebuilds, what it copied and what is left. Needs DESCRIBE on the cluster.",
    responses(
        (status = 200, description = "The replicas", body = crate::partition::ReplicaList),
        openapi::DescribeClusterProblems,
    ),
)]
async fn partitions(
    State(broker): State<Arc<Broker>>,
) -> axum::Json<crate::partition::ReplicaList> {
    axum::Json(broker.status().partitions())
}

fn transaction_of(id: &str, r: &crate::service::transactions::TxnRecord) -> model::Transaction {
    model::Transaction {
        transactional_id: id.to_string(),
        producer_id: r.producer_id,
        producer_epoch: r.producer_epoch,
        state: r.state.name().to_string(),
        timeout_ms: r.timeout_ms,
        start_ms: r.start_ms,
        last_update_ms: r.last_update_ms,
        coordinator_epoch: r.coordinator_epoch,
        transaction_version: r.version,
        partitions: (r.partitions.iter())
            .map(|(topic, partition)| model::PartitionRef {
                topic: topic.clone(),
                partition: *partition,
            })
            .collect(),
        groups: r.groups.iter().cloned().collect(),
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    problem::Problem::new(status, message).into_response()
}

/// Every transaction the metastore holds, and the transactions open on partitions led
/// here (`hanging`: the coordinator does not count the partition in an open
/// transaction of that producer, so no marker will come).
#[utoipa::path(
    get,
    path = "/v1/transactions",
    summary = "The coordinator's transactions and those open on partitions led here",
    description = "Every transactional id the metastore holds, with its transaction; and the transactions open on the partitions this agent leads, each marked `hanging` when the coordinator does not count the partition in an open transaction of that producer (so no marker will come: `POST /v1/transactions/abort` ends it; docs/transactions.md). Needs DESCRIBE on the cluster.",
    responses(
        (status = 200, description = "Transactions", body = model::TransactionList),
        openapi::DescribeClusterProblems,
    ),
)]
async fn transactions(State(broker): State<Arc<Broker>>) -> Response {
    let txns = broker.transactions();
    let records = match txns.list(false).await {
        Ok(r) => r,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let open = txns
        .open_on_partitions()
        .await
        .into_iter()
        .map(|o| model::OpenTransaction {
            topic: o.topic,
            partition: o.partition,
            producer_id: o.open.producer_id,
            producer_epoch: o.open.producer_epoch,
            first_offset: o.open.first_offset,
            last_timestamp_ms: o.open.last_timestamp_ms,
            hanging: o.hanging,
        })
        .collect();
    let transactions = (records.iter())
        .map(|(id, r)| transaction_of(id, r))
        .collect();
    axum::Json(model::TransactionList { transactions, open }).into_response()
}

#[utoipa::path(
    get,
    path = "/v1/transactions/{id}",
    summary = "One transactional id's transaction",
    description = "Needs DESCRIBE on the cluster.",
    params(("id" = String, Path, description = "The transactional id")),
    responses(
        (status = 200, description = "The transaction", body = model::Transaction),
        openapi::TransactionProblems,
    ),
)]
async fn transaction(
    State(broker): State<Arc<Broker>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    match broker.transactions().describe(&id, false).await {
        Ok(r) => axum::Json(transaction_of(&id, &r)).into_response(),
        Err(crate::txn::TxnError::TransactionalIdNotFound) => error(
            StatusCode::NOT_FOUND,
            format!("no transaction has the transactional id {id:?}"),
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// An operator's abort of a transaction open on a partition led here (KIP-664's
/// AbortTransaction).
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct AbortRequest {
    topic: String,
    #[serde(deserialize_with = "json::int")]
    #[schema(minimum = 0, maximum = 2147483647)]
    partition: i32,
    /// The producer whose transaction is open (`GET /v1/transactions`, `open`)
    #[serde(deserialize_with = "json::int")]
    #[schema(minimum = -9223372036854775808i64, maximum = 9223372036854775807i64)]
    producer_id: i64,
    #[serde(deserialize_with = "json::int")]
    #[schema(minimum = -32768, maximum = 32767)]
    producer_epoch: i16,
    /// The coordinator epoch the marker carries; by default the partition's last one,
    /// which it accepts
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = -2147483648, maximum = 2147483647)]
    coordinator_epoch: Option<i32>,
    /// Abort a transaction that is not hanging too (its coordinator counts the
    /// partition in it): its later writes would then commit without these
    #[serde(default)]
    force: Option<bool>,
}

/// Ends a transaction open on one partition led here with an abort marker. The
/// transaction service decides (ALTER on the cluster) and audits.
#[utoipa::path(
    post,
    path = "/v1/transactions/abort",
    summary = "Abort a hanging transaction on a partition led here (docs/transactions.md)",
    description = "Writes an abort marker for `producer_id`'s transaction open on the partition, which must be led by this agent. Only a hanging transaction (`GET /v1/transactions` marks them) unless `force`. Needs ALTER on the cluster; audited (`transaction.abort`).",
    request_body = AbortRequest,
    responses(
        (status = 200, description = "The abort marker is written", body = model::TransactionAborted),
        openapi::AbortProblems,
    ),
)]
async fn abort_transaction(
    State(broker): State<Arc<Broker>>,
    extensions: axum::http::Extensions,
    body: axum::body::Bytes,
) -> Response {
    let req: AbortRequest = match json::parse(&body, "transaction abort") {
        Ok(r) => r,
        Err(p) => return p.into_response(),
    };
    let who = admin::caller(&extensions);
    let aborted = broker
        .transacting()
        .abort_on_partition(
            &who,
            &req.topic,
            req.partition,
            req.producer_id,
            req.producer_epoch,
            req.coordinator_epoch,
            req.force.unwrap_or(false),
        )
        .await;
    use crate::service::transactions::AbortError;
    match aborted {
        Ok(marker_offset) => {
            axum::Json(model::TransactionAborted { marker_offset }).into_response()
        }
        Err(AbortError::NotFound(why)) => error(StatusCode::NOT_FOUND, why),
        Err(AbortError::NotHanging(why)) => error(StatusCode::CONFLICT, why),
        // This agent no longer leads the partition: asking it again cannot succeed.
        Err(AbortError::Refused(e)) if e.is_not_leader() => {
            error(StatusCode::MISDIRECTED_REQUEST, e.to_string())
        }
        // Otherwise 403 without ALTER on the cluster, 409 for a fenced producer or
        // coordinator epoch or a transaction in another state, 503 to retry.
        Err(AbortError::Refused(e)) => problem::Problem::from(&e).into_response(),
    }
}

pub async fn serve(listener: TcpListener, broker: Arc<Broker>) -> std::io::Result<()> {
    let shutdown = broker.shutdown().clone();
    axum::serve(
        listener,
        router(broker).into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move { shutdown.cancelled().await })
    .await
}
