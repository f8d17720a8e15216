//! The HTTP API beside the Kafka port. For now: `/healthz` (the process is up),
//! `/readyz` (the Kafka listener accepts and the metastore answers), `/v1/tiering`
//! (archive progress), `/v1/partitions` (this agent's replicas: role, epoch,
//! offsets, and for leaders the ISR and each follower's progress) and
//! `/v1/compaction` (the data lifecycle of the partitions led here: log start, dirty
//! ratio, last and next pass, bytes reclaimed).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::broker::Broker;

pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/v1/tiering", get(tiering))
        .route("/v1/partitions", get(partitions))
        .route("/v1/compaction", get(compaction))
        .with_state(broker)
}

/// Ready while the agent is not shutting down and the metastore answers. The HTTP
/// listener starts after the Kafka listener, so it is never ready before Kafka is.
async fn readyz(State(broker): State<Arc<Broker>>) -> (StatusCode, String) {
    if broker.shutdown().is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n".to_string(),
        );
    }
    match broker.metastore().cluster().await {
        Ok(_) => (StatusCode::OK, "ready\n".to_string()),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: metastore: {e}\n"),
        ),
    }
}

/// Tiering progress per partition: highest archived offset and lag in records.
async fn tiering(State(broker): State<Arc<Broker>>) -> axum::Json<serde_json::Value> {
    let reader = broker.replicas().archive();
    let archive = reader.archive().url.clone();
    let failures = reader.read_failures();
    axum::Json(match &broker.tiering() {
        Some(worker) => {
            let now = crate::clock::now_ms();
            let started = worker.pass_started_ms();
            serde_json::json!({
                "archive": archive,
                "partitions": worker.status(),
                // A pass running for long is stuck on the store (calls time out after 60 s).
                "pass_running_ms": started.map(|s| (now - s).max(0)),
                "archive_read_failures": failures,
            })
        }
        None => serde_json::json!({
            "archive": archive,
            "partitions": [],
            "archive_read_failures": failures,
            "note": "tiering runs in another process",
        }),
    })
}

/// The data lifecycle of the partitions this agent leads, as of the last pass.
async fn compaction(State(broker): State<Arc<Broker>>) -> axum::Json<serde_json::Value> {
    let lifecycle = broker.lifecycle();
    axum::Json(serde_json::json!({
        "retention_check_interval_ms": broker.settings().log_retention_check_interval_ms,
        "archive_gc_grace_ms": broker.settings().archive_gc_grace_ms,
        "partitions": lifecycle.status(),
        "note": "dirty_ratio is shown for compacted topics (cleanup.policy=compact); archived objects are not compacted (compacted topics are not tiered)",
    }))
}

/// This agent's replicas, leaders and followers, as each sees itself now.
async fn partitions(State(broker): State<Arc<Broker>>) -> axum::Json<serde_json::Value> {
    let now = crate::clock::now_ms();
    let replicas: Vec<_> = broker
        .replicas()
        .topics()
        .iter()
        .flat_map(|t| {
            t.local_partitions()
                .map(|p| p.status(now))
                .collect::<Vec<_>>()
        })
        .collect();
    axum::Json(serde_json::json!({ "node_id": broker.node_id(), "partitions": replicas }))
}

pub async fn serve(listener: TcpListener, broker: Arc<Broker>) -> std::io::Result<()> {
    let shutdown = broker.shutdown().clone();
    axum::serve(listener, router(broker))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
