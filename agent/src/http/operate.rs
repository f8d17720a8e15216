//! Operator actions on one partition (`docs/http.md`, "Operator actions"), each audited:
//!
//! - `GET /v1/topics/{topic}/partitions/{p}`: the leader's view (replicas, epoch, log
//!   start and end, high watermark, ISR, each follower's progress);
//! - `POST …/disable` `{"reason"}` and `POST …/enable`: an incident switch. A disabled
//!   partition refuses produce (POLICY_VIOLATION, not retriable, so producers learn at
//!   once) and keeps serving reads; the flag lives in the metastore, so every agent and
//!   every later leader honours it;
//! - `POST …/tier`: archives the partition's closed segments now (re-running tiering
//!   after a fault was fixed);
//! - `POST …/verify`: reads the partition's archive back and checks it against the
//!   manifest, reporting each mismatch;
//! - `GET /v1/audit`: the last entries of this agent's audit log.
//!
//! Requests about a partition that this agent does not lead are redirected (307) to its
//! leader, except disable and enable, which any agent writes to the metastore.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{Extensions, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use kafka_protocol::error::ResponseError;
use serde::Deserialize;
use serde_json::json;

use super::HttpApi;
use super::admin::{audited, caller, fresh_topic};
use super::cluster::redirect;
use super::json;
use super::problem::{Body, Problem};
use crate::api::errors::ApiError;
use crate::partition::Partition;

type PartitionPath =
    Result<axum::extract::Path<(String, i32)>, axum::extract::rejection::PathRejection>;

fn unknown(topic: &str, partition: i32) -> Problem {
    Problem::kafka(
        ResponseError::UnknownTopicOrPartition,
        format!("partition {topic}-{partition} does not exist"),
    )
}

/// Where a request about a partition is served.
enum Served {
    /// This agent leads the partition.
    Here(Arc<Partition>),
    /// A 307 to the agent that does.
    Redirect(Response),
}

/// Where a request about `partition` of `topic` is served: here if this agent leads it,
/// else at its leader.
async fn led_here(
    http: &HttpApi,
    topic: &str,
    partition: i32,
    uri: &Uri,
) -> Result<Served, Problem> {
    let state = fresh_topic(http, topic).await?;
    let record = state
        .record
        .partitions
        .get(usize::try_from(partition).unwrap_or(usize::MAX))
        .ok_or_else(|| unknown(topic, partition))?;
    if let Some(replica) = state.replica(partition)
        && replica.leader_epoch().is_some()
    {
        return Ok(Served::Here(Arc::clone(replica)));
    }
    let leader = http
        .broker
        .membership()
        .live()
        .into_iter()
        .find(|a| a.node_id == record.leader && record.leader != http.broker.node_id());
    match leader {
        Some(agent) => Ok(Served::Redirect(redirect(&agent, uri))),
        None => Err(Problem::kafka(
            ResponseError::LeaderNotAvailable,
            format!(
                "{topic}-{partition} has no live leader (the metastore names agent {})",
                record.leader
            ),
        )),
    }
}

fn path(p: PartitionPath) -> Result<(String, i32), Problem> {
    p.map(|p| p.0).map_err(Problem::from)
}

