//! `POST /v1/topics/{topic}/produce`: records over HTTP, into the same log as Kafka's
//! Produce.
//!
//! Keyed messages go to the partition the Java client's default partitioner picks
//! (murmur2), unkeyed ones all to one partition chosen at random per request (as the
//! sticky partitioner fills one batch at a time), unless a message names its
//! partition. Each partition's messages become one record batch, appended by the
//! produce service when this agent leads the partition and sent to its leader as a
//! Kafka Produce otherwise. The answer gives each message its partition and offset, or
//! its error.
//!
//! With an `Idempotency-Key` header, the first answer that wrote anything is kept for
//! [`IDEMPOTENCY_TTL`] on this agent: a retry with the same key and body gets it again
//! and writes nothing; the same key with another body is refused (409).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::HttpApi;
use super::json::{self, whole};
use super::model::{Failed, MessageOutcome, ProduceResponse, Written};
use super::partitioner::partition_for_key;
use super::problem::{Body, Extracted, Problem, extract};
use crate::caller::Caller;
use crate::error::Error;
use crate::error_map::ApiError;
use crate::service::admin::AdminError;
use crate::service::produce::{self, Acks, Permit};

/// How long an idempotency key's first answer is kept.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(600);
/// The most answer bytes kept for idempotency keys (roughly; the weigher estimates).
const IDEMPOTENCY_BYTES: u64 = 64 * 1024 * 1024;
/// The default and the most a produce waits for its writes to be acknowledged.
const DEFAULT_TIMEOUT_MS: u64 = 10_000;
const MAX_TIMEOUT_MS: u64 = 30_000;
/// The shortest wait accepted: a durable write (fsync, and the in-sync replicas) needs
/// some, and a shorter one would only turn writes that succeed into timeouts.
const MIN_TIMEOUT_MS: u64 = 1_000;

/// The first answers to requests with an `Idempotency-Key`, by topic and key.
pub type Remembered = moka::future::Cache<(String, String), Arc<Answer>>;

pub fn remembered() -> Remembered {
    moka::future::Cache::builder()
        .max_capacity(IDEMPOTENCY_BYTES)
        .weigher(|(t, k): &(String, String), a: &Arc<Answer>| {
            u32::try_from(t.len() + k.len() + 64 * a.results.len().max(1)).unwrap_or(u32::MAX)
        })
        .time_to_live(IDEMPOTENCY_TTL)
        .build()
}

/// Messages to append. Keys, values and header values are UTF-8 text, or all base64
/// with `"encoding": "base64"`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ProduceRequest)]
pub(crate) struct Request<'a> {
    #[serde(borrow)]
    #[schema(min_items = 1)]
    pub(crate) messages: Vec<Message<'a>>,
    /// Which replicas must have a message before it is answered written: all in-sync
    /// ones (the default), the leader, or none
    #[serde(default)]
    #[schema(schema_with = super::openapi::acks)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) acks: Option<serde_json::Value>,
    /// utf-8 by default
    #[serde(default)]
    #[schema(value_type = Option<Encoding>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) encoding: Option<String>,
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = 1000, maximum = 30000, default = 10000)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
}

/// A message to append.
// Keys and values are borrowed from the body where JSON allows (no escapes): UTF-8
// ones become records without a copy, base64 ones are decoded from the body itself.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ProducedMessage)]
pub(crate) struct Message<'a> {
    /// UTF-8 text, or base64 when the request's `encoding` is `base64`; null for none
    #[serde(default, borrow, deserialize_with = "borrowed")]
    #[schema(value_type = Option<String>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<Cow<'a, str>>,
    /// UTF-8 text, or base64 when the request's `encoding` is `base64`; null for none
    #[serde(default, borrow, deserialize_with = "borrowed")]
    #[schema(value_type = Option<String>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<Cow<'a, str>>,
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) headers: Option<Headers>,
    /// Overrides the partitioner
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = -2147483648, maximum = 2147483647)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partition: Option<i32>,
    /// Milliseconds since the epoch; default now
    #[serde(default, deserialize_with = "json::opt")]
    #[schema(minimum = 0, maximum = 9223372036854775807_i64)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timestamp: Option<i64>,
}

