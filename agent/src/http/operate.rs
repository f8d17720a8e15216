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
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::HttpApi;
use super::admin::caller;
use super::cluster::redirect;
use super::json;
use super::model::{AuditLog, Verified, WriteSwitch, Writes};
use super::problem::{Body, Problem};
use crate::error::Error;
use crate::service::maintenance::{MaintenanceError, Tiered};

type PartitionPath =
    Result<axum::extract::Path<(String, i32)>, axum::extract::rejection::PathRejection>;

fn unknown(topic: &str, partition: i32) -> Problem {
    Problem::unknown_topic_or_partition(format!("partition {topic}-{partition} does not exist"))
}

fn no_live_leader(topic: &str, partition: i32, leader: i32) -> Problem {
    Problem::from(crate::error::Error::LeaderNotAvailable {
        topic: topic.to_string(),
        partition,
    })
    .detail(format!(
        "{topic}-{partition} has no live leader (the metastore names agent {leader})"
    ))
}

fn path(p: PartitionPath) -> Result<(String, i32), Problem> {
    p.map(|p| p.0).map_err(Problem::from)
}

/// `GET /v1/topics/{topic}/partitions/{p}`.
#[utoipa::path(
    get,
    path = "/v1/topics/{topic}/partitions/{partition}",
    summary = "One partition as its leader sees it",
    description = "Replicas, leader epoch, log start (archive included) and local log start, log end, high watermark, last stable offset, ISR and each follower's progress, and the disabled flag. Served by the partition's leader. Needs DESCRIBE on the topic.",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')"), ("partition" = i32, Path, minimum = 0, maximum = 2147483647, description = "The partition's index")),
    responses(
        (status = 200, description = "The partition", body = crate::partition::PartitionView),
        super::openapi::LeaderRedirected,
        super::openapi::InspectProblems,
    ),
)]
pub async fn inspect(State(http): State<Arc<HttpApi>>, p: PartitionPath, uri: Uri) -> Response {
    let (topic, partition) = match path(p) {
        Ok(p) => p,
        Err(p) => return p.into_response(),
    };
    match http.broker.status().partition(&topic, partition).await {
        Ok(status) => axum::Json(status).into_response(),
        Err(e) => refused(&http, e, &uri),
    }
}

/// Why writes are disabled.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = DisableRequest)]
pub(crate) struct Disable {
    /// Why: kept in the metastore, shown to the producers refused, written to the audit
    /// log
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
}

/// `POST /v1/topics/{topic}/partitions/{p}/disable` `{"reason"}`.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/partitions/{partition}/disable",
    summary = "Refuse produce to a partition (reads go on)",
    description = "An incident switch: produce to the partition is refused with POLICY_VIOLATION (not retriable, so Kafka producers fail at once; 422 over HTTP) and the `reason`; fetches and consumers go on. The flag lives in the metastore: every agent and every later leader honours it. Any agent serves it. The body is optional: without one, or without a `reason`, the reason is `no reason given`. Needs ALTER on the cluster; audited (`partition.disable`).",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')"), ("partition" = i32, Path, minimum = 0, maximum = 2147483647, description = "The partition's index")),
    request_body(content = Option<Disable>, description = "Optional"),
    responses(
        (status = 200, description = "Writes are disabled", body = WriteSwitch),
        super::openapi::WriteSwitchProblems,
    ),
)]
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
    // An empty body, or `null`, is a disable without a reason.
    let req = if matches!(body.trim_ascii(), b"" | b"null") {
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
        Ok(reason) => axum::Json(WriteSwitch {
            topic,
            partition,
            writes: Writes::Disabled,
            reason: Some(reason),
        })
        .into_response(),
        Err(e) => Problem::from(&e).into_response(),
    }
}

/// `POST /v1/topics/{topic}/partitions/{p}/enable`.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/partitions/{partition}/enable",
    summary = "Accept produce to a partition again",
    description = "Clears the flag `disable` set (nothing to clear is not an error). Any agent serves it. Needs ALTER on the cluster; audited (`partition.enable`).",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')"), ("partition" = i32, Path, minimum = 0, maximum = 2147483647, description = "The partition's index")),
    responses(
        (status = 200, description = "Writes are enabled", body = WriteSwitch),
        super::openapi::WriteSwitchProblems,
    ),
)]
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
        Ok(()) => axum::Json(WriteSwitch {
            topic,
            partition,
            writes: Writes::Enabled,
            reason: None,
        })
        .into_response(),
        Err(e) => Problem::from(&e).into_response(),
    }
}

