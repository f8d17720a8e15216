//! `POST /v1/topics/{topic}/read`: records read straight from partitions, without a
//! consumer group, as kcat reads them. The caller says where each partition starts
//! (`offsets`; those in `partitions`, or all, `from` the earliest or latest offset)
//! and carries the answer's
//! `next_offsets` into its next call: nothing is kept on the agent, nothing is
//! committed, and the first call answers at once (no group to join). Needs READ on the
//! topic, as a Kafka Fetch does; reads count against the caller's consumer quota.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::Extensions;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::HttpApi;
use super::consume::{Limits, Reset, read_pass, read_permit, start_at, throttled_answer};
use super::json::{self, whole};
use super::model::{Encoding, IsolationLevel, ReadResponse};
use super::problem::{Body, Extracted, Problem, extract};

/// Where to read each partition from.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ReadRequest)]
pub(crate) struct ReadBody {
    /// Partitions to read from an offset each
    #[serde(default)]
    #[schema(schema_with = super::openapi::read_offsets)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) offsets: Option<BTreeMap<String, serde_json::Number>>,
    /// Partitions to read from `from`; with neither this nor offsets, every partition
    #[serde(default)]
    #[schema(schema_with = super::openapi::read_partitions)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partitions: Option<Vec<serde_json::Number>>,
    /// Where a partition without an offset starts, and where one whose offset is out
    /// of range starts again (earliest by default)
    #[serde(default)]
    #[schema(value_type = Option<Reset>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<String>,
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = 1, maximum = 10000, default = 100)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_messages: Option<usize>,
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = 0, maximum = 30000, default = 0)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
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

#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/read",
    summary = "Read messages straight from partitions, without a group",
    description = "Stateless: partitions named in `offsets` start at their offset, those in `partitions` (or, naming neither, all) `from` the earliest or latest offset; pass the answer's `next_offsets` as `offsets` into the next call. Nothing is committed and no group is joined, so the first call answers at once. Waits up to `timeout_ms` (default 0) for a first message. Needs READ on the topic.",
    params(("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')")),
    request_body = ReadBody,
    responses(
        (status = 200, description = "Messages from the positions asked, and where each partition continues", body = ReadResponse),
        super::openapi::ReadProblems,
    ),
)]
pub async fn read_records(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    topic: Extracted<String>,
    body: Body,
) -> Response {
    let (topic, body) = match extract(topic, body) {
        Ok(parts) => parts,
        Err(problem) => return problem.into_response(),
    };
    match answer(&http, &extensions, &topic, &body).await {
        Ok(r) => r,
        Err(p) => p.into_response(),
    }
}

async fn answer(
    http: &HttpApi,
    extensions: &Extensions,
    topic: &str,
    body: &[u8],
) -> Result<Response, Problem> {
    let permit = read_permit(http, extensions, topic)?;
    let body: ReadBody = json::parse(body, "read")?;
    let limits = Limits::parse(
        body.max_messages,
        body.timeout_ms.unwrap_or(0),
        body.isolation_level.as_deref(),
        body.encoding.as_deref(),
    )?;
    let (max, read_committed, encoding) =
        (limits.max_messages, limits.read_committed, limits.encoding);
    let from = Reset::parse("from", body.from.as_deref())?;
    let Some(count) = http.broker.fetching().partitions(topic) else {
        return Err(Problem::unknown_topic_or_partition(format!(
            "topic {topic:?} does not exist"
        )));
    };
    let partition = |p: &str| {
        p.parse::<i32>()
            .ok()
            .filter(|p| (0..count).contains(p))
            .ok_or_else(|| {
                Problem::unknown_topic_or_partition(format!(
                    "topic {topic} has partitions 0 to {}; {p} is not one of them",
                    count - 1
                ))
            })
    };
    // Each partition read, with where it starts (None: at `from`): those `offsets`
    // names at their offset, those `partitions` names at `from`; neither: all.
    let mut positions: BTreeMap<i32, Option<i64>> = BTreeMap::new();
    for p in body.partitions.iter().flatten() {
        positions.insert(partition(&p.to_string())?, None);
    }
    for (p, offset) in body.offsets.iter().flatten() {
        let Some(offset) = whole(offset).filter(|o| *o >= 0) else {
            return Err(Problem::bad_request(format!(
                "offset {offset} for partition {p} is not an offset (an integer, 0 or more)"
            )));
        };
        positions.insert(partition(p)?, Some(offset));
    }
    if positions.is_empty() {
        positions.extend((0..count).map(|p| (p, None)));
    }
    let mut next: Vec<(i32, i64)> = Vec::with_capacity(positions.len());
    for (&p, start) in &positions {
        let start = match start {
            Some(o) => Some(*o),
            None => start_at(http, &permit, p, from).await,
        };
        if let Some(o) = start {
            next.push((p, o));
        }
    }
    let deadline = crate::clock::instant() + Duration::from_millis(limits.timeout_ms);
    let pass = loop {
        let pass = read_pass(
            http,
            &permit,
            &mut next,
            read_committed,
            from,
            max,
            encoding,
        )
        .await;
        if !pass.messages.is_empty() || pass.has_more || crate::clock::instant() >= deadline {
            break pass;
        }
        if pass.moved {
            // Read again at once from where the out-of-range partitions start now.
            continue;
        }
        let never = futures::future::pending();
        pass.wait(http, &permit, read_committed, deadline, never)
            .await;
    };
    let answer = ReadResponse {
        messages: pass.messages,
        next_offsets: next.iter().map(|(p, o)| (p.to_string(), *o)).collect(),
        has_more: pass.has_more,
    };
    Ok(throttled_answer(http, extensions, json::text(&answer)).await)
}