/// `GET /v1/topics/{topic}/partitions/{p}`.
pub async fn inspect(State(http): State<Arc<HttpApi>>, p: PartitionPath, uri: Uri) -> Response {
    let (topic, partition) = match path(p) {
        Ok(p) => p,
        Err(p) => return p.into_response(),
    };
    let replica = match led_here(&http, &topic, partition, &uri).await {
        Ok(Served::Here(r)) => r,
        Ok(Served::Redirect(r)) => return r,
        Err(p) => return p.into_response(),
    };
    let state = http.broker.replicas().topic(&topic);
    let record = state
        .as_ref()
        .and_then(|s| s.record.partitions.get(partition as usize).cloned());
    let mut status = replica.status(crate::clock::now_ms());
    status["node_id"] = http.broker.node_id().into();
    status["log_start_offset"] = http
        .broker
        .replicas()
        .log_start_offset(&replica)
        .await
        .into();
    status["local_log_start_offset"] = replica.log_start_offset().into();
    if let Some(record) = record {
        status["replicas"] = json!(record.replicas);
        status["adding_replicas"] = json!(record.adding);
        status["removing_replicas"] = json!(record.removing);
    }
    status["disabled"] = json!(
        state
            .as_ref()
            .and_then(|s| s.record.disabled.get(&(partition as u32)))
    );
    axum::Json(status).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Disable {
    reason: Option<String>,
}

/// `POST /v1/topics/{topic}/partitions/{p}/disable` `{"reason"}`.
pub async fn disable(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    p: PartitionPath,
    body: Body,
) -> Response {
    let caller = caller(&extensions);
    let (topic, partition) = match path(p) {
        Ok(p) => p,
        Err(p) => return p.into_response(),
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return Problem::from(e).into_response(),
    };
    // An empty body is a disable without a reason.
    let req = if body.iter().all(u8::is_ascii_whitespace) {
        Disable { reason: None }
    } else {
        match json::parse::<Disable>(&body, "disable") {
            Ok(r) => r,
            Err(p) => return p.into_response(),
        }
    };
    // The topic service decides (ALTER on the cluster) and audits.
    let disabled = http
        .broker
        .admin()
        .disable_writes(&caller, &topic, partition, req.reason)
        .await;
    match disabled {
        Ok(reason) => axum::Json(json!({
            "topic": topic,
            "partition": partition,
            "writes": "disabled",
            "reason": reason,
        }))
        .into_response(),
        Err(e) => Problem::from(ApiError::from(&e)).into_response(),
    }
}

/// `POST /v1/topics/{topic}/partitions/{p}/enable`.
pub async fn enable(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    p: PartitionPath,
) -> Response {
    let caller = caller(&extensions);
    let (topic, partition) = match path(p) {
        Ok(p) => p,
        Err(p) => return p.into_response(),
    };
    // The topic service decides (ALTER on the cluster) and audits.
    let enabled = http
        .broker
        .admin()
        .enable_writes(&caller, &topic, partition)
        .await;
    match enabled {
        Ok(()) => axum::Json(json!({
            "topic": topic,
            "partition": partition,
            "writes": "enabled",
            "reason": null,
        }))
        .into_response(),
        Err(e) => Problem::from(ApiError::from(&e)).into_response(),
    }
}

/// `POST /v1/topics/{topic}/partitions/{p}/tier`: archives the closed segments not yet
/// archived, now.
pub async fn tier(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    p: PartitionPath,
    uri: Uri,
) -> Response {
    let caller = caller(&extensions);
    let (topic, partition) = match path(p) {
        Ok(p) => p,
        Err(p) => return p.into_response(),
    };
    let replica = match led_here(&http, &topic, partition, &uri).await {
        Ok(Served::Here(r)) => r,
        Ok(Served::Redirect(r)) => return r,
        Err(p) => return p.into_response(),
    };
    let outcome = async {
        let worker = http.broker.tiering().ok_or_else(|| {
            Problem::new(
                StatusCode::CONFLICT,
                "tiering runs in another process here (tiering_enabled = false): run the repair there",
            )
        })?;
        let tiered = http
            .broker
            .replicas()
            .topic(&topic)
            .is_some_and(|t| t.config.tiered());
        if !tiered {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                format!("topic {topic} is not tiered (remote.storage.enable is false)"),
            ));
        }
        let reader = http.broker.replicas().archive();
        let archived = |m: &[strata_metastore::ManifestEntry]| m.last().map_or(-1, |e| e.last_offset);
        let before = reader
            .manifest(&topic, partition, true)
            .await
            .map(|m| archived(&m))
            .unwrap_or(-1);
        worker
            .tier_partition(replica.as_ref())
            .await
            .map_err(|e| Problem::new(StatusCode::BAD_GATEWAY, format!("tiering {topic}-{partition} failed: {e}")))?;
        let after = reader
            .manifest(&topic, partition, true)
            .await
            .map(|m| archived(&m))
            .unwrap_or(before);
        let closed_waiting = replica.segments_from(after + 1).1 == 1
            && replica.log_end_offset() > after + 1;
        let mut body = json!({
            "topic": topic,
            "partition": partition,
            "archived_upto_before": before,
            "archived_upto": after,
        });
        if closed_waiting {
            body["waiting_for"] = "the active segment to close (segment.bytes or segment.ms): only closed segments are archived".into();
        }
        Ok((StatusCode::OK, body))
    }
    .await;
    audited(
        &http,
        &caller,
        "partition.tier",
        &format!("partition:{topic}-{partition}"),
        json!({}),
        outcome,
    )
}

/// `POST /v1/topics/{topic}/partitions/{p}/verify`: the archive read back and checked
/// against the manifest. 200 with `"ok": false` and the mismatches when it disagrees.
pub async fn verify(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    p: PartitionPath,
) -> Response {
    let caller = caller(&extensions);
    let (topic, partition) = match path(p) {
        Ok(p) => p,
        Err(p) => return p.into_response(),
    };
    let outcome = async {
        let exists = fresh_topic(&http, &topic).await?.has_partition(partition);
        if !exists {
            return Err(unknown(&topic, partition));
        }
        let reader = http.broker.replicas().archive();
        let manifest = reader
            .manifest(&topic, partition, true)
            .await
            .map_err(|e| {
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("cannot read the manifest: {e}"),
                )
            })?;
        let v = strata_tiering::verify::verify_partition(
            reader.archive(),
            &topic,
            partition,
            &manifest,
        )
        .await
        .map_err(|e| {
            Problem::new(
                StatusCode::BAD_GATEWAY,
                format!("cannot read the archive: {e}"),
            )
        })?;
        let mut body = serde_json::to_value(&v).unwrap_or_default();
        body["ok"] = v.ok().into();
        Ok((StatusCode::OK, body))
    }
    .await;
    audited(
        &http,
        &caller,
        "partition.verify",
        &format!("partition:{topic}-{partition}"),
        json!({}),
        outcome,
    )
}

#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    limit: Option<usize>,
}

/// `GET /v1/audit?limit=n`: the last `n` (default 100, at most 10,000) entries.
pub async fn audit(
    State(http): State<Arc<HttpApi>>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let limit = match query {
        Ok(q) => q.0.limit.unwrap_or(100).min(10_000),
        Err(e) => return Problem::bad_request(e.body_text()).into_response(),
    };
    match http.broker.audit().tail(limit) {
        Ok(entries) => axum::Json(json!({
            "node_id": http.broker.node_id(),
            "path": http.broker.audit().path().display().to_string(),
            "entries": entries,
        }))
        .into_response(),
        Err(e) => Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the audit log: {e}"),
        )
        .into_response(),
    }
}