/// An optional string, borrowed when it has no escapes. (serde borrows a `Cow` only as
/// a field of its own: `Option<Cow<str>>` would always be a copy.)
fn borrowed<'de: 'a, 'a, D>(d: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text<'a>>::deserialize(d)?.map(|t| t.0))
}

/// Headers as an object (`{"trace": "t1"}`) or, to repeat a key or keep an order, a
/// list of `{"key", "value"}`. Values as the message's key and value are written.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum Headers {
    Map(BTreeMap<String, Option<String>>),
    List(Vec<HeaderEntry>),
}

/// A header, in a list of them.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeaderEntry {
    pub(crate) key: String,
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<String>,
}

pub use super::model::Encoding;

impl Encoding {
    pub fn parse(s: Option<&str>) -> Result<Encoding, Problem> {
        match s {
            None | Some("utf-8") => Ok(Encoding::Utf8),
            Some("base64") => Ok(Encoding::Base64),
            Some(other) => Err(Problem::bad_request(format!(
                "encoding must be \"utf-8\" or \"base64\", not {other:?}"
            ))),
        }
    }

    /// `s` as bytes: a slice of `body` when `s` is UTF-8 text borrowed from it.
    fn decode_in(self, body: &Bytes, what: &str, s: &str) -> Result<Bytes, String> {
        let within = || {
            let (text, body) = (s.as_bytes().as_ptr_range(), body.as_ptr_range());
            body.start <= text.start && text.end <= body.end
        };
        match self {
            Encoding::Utf8 if !s.is_empty() && within() => Ok(body.slice_ref(s.as_bytes())),
            _ => self.decode(what, s),
        }
    }

    fn decode(self, what: &str, s: &str) -> Result<Bytes, String> {
        match self {
            Encoding::Utf8 => Ok(Bytes::copy_from_slice(s.as_bytes())),
            Encoding::Base64 => base64_fast(s).map_or_else(
                || {
                    LENIENT
                        .decode(s)
                        .map(Bytes::from)
                        .map_err(|e| format!("{what} is not base64: {e}"))
                },
                Ok,
            ),
        }
    }

