//! The HTTP API beside the Kafka port. For now: `/healthz` (the process is up) and
//! `/readyz` (the Kafka listener accepts and the metastore answers).

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
        .with_state(broker)
}

/// Ready while the agent is not shutting down and the metastore answers. The HTTP
/// listener starts after the Kafka listener, so it is never ready before Kafka is.
async fn readyz(State(broker): State<Arc<Broker>>) -> (StatusCode, String) {
    if broker.shutdown.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n".to_string(),
        );
    }
    match broker.metastore.cluster().await {
        Ok(_) => (StatusCode::OK, "ready\n".to_string()),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: metastore: {e}\n"),
        ),
    }
}

/// Tiering progress per partition: highest archived offset and lag in records.
async fn tiering(State(broker): State<Arc<Broker>>) -> axum::Json<serde_json::Value> {
    let archive = broker.archive.archive().url.clone();
    axum::Json(match &broker.tiering {
        Some(worker) => serde_json::json!({ "archive": archive, "partitions": worker.status() }),
        None => {
            serde_json::json!({ "archive": archive, "partitions": [], "note": "tiering runs in another process" })
        }
    })
}

pub async fn serve(listener: TcpListener, broker: Arc<Broker>) -> std::io::Result<()> {
    let shutdown = broker.shutdown.clone();
    axum::serve(listener, router(broker))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
