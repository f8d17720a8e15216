//! Quotas at the protocol edge: what a request counts against its client's quotas, the
//! throttle time its answer carries, and the muting of the connection (KIP-219).
//!
//! - Produce counts its request's bytes (as Kafka: the whole request) against
//!   `producer_byte_rate`;
//! - a consumer's Fetch counts its answer's record bytes against `consumer_byte_rate`;
//!   a throttled fetch is answered without records (and they are not counted), so the
//!   client fetches them again once its wait is over;
//! - every request counts the time the agent spent on it (the time its handler's future
//!   was being polled, not the time it waited for replicas or a long poll) against
//!   `request_percentage`, in hundredths of a second per second, so 100 is one thread.
//!
//! Exempt, as in Kafka: followers' fetches and the agents' own requests (transaction
//! markers, the brokers' verification of transactions), ApiVersions and the SASL
//! exchange. The answer's `throttle_time_ms` is the largest of the throttles; the
//! connection is not read from until it has passed.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use tokio::time::Instant;

use super::{QuotaKind, Quotas};
use crate::context::RequestContext;

/// Until when a connection is not read from (its client is throttled).
#[derive(Debug, Clone, Default)]
pub struct Mute(Arc<Mutex<Option<Instant>>>);

impl Mute {
    /// Mutes until `until`, unless already muted longer.
    pub fn until(&self, until: Instant) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if m.is_none_or(|t| t < until) {
            *m = Some(until);
        }
    }

    /// When the connection may be read from again, if that is still to come.
    pub fn muted_until(&self) -> Option<Instant> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match *m {
            Some(t) if t > crate::clock::instant() => Some(t),
            _ => {
                *m = None;
                None
            }
        }
    }
}

/// One request's part in the quotas, from arrival to answer.
pub struct Metered {
    quotas: Arc<Quotas>,
    user: String,
    client_id: String,
    /// From the produce quota, decided when the request arrived.
    throttle: Duration,
    /// A consumer's fetch: its answer's records count.
    consumer_fetch: bool,
    mute: Mute,
}

/// Whether the request is the agents' own traffic or part of connecting, which no
/// quota slows down.
fn exempt(request: &RequestKind, api_version: i16) -> bool {
    match request {
        RequestKind::Fetch(r) => r.replica_id.0 >= 0,
        RequestKind::OffsetForLeaderEpoch(r) => r.replica_id.0 >= 0,
        RequestKind::AddPartitionsToTxn(_) => api_version >= 4,
        RequestKind::WriteTxnMarkers(_)
        | RequestKind::ApiVersions(_)
        | RequestKind::SaslHandshake(_)
        | RequestKind::SaslAuthenticate(_) => true,
        _ => false,
    }
}

/// Meters `request` (a frame of `frame_bytes`), or `None` when no quota is set or the
/// request is exempt.
pub fn meter(
    quotas: &Arc<Quotas>,
    ctx: &RequestContext,
    request: &RequestKind,
    frame_bytes: usize,
    mute: &Mute,
) -> Option<Metered> {
    if !quotas.any() || exempt(request, ctx.api_version) {
        return None;
    }
    let user = ctx.principal().name.clone();
    let client_id = ctx.client_id.clone();
    let throttle = match request {
        RequestKind::Produce(_) => {
            quotas.record(QuotaKind::Produce, &user, &client_id, frame_bytes as f64)
        }
        _ => Duration::ZERO,
    };
    // Muted at once: requests are handled pipelined here (Kafka's brokers handle one
    // at a time per connection), so waiting for the answer would let the requests
    // already sent through before the mute.
    if !throttle.is_zero() {
        mute.until(crate::clock::instant() + throttle);
    }
    Some(Metered {
        quotas: Arc::clone(quotas),
        user,
        client_id,
        throttle,
        consumer_fetch: matches!(request, RequestKind::Fetch(_)),
        mute: mute.clone(),
    })
}

impl Metered {
    /// Counts what the answer (and `busy`, the handler's time) adds, then sets the
    /// answer's throttle time and mutes the connection for it. `None`: an acks=0
    /// produce, which has no answer but mutes all the same.
    pub fn answer(self, response: Option<&mut ResponseKind>, busy: Duration) {
        let (user, client) = (self.user.as_str(), self.client_id.as_str());
        let hundredths = busy.as_secs_f64() * 100.0;
        let mut throttle =
            self.throttle.max(
                self.quotas
                    .record(QuotaKind::Request, user, client, hundredths),
            );
        if let Some(ResponseKind::Fetch(r)) = response.as_deref()
            && self.consumer_fetch
        {
            let bytes: usize = r
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
                .sum();
            let fetch = self
                .quotas
                .record(QuotaKind::Fetch, user, client, bytes as f64);
            throttle = throttle.max(fetch);
        }
        if throttle.is_zero() {
            return;
        }
        if let Some(response) = response {
            if let ResponseKind::Fetch(r) = response
                && self.consumer_fetch
            {
                // Throttled: the records are not sent (nor counted), and are fetched
                // again after the wait.
                let mut unsent = 0usize;
                for p in r.responses.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                    unsent += p.records.take().map_or(0, |b| b.len());
                }
                self.quotas
                    .unrecord(QuotaKind::Fetch, user, client, unsent as f64);
            }
            set_throttle_time(response, throttle.as_millis().min(i32::MAX as u128) as i32);
        }
        self.mute.until(crate::clock::instant() + throttle);
    }
}

/// The client id HTTP API requests count under: quotas on `user` apply to a principal's
/// HTTP and Kafka traffic alike, and one on this client id to the HTTP API as a whole.
pub const HTTP_CLIENT_ID: &str = "strata-http";

/// Counts an HTTP produce's body (`Produce`) or a consume's answer (`Fetch`) of `bytes`
/// for `user`; how long its answer is to be held back. HTTP has no throttle field and no
/// connection to mute: the answer itself waits, and a client calling one request at a
/// time (or each of its connections) gets the quota's rate.
pub fn http_throttle(quotas: &Quotas, kind: QuotaKind, user: &str, bytes: usize) -> Duration {
    if !quotas.any() {
        return Duration::ZERO;
    }
    quotas.record(kind, user, HTTP_CLIENT_ID, bytes as f64)
}

/// Sets the throttle time of any answer that has one (encoders leave it out of the
/// versions without the field).
fn set_throttle_time(response: &mut ResponseKind, ms: i32) {
    macro_rules! throttled {
        ($($kind:ident),* $(,)?) => {
            match response {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    throttled!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        CreatePartitions,
        DeleteGroups,
        ElectLeaders,
        IncrementalAlterConfigs,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeCluster,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
    );
}

/// A future that adds up the time spent polling the one inside it: the agent's own
/// work on a request, without the waits (for replicas, for a long poll's data).
pub struct Timed<F> {
    inner: F,
    busy: Duration,
}

impl<F> Timed<F> {
    pub fn new(inner: F, already: Duration) -> Timed<F> {
        Timed {
            inner,
            busy: already,
        }
    }
}

impl<F: std::future::Future + Unpin> std::future::Future for Timed<F> {
    type Output = (F::Output, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = crate::clock::instant();
        let polled = Pin::new(&mut self.inner).poll(cx);
        self.busy += started.elapsed();
        polled.map(|out| (out, self.busy))
    }
}