    /// Bytes as an answer carries them (text only for bytes known to be UTF-8).
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Utf8 => String::from_utf8_lossy(bytes).into_owned(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// `s` decoded by SIMD when it is strict standard base64 (padded, or unpadded when its
/// length asks for no padding); `None` sends it to [`LENIENT`], which takes all this
/// does, and more, with the same bytes out.
fn base64_fast(s: &str) -> Option<Bytes> {
    let strict = if s.len().is_multiple_of(4) {
        base64_simd::STANDARD
    } else {
        base64_simd::STANDARD_NO_PAD
    };
    strict.decode_to_vec(s).ok().map(Bytes::from)
}

/// The standard alphabet, padded or not, and with any bits after the last byte (as
/// most decoders accept; the OpenAPI document's pattern describes exactly this).
const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

fn acks_of(v: Option<&serde_json::Value>) -> Result<Acks, Problem> {
    use serde_json::Value as V;
    match v {
        None => Ok(Acks::All),
        Some(V::String(s)) if s == "all" || s == "-1" => Ok(Acks::All),
        Some(V::String(s)) if s == "1" => Ok(Acks::Leader),
        Some(V::String(s)) if s == "0" => Ok(Acks::None),
        Some(V::Number(n)) if whole(n) == Some(-1) => Ok(Acks::All),
        Some(V::Number(n)) if whole(n) == Some(1) => Ok(Acks::Leader),
        Some(V::Number(n)) if whole(n) == Some(0) => Ok(Acks::None),
        Some(other) => Err(Problem::from(Error::InvalidAcks(other.to_string()))
            .detail(format!("acks must be \"all\", \"1\" or \"0\", not {other}"))),
    }
}

/// One message's outcome.
#[derive(Debug, Clone)]
pub enum Outcome {
    Written {
        partition: i32,
        offset: Option<i64>,
    },
    Failed {
        partition: Option<i32>,
        error: ApiError,
    },
}

/// A produce's answer.
#[derive(Debug)]
pub struct Answer {
    fingerprint: u64,
    results: Vec<Outcome>,
}

impl Answer {
    fn written_any(&self) -> bool {
        self.results
            .iter()
            .any(|r| matches!(r, Outcome::Written { .. }))
    }

    fn to_response(&self) -> Response {
        let offsets: Vec<MessageOutcome<'_>> = self.results.iter().map(Outcome::answered).collect();
        if !self.written_any()
            && let Some(Outcome::Failed { error, .. }) = self.results.first()
        {
            // Nothing was written: the request failed as a whole, as its first error.
            let problem = Problem::from(error.clone());
            let mut body = problem.body();
            body.offsets = Some(offsets);
            return (
                problem.status,
                [(axum::http::header::CONTENT_TYPE, "application/problem+json")],
                json::text(&body),
            )
                .into_response();
        }
        (StatusCode::OK, axum::Json(ProduceResponse { offsets })).into_response()
    }
}

impl Outcome {
    /// The outcome as the answer spells it.
    fn answered(&self) -> MessageOutcome<'_> {
        match self {
            Outcome::Written { partition, offset } => MessageOutcome::Written(Written {
                partition: *partition,
                offset: *offset,
            }),
            Outcome::Failed { partition, error } => MessageOutcome::Failed(Failed {
                partition: *partition,
                error: error.name().into(),
                message: error.message.as_str().into(),
            }),
        }
    }
}

#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/produce",
    summary = "Append messages to a topic",
    description = "Keyed messages go to the partition the Java client's default partitioner picks (murmur2); unkeyed ones to one partition chosen per request; `partition` overrides both. The topic is created with the defaults if it does not exist and auto.create.topics.enable is on.",
    params(
        ("topic" = String, Path, pattern = "^[a-zA-Z0-9._-]{1,249}$", description = "The topic's name (Kafka's rules: ASCII letters, digits, '.', '_' and '-')"),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, description = "A retry with the same key and body gets the first answer and writes nothing (kept 10 minutes by the agent that answered)"),
    ),
    request_body = Request,
    responses(
        (status = 200, description = "Each message's partition and offset, or its error", body = ProduceResponse),
        super::openapi::ProduceProblems,
    ),
)]
pub async fn produce(
    State(http): State<Arc<HttpApi>>,
    extensions: Extensions,
    topic: Extracted<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (topic, body) = match extract(topic, body) {
        Ok(parts) => parts,
        Err(problem) => return problem.into_response(),
    };
    // WRITE on the topic before anything else: the produce service's leave, so a caller
    // who may not write it learns nothing of it and creates nothing.
    let who = super::admin::caller(&extensions);
    let permit = match http.broker.producing().permit(&who, None, &topic) {
        Ok(permit) => permit,
        Err(e) => return Problem::from(&e).into_response(),
    };
    let key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) if !k.is_empty() && k.len() <= 255 => Some(k.to_string()),
        Some(_) => {
            return Problem::bad_request(
                "Idempotency-Key must be 1 to 255 visible ASCII characters",
            )
            .into_response();
        }
    };
    let parsed = match parse(&body) {
        Ok(p) => p,
        Err(problem) => return problem.into_response(),
    };
    // The body counts against the caller's producer_byte_rate; its answer waits out any
    // throttle once written (as a Kafka produce's answer carries it).
    let throttle = crate::quota::edge::http_throttle(
        http.broker.quotas(),
        crate::quota::QuotaKind::Produce,
        &super::auth::authenticated(&extensions).name,
        body.len(),
    );
    // A topic that does not exist is created (auto.create.topics.enable) for a caller
    // with CREATE on it: the topic service decides, as for a Kafka producer's Metadata.
    let answer = answer_produce(&http, &who, &permit, body, key, parsed).await;
    if !throttle.is_zero() {
        crate::clock::pause(throttle).await;
    }
    answer
}

