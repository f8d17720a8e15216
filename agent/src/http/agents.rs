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

use axum::extract::State;
use axum::http::{Extensions, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::HttpApi;
use super::admin::caller;
use super::problem::Problem;
use crate::service::agents::{Agents, AgentsError};

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
pub async fn list(State(http): State<Arc<HttpApi>>) -> Response {
    match service(&http).list().await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// `GET /v1/cluster/health`.
pub async fn health(State(http): State<Arc<HttpApi>>) -> Response {
    match service(&http).health().await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// `GET /v1/agents/{node_id}`.
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
        Ok(was) => axum::Json(json!({ "node_id": n, "draining": false, "was_draining": was }))
            .into_response(),
        Err(e) => Problem::from(e).into_response(),
    }
}