/// `POST /v1/topics/{topic}/partitions/{p}/tier`: archives the closed segments not yet
/// archived, now. The maintenance service decides (ALTER on the cluster) and audits.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/partitions/{partition}/tier",
    summary = "Archive the partition's closed segments now",
    description = "Runs the tiering worker on this partition at once (after a fault was fixed, say) rather than at its next pass. Only closed segments are archived, up to the high watermark. Served by the partition's leader. Needs ALTER on the cluster; audited (`partition.tier`).",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')"), ("partition" = i32, Path, minimum = 0, maximum = 2147483647, description = "The partition's index")),
    responses(
        (status = 200, description = "What is archived now", body = Tiered),
        super::openapi::LeaderRedirected,
        super::openapi::TierProblems,
    ),
)]
pub async fn tier(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    p: PartitionPath,
    uri: Uri,
) -> Response {
    let (topic, partition) = match path(p) {
        Ok(p) => p,
        Err(p) => return p.into_response(),
    };
    let tiered = http
        .broker
        .maintenance()
        .tier_now(&caller(&extensions), &topic, partition)
        .await;
    match tiered {
        Ok(t) => axum::Json(t).into_response(),
        Err(e) => refused(&http, e, &uri),
    }
}

/// `POST /v1/topics/{topic}/partitions/{p}/verify`: the archive read back and checked
/// against the manifest. 200 with `"ok": false` and the mismatches when it disagrees.
/// The maintenance service decides (ALTER on the cluster) and audits.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/partitions/{partition}/verify",
    summary = "Read the partition's archive back and check it against the manifest",
    description = "Every object the manifest names is read whole: its size and CRC32C against the manifest entry, every batch rebuilt from its rows (row checksums), its record count and offset span against the entry; the manifest must cover a contiguous run of offsets. Objects in the partition's directory that the manifest does not name are listed (`unreferenced`: most are garbage awaiting collection), never counted as mismatches. A mismatch is a 200 with `ok: false`. Any agent serves it. Needs ALTER on the cluster; audited (`partition.verify`).",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')"), ("partition" = i32, Path, minimum = 0, maximum = 2147483647, description = "The partition's index")),
    responses(
        (status = 200, description = "What the verification found", body = Verified),
        super::openapi::VerifyProblems,
    ),
)]
pub async fn verify(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    p: PartitionPath,
    uri: Uri,
) -> Response {
    let (topic, partition) = match path(p) {
        Ok(p) => p,
        Err(p) => return p.into_response(),
    };
    let verified = http
        .broker
        .maintenance()
        .verify(&caller(&extensions), &topic, partition)
        .await;
    match verified {
        Ok(report) => axum::Json(Verified {
            ok: report.ok(),
            report,
        })
        .into_response(),
        Err(e) => refused(&http, e, &uri),
    }
}

/// A partition request not answered here: sent on to the partition's leader (307), or
/// the problem.
fn refused(http: &HttpApi, e: MaintenanceError, uri: &Uri) -> Response {
    let status = match &e {
        MaintenanceError::Refused(Error::UnknownTopicOrPartition { topic, partition }) => {
            return unknown(topic, *partition).into_response();
        }
        MaintenanceError::Refused(e) => return Problem::from(e).into_response(),
        MaintenanceError::LedElsewhere {
            topic,
            partition,
            leader,
        } => {
            let agent = http
                .broker
                .membership()
                .live()
                .into_iter()
                .find(|a| a.node_id == *leader && *leader != http.broker.node_id());
            return match agent {
                Some(agent) => redirect(&agent, uri),
                None => no_live_leader(topic, *partition, *leader).into_response(),
            };
        }
        MaintenanceError::TieringElsewhere | MaintenanceError::NotTiered(_) => StatusCode::CONFLICT,
        MaintenanceError::Manifest(_) => StatusCode::SERVICE_UNAVAILABLE,
        MaintenanceError::Archive(_) => StatusCode::BAD_GATEWAY,
    };
    Problem::new(status, e.to_string()).into_response()
}

#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    limit: Option<usize>,
}

/// `GET /v1/audit?limit=n`: the last `n` (default 100, at most 10,000) entries.
#[utoipa::path(
    get,
    path = "/v1/audit",
    summary = "The last entries of this agent's audit log",
    description = "Newest last. Each agent keeps its own log (`{data_dir}/audit.log`) of the actions it served. Needs DESCRIBE on the cluster.",
    params(("limit" = Option<u64>, Query, minimum = 0, maximum = 18446744073709551615_u64, description = "How many entries (100 by default); above 10 000 is 10 000")),
    responses(
        (status = 200, description = "The entries", body = AuditLog),
        super::openapi::AuditProblems,
    ),
)]
pub async fn audit(
    State(http): State<Arc<HttpApi>>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let limit = match query {
        Ok(q) => q.0.limit.unwrap_or(100).min(10_000),
        Err(e) => return Problem::bad_request(e.body_text()).into_response(),
    };
    match http.broker.audit().tail(limit) {
        Ok(entries) => axum::Json(AuditLog {
            node_id: http.broker.node_id(),
            path: http.broker.audit().path().display().to_string(),
            entries,
        })
        .into_response(),
        Err(e) => Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the audit log: {e}"),
        )
        .into_response(),
    }
}