async fn answer_produce(
    http: &Arc<HttpApi>,
    who: &Caller,
    permit: &Permit,
    body: Bytes,
    key: Option<String>,
    parsed: Parsed,
) -> Response {
    let Some(key) = key else {
        // Only an idempotency key's first answer is compared with a retry's body.
        return match write(http, who, permit, parsed, 0).await {
            Ok(answer) => answer.to_response(),
            Err(problem) => problem.into_response(),
        };
    };
    let fingerprint = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        body.hash(&mut h);
        h.finish()
    };
    let first = http
        .remembered
        .try_get_with((permit.topic().to_string(), key), async {
            match write(http, who, permit, parsed, fingerprint).await {
                Ok(answer) if answer.written_any() => Ok(Arc::new(answer)),
                Ok(answer) => Err(Ok(answer)),
                Err(problem) => Err(Err(problem)),
            }
        })
        .await;
    match first {
        // The request is valid, but conflicts with the one that used the key first.
        Ok(answer) if answer.fingerprint != fingerprint => Problem::new(
            StatusCode::CONFLICT,
            "this Idempotency-Key was used for a request with another body",
        )
        .into_response(),
        Ok(answer) => answer.to_response(),
        // Nothing was written (or the request was refused): nothing to remember, so a
        // retry writes afresh.
        Err(failed) => match &*failed {
            Ok(answer) => answer.to_response(),
            Err(problem) => problem.clone().into_response(),
        },
    }
}

/// A parsed request: its messages as records, with the partition each asked for.
struct Parsed {
    records: Vec<(Option<i32>, produce::Message)>,
    acks: Acks,
    timeout: Duration,
}

fn parse(text: &Bytes) -> Result<Parsed, Problem> {
    let body: Request = json::parse(text, "produce")?;
    let acks = acks_of(body.acks.as_ref())?;
    let encoding = Encoding::parse(body.encoding.as_deref())?;
    if body.messages.is_empty() {
        return Err(Problem::bad_request(
            "messages is empty: nothing to produce",
        ));
    }
    let timeout_ms = body.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if !(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(Problem::bad_request(format!(
            "timeout_ms must be {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}, not {timeout_ms}"
        )));
    }
    let now = crate::clock::now_ms();
    let mut records = Vec::with_capacity(body.messages.len());
    for (i, m) in body.messages.into_iter().enumerate() {
        let bad = |why: String| Problem::bad_request(format!("messages[{i}]: {why}"));
        let key = m
            .key
            .map(|k| encoding.decode_in(text, "key", &k))
            .transpose()
            .map_err(bad)?;
        let value = m
            .value
            .map(|v| encoding.decode_in(text, "value", &v))
            .transpose()
            .map_err(bad)?;
        let pairs: Vec<(String, Option<String>)> = match m.headers {
            None => Vec::new(),
            Some(Headers::Map(map)) => map.into_iter().collect(),
            Some(Headers::List(list)) => list.into_iter().map(|h| (h.key, h.value)).collect(),
        };
        let mut headers = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let value = v
                .map(|v| encoding.decode("a header value", &v))
                .transpose()
                .map_err(bad)?;
            headers.push((k, value));
        }
        let timestamp = m.timestamp.unwrap_or(now);
        if timestamp < 0 {
            return Err(bad(format!("timestamp {timestamp} is negative")));
        }
        let message = produce::Message {
            key,
            value,
            headers,
            timestamp,
        };
        records.push((m.partition, message));
    }
    Ok(Parsed {
        records,
        acks,
        timeout: Duration::from_millis(timeout_ms),
    })
}

