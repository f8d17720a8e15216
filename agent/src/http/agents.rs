//! The agents of the cluster (`docs/cluster.md`, "Replacing, draining and balancing"):
//!
//! - `GET /v1/agents`: every agent the metastore knows of, live or gone, with its
//!   replicas and leaderships, replacements pending (and when they are due), drains in
//!   progress, and what the controller is moving;
//! - `GET /v1/agents/{node_id}`: one of them;
//! - `POST /v1/agents/{node_id}/drain`: moves the agent's leaderships and then its
//!   replicas away (202; poll the agent until `drain.safe_to_stop`);
//! - `DELETE /v1/agents/{node_id}/drain`: stops draining it;
//! - `GET /v1/cluster/health`: the cluster at a glance (agents, partitions offline or
//!   under-replicated, repairs under way).
//!
//! Drains are audited; they need ALTER on the cluster, the views DESCRIBE.

use std::sync::Arc;

use super::HttpApi;
use super::admin::caller;
use super::model::Undrained;
use super::openapi::{AgentProblems, DescribeClusterProblems, DrainProblems};
use super::problem::Problem;
use crate::service::agents::{AgentView, Agents, AgentsError, ClusterAgents, ClusterHealth};
use axum::extract::State;
use axum::http::{Extensions, StatusCode};
use axum::response::{IntoResponse, Response};

type NodePath = Result<axum::extract::Path<i32>, axum::extract::rejection::PathRejection>;

fn service(http: &HttpApi) -> Agents<'_> {
    http.broker.agents()
}

impl From<AgentsError> for Problem {
    fn from(e: AgentsError) -> Problem {
        match e {
            AgentsError::Denied(e) => Problem::from(&e),
            AgentsError::UnknownAgent(_) => Problem::new(StatusCode::NOT_FOUND, e.to_string()),
            AgentsError::Metastore(e) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot read the metastore: {e}"),
            ),
        }
    }
}

fn node(p: NodePath) -> Result<i32, Problem> {
    p.map(|p| p.0).map_err(Problem::from)
}

/// `GET /v1/agents`.
#[utoipa::path(
    get,
    path = "/v1/agents",
    summary = "Every agent: replicas, leaderships, replacements pending, drains",
    description = "Every agent the metastore knows of, live or gone (an agent that left keeps its record, with when it left). For each: its replicas, leaderships and preferred leaderships, partitions moving to or from it, replicas waiting for `replica_replacement_delay_ms` before they are replaced (and when the first is due), and a drain in progress with what it still holds and whether it is safe to stop. Any agent answers, from the metastore. Needs DESCRIBE on the cluster.",
    responses(
        (status = 200, description = "The agents", body = ClusterAgents),
        DescribeClusterProblems,
    ),
)]
pub async fn list(State(http): State<Arc<HttpApi>>) -> Response {
    match service(&http).list().await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// `GET /v1/cluster/health`.
#[utoipa::path(
    get,
    path = "/v1/cluster/health",
    summary = "What needs attention: agents gone, partitions offline or under-replicated, repairs under way",
    description = "Needs DESCRIBE on the cluster. `healthy` is false when a partition is offline (no live leader) or under-replicated (an ISR smaller than its replicas), or a gone agent holds replicas; `problems` says why, one line each. Any agent answers, from the metastore.",
    responses(
        (status = 200, description = "The cluster's health", body = ClusterHealth),
        DescribeClusterProblems,
    ),
)]
pub async fn health(State(http): State<Arc<HttpApi>>) -> Response {
    match service(&http).health().await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// `GET /v1/agents/{node_id}`.
#[utoipa::path(
    get,
    path = "/v1/agents/{node_id}",
    summary = "One agent",
    description = "Needs DESCRIBE on the cluster.",
    params(("node_id" = i32, Path, minimum = -2147483648, maximum = 2147483647, description = "The agent's node id")),
    responses(
        (status = 200, description = "The agent", body = AgentView),
        AgentProblems,
    ),
)]
pub async fn get(State(http): State<Arc<HttpApi>>, p: NodePath) -> Response {
    let outcome = match node(p) {
        Ok(n) => service(&http).get(n).await.map_err(Problem::from),
        Err(p) => Err(p),
    };
    match outcome {
        Ok(v) => axum::Json(v).into_response(),
        Err(p) => p.into_response(),
    }
}

/// `POST /v1/agents/{node_id}/drain`: the agents service decides (ALTER on the
/// cluster) and audits.
#[utoipa::path(
    post,
    path = "/v1/agents/{node_id}/drain",
    summary = "Drain an agent: move its leaderships, then its replicas, elsewhere",
    description = "Records a drain in the metastore for the agent registered under the node id now (a new disk under the same node id is not drained). The controller moves its leaderships to other in-sync replicas and its replicas to other agents, at most `replica_moves_max` partitions at once, and gives it no new replicas or leaderships. Poll `GET /v1/agents/{node_id}` until `drain.safe_to_stop`, then stop it. Idempotent. Needs ALTER on the cluster; audited (`agent.drain`).",
    params(("node_id" = i32, Path, minimum = -2147483648, maximum = 2147483647, description = "The agent's node id")),
    responses(
        (status = 202, description = "The drain is recorded; the agent as it stands", body = AgentView),
        DrainProblems,
    ),
)]
pub async fn drain(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    p: NodePath,
) -> Response {
    let n = match node(p) {
        Ok(n) => n,
        Err(p) => return p.into_response(),
    };
    match service(&http).drain(&caller(&extensions), n).await {
        Ok(v) => (StatusCode::ACCEPTED, axum::Json(v)).into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// `DELETE /v1/agents/{node_id}/drain`: the agents service decides (ALTER on the
/// cluster) and audits.
#[utoipa::path(
    delete,
    path = "/v1/agents/{node_id}/drain",
    summary = "Stop draining an agent",
    description = "Removes the drain: the agent takes replicas and leaderships again (balancing may move some back). Needs ALTER on the cluster; audited (`agent.undrain`).",
    params(("node_id" = i32, Path, minimum = -2147483648, maximum = 2147483647, description = "The agent's node id")),
    responses(
        (status = 200, description = "No drain is in force now", body = Undrained),
        DrainProblems,
    ),
)]
pub async fn undrain(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    p: NodePath,
) -> Response {
    let n = match node(p) {
        Ok(n) => n,
        Err(p) => return p.into_response(),
    };
    match service(&http).undrain(&caller(&extensions), n).await {
        Ok(was) => axum::Json(Undrained {
            node_id: n,
            draining: false,
            was_draining: was,
        })
        .into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}