/// Writes the messages; `Err` when the request as a whole cannot be served (the topic
/// does not exist).
async fn write(
    http: &HttpApi,
    who: &Caller,
    permit: &Permit,
    parsed: Parsed,
    fingerprint: u64,
) -> Result<Answer, Problem> {
    let topic = permit.topic();
    let auto_create = http.broker.settings().auto_create_topics;
    let state = http
        .broker
        .admin()
        .topic_or_create(who, topic, auto_create)
        .await
        .map_err(|e| {
            let detail = match &e {
                AdminError::UnknownTopic(_) => {
                    format!("topic {topic:?} does not exist (and auto.create.topics.enable is off)")
                }
                AdminError::Denied { .. } => {
                    format!("{e}: topic {topic:?} does not exist and producing would create it")
                }
                _ => e.to_string(),
            };
            let mut problem = Problem::from(&e);
            problem.detail = detail;
            problem
        })?;
    let partitions = state.record.partitions.len() as i32;
    let sticky = rand_partition(partitions);
    let mut results: Vec<Option<Outcome>> = vec![None; parsed.records.len()];
    // Per partition: the messages' indexes and their records, in request order.
    let mut batches: BTreeMap<i32, Vec<(usize, produce::Message)>> = BTreeMap::new();
    for (i, (asked, record)) in parsed.records.into_iter().enumerate() {
        let partition = match (asked, &record.key) {
            (Some(p), _) if (0..partitions).contains(&p) => p,
            (Some(p), _) => {
                results[i] = Some(Outcome::Failed {
                    partition: Some(p),
                    error: ApiError::from(&Error::UnknownTopicOrPartition {
                        topic: topic.to_string(),
                        partition: p,
                    })
                    .with_message(format!(
                        "topic {topic} has {partitions} partitions, so no partition {p}"
                    )),
                });
                continue;
            }
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => sticky,
        };
        batches.entry(partition).or_default().push((i, record));
    }
    let deadline = crate::clock::instant() + parsed.timeout;
    let mut pending = Vec::new();
    for (partition, records) in batches {
        let batch = produce::batch(records.iter().map(|(_, m)| m));
        let indexes: Vec<usize> = records.into_iter().map(|(i, _)| i).collect();
        let (producing, acks) = (http.broker.producing(), parsed.acks);
        pending.push(async move {
            let written = producing
                .write(permit, partition, &batch, acks, deadline)
                .await
                .map_err(|e| ApiError::from(&e));
            (indexes, partition, written)
        });
    }
    for (indexes, partition, outcome) in futures::future::join_all(pending).await {
        for (n, i) in indexes.into_iter().enumerate() {
            results[i] = Some(match &outcome {
                Ok(base) => Outcome::Written {
                    partition,
                    offset: base.map(|b| b + n as i64),
                },
                Err(e) => Outcome::Failed {
                    partition: Some(partition),
                    error: e.clone(),
                },
            });
        }
    }
    Ok(Answer {
        fingerprint,
        results: results
            .into_iter()
            .map(|r| r.expect("every message has an outcome"))
            .collect(),
    })
}

fn rand_partition(partitions: i32) -> i32 {
    (uuid::Uuid::new_v4().as_u128() % partitions.max(1) as u128) as i32
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use base64::Engine;

    use super::{Encoding, LENIENT, Request, base64_fast};

    #[test]
    fn keys_and_values_without_escapes_are_borrowed_from_the_body() {
        let body =
            br#"{"messages": [{"key": "k1", "value": "plain"}, {"value": "a\"b"}, {"key": null}]}"#;
        let request: Request = crate::http::json::parse(body, "produce").expect("parse");
        let m = &request.messages;
        assert!(
            matches!(&m[0].key, Some(Cow::Borrowed("k1"))),
            "{:?}",
            m[0].key
        );
        assert!(matches!(&m[0].value, Some(Cow::Borrowed("plain"))));
        // An escape needs a copy, unescaped.
        assert!(matches!(&m[1].value, Some(Cow::Owned(v)) if v == "a\"b"));
        assert!(m[2].key.is_none() && m[2].value.is_none());
    }

    #[test]
    fn the_fast_base64_decoder_agrees_with_the_lenient_one() {
        let mut texts: Vec<String> = Vec::new();
        for n in 0..200usize {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 131 + n * 7) as u8).collect();
            let padded = base64::engine::general_purpose::STANDARD.encode(&bytes);
            texts.push(padded.trim_end_matches('=').to_string());
            texts.push(padded);
        }
        // Trailing bits set, padding where none belongs, characters out of the alphabet,
        // whitespace, a lone character.
        for odd in [
            "QR==", "QUJ=", "QUI", "QQ", "Q===", "QUJD=", "QU J", "QU-_", "Q", "=",
        ] {
            texts.push(odd.to_string());
        }
        for text in &texts {
            let lenient = LENIENT.decode(text).ok();
            if let Some(fast) = base64_fast(text) {
                assert_eq!(Some(fast.to_vec()), lenient, "{text:?}");
            }
            let decoded = Encoding::Base64.decode("value", text).ok();
            assert_eq!(decoded.map(|b| b.to_vec()), lenient, "{text:?}");
        }
        // The common case takes the fast path.
        assert!(base64_fast(&texts[21]).is_some());
    }
}
