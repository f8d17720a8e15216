//! Prometheus metrics at `GET /metrics`, through the `metrics` facade and its Prometheus
//! exporter (`docs/metrics.md` lists every series).
//!
//! Events are counted where they happen: requests (rate, errors by Kafka error name,
//! latency) at the protocol edge, bytes produced and fetched in those APIs, ISR shrinks
//! and expands, completed rebalances, object-store errors, and metastore transactions
//! (in `strata-metastore`). State is read when Prometheus scrapes, from what the agent
//! holds: partition offsets and sizes, replica lag, under-replicated and offline
//! partitions, consumer lag, tiering lag, connections and free disk. A gauge is only
//! ever set at a scrape, and one not set for [`GAUGE_IDLE`] is dropped, so the series
//! of a deleted partition or group go away instead of freezing at their last value.
//!
//! This module records; `observe.rs` sets the state gauges and renders.
//!
//! The recorder is process-wide (the `metrics` facade has one): several agents in one
//! test process share it. One `strata` process is one agent, so in production each
//! scrape target is one agent.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use metrics::{counter, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

/// Gauges not set by a scrape for this long are dropped (a deleted partition's).
const GAUGE_IDLE: Duration = Duration::from_secs(120);

/// Latency buckets, in seconds: 0.5 ms to 30 s (a long-polling fetch waits up to
/// `fetch.max.wait.ms`, a JoinGroup up to the rebalance timeout).
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Open Kafka connections of this process.
static CONNECTIONS: AtomicI64 = AtomicI64::new(0);

/// Open Kafka connections of this process, now.
pub fn open_connections() -> i64 {
    CONNECTIONS.load(Ordering::Relaxed)
}

/// The process's Prometheus recorder, installed on first use.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE))
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), BUCKETS)
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Another recorder may be installed already (an embedding program's): then the
        // events go there, and `/metrics` shows the state gauges only.
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!(
                "a metrics recorder is installed already; /metrics shows only what this one records"
            );
        }
        describe();
        handle
    })
}

/// Drains histogram samples into their buckets every few seconds, whether or not
/// anyone scrapes: until drained, samples are held one by one.
pub async fn upkeep(shutdown: tokio_util::sync::CancellationToken) -> crate::tasks::Stopped {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => handle().run_upkeep(),
            _ = shutdown.cancelled() => return crate::tasks::Stopped::Shutdown,
        }
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!("strata_requests_total", "Kafka requests answered, by API");
    describe_counter!(
        "strata_request_errors_total",
        "Error codes in Kafka responses (one per partition, group or topic that failed), by API and Kafka error name"
    );
    describe_histogram!(
        "strata_request_duration_seconds",
        "Time from a Kafka request's arrival to its response being ready, by API"
    );
    describe_counter!(
        "strata_produced_bytes_total",
        "Record-batch bytes appended by producers, by topic"
    );
    describe_counter!(
        "strata_fetched_bytes_total",
        "Record-batch bytes returned by Fetch, by topic and by who fetched (consumer or follower)"
    );
    describe_counter!(
        "strata_fetch_requests_total",
        "Fetch requests answered, by how they used incremental fetch sessions (KIP-227): none, opened a session, or incremental"
    );
    describe_counter!(
        "strata_isr_shrinks_total",
        "ISR shrinks committed by partitions led here"
    );
    describe_counter!(
        "strata_isr_expands_total",
        "ISR expands committed by partitions led here"
    );
    describe_counter!(
        "strata_replica_moves_total",
        "Partition moves the controller started, by reason (replace: a gone agent's replica; drain; balance: replicas; lead: preferred leaderships)"
    );
    describe_gauge!(
        "strata_replica_moves_in_flight",
        "Partitions being moved (reassignments in progress; reported by the controller, 0 elsewhere)"
    );
    describe_gauge!(
        "strata_replica_replacements_pending",
        "Replicas of gone agents waiting for replica_replacement_delay_ms before they are replaced (reported by the controller, 0 elsewhere)"
    );
    describe_gauge!(
        "strata_agents_draining",
        "Agents being drained (reported by the controller, 0 elsewhere)"
    );
    describe_counter!(
        "strata_replica_rebuild_bytes_total",
        "Bytes copied into replicas that were not in sync (rebuilding), by source (archive or leader)"
    );
    describe_counter!(
        "strata_background_bytes_total",
        "Bytes handed to the background pool, by kind (tiering: segments encoded for the archive; compaction: objects merged or compacted)"
    );
    describe_gauge!(
        "strata_background_queued",
        "Background jobs waiting for a thread of the pool"
    );
    describe_gauge!(
        "strata_replicas_rebuilding",
        "Replicas on this agent that follow but are not in the ISR (copying to catch up)"
    );
    describe_counter!(
        "strata_group_rebalances_total",
        "Rebalances completed by groups coordinated here"
    );
    describe_histogram!(
        "strata_group_rebalance_duration_seconds",
        "From a group's rebalance starting to its members having their assignments"
    );
    describe_counter!(
        "strata_tiering_errors_total",
        "Segments the tiering worker failed to archive, by cause (object_store, metastore, other)"
    );
    describe_counter!(
        "strata_quota_throttled_total",
        "Answers that carried a throttle time because the client was over a quota, by quota"
    );
    describe_counter!(
        "strata_quota_throttle_milliseconds_total",
        "Throttle time given to clients over a quota (their connections muted that long), by quota"
    );
    describe_counter!(
        "strata_http_authentication_failures_total",
        "HTTP API requests refused for missing or wrong credentials (401)"
    );
    describe_counter!(
        "strata_authorization_denied_total",
        "Requests (or parts of them) an ACL denied, by resource type and operation"
    );
    describe_counter!(
        "strata_metastore_transactions_total",
        "Metastore transactions run"
    );
    describe_histogram!(
        "strata_metastore_transaction_duration_seconds",
        "Metastore transaction latency, retries included"
    );
    describe_counter!(
        "strata_metastore_commits_total",
        "Commits of the embedded metastore's file, each one fsync: grouped transactions share one"
    );
    describe_counter!(
        "strata_metastore_transaction_retries_total",
        "Metastore transaction attempts retried after a conflict or a retryable error"
    );
    describe_counter!(
        "strata_metastore_transaction_errors_total",
        "Metastore transactions that failed"
    );
    describe_counter!(
        "strata_connections_accepted_total",
        "Kafka connections accepted"
    );
    describe_gauge!("strata_connections", "Open Kafka connections");
    describe_gauge!(
        "strata_partition_log_start_offset",
        "First offset of a local replica's log"
    );
    describe_gauge!(
        "strata_partition_log_end_offset",
        "Next offset of a local replica's log"
    );
    describe_gauge!(
        "strata_partition_high_watermark",
        "High watermark of a local replica"
    );
    describe_gauge!(
        "strata_partition_size_bytes",
        "Bytes of a local replica's log on disk"
    );
    describe_gauge!(
        "strata_partition_leader",
        "1 where this agent leads the partition, 0 where it follows"
    );
    describe_gauge!(
        "strata_replica_lag_records",
        "Records a follower is behind the leader's log end, as the leader sees it"
    );
    describe_gauge!(
        "strata_under_replicated_partitions",
        "Partitions led here whose ISR is smaller than their replica set"
    );
    describe_gauge!(
        "strata_under_min_isr_partitions",
        "Partitions led here whose ISR is below min.insync.replicas"
    );
    describe_gauge!("strata_leader_partitions", "Partitions led here");
    describe_gauge!(
        "strata_offline_partitions",
        "Partitions with no live leader (reported by the controller; 0 elsewhere)"
    );
    describe_gauge!(
        "strata_active_controller",
        "1 on the agent holding the controller lease"
    );
    describe_gauge!(
        "strata_consumer_group_lag_records",
        "High watermark minus the group's committed offset, for partitions led here"
    );
    describe_gauge!(
        "strata_consumer_group_lag_seconds",
        "Age of the first batch the group has not consumed (0 when caught up), for partitions led here"
    );
    describe_gauge!(
        "strata_tiering_lag_records",
        "Records of a partition led here not archived yet"
    );
    describe_gauge!(
        "strata_tiering_lag_bytes",
        "Bytes of the local segments holding records not archived yet"
    );
    describe_gauge!(
        "strata_tiering_lag_seconds",
        "Age of the oldest record not archived yet (0 when all is archived)"
    );
    describe_gauge!(
        "strata_data_dir_free_bytes",
        "Free bytes of the file system holding the data directory"
    );
}

/// The name Kafka gives an API (`Produce`, `Fetch`, `JoinGroup`...), made once per API.
fn api_name(api: ApiKey) -> &'static str {
    static NAMES: OnceLock<std::sync::RwLock<std::collections::HashMap<i16, &'static str>>> =
        OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    if let Some(name) = names
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(api as i16))
    {
        return name;
    }
    let mut names = names.write().unwrap_or_else(|p| p.into_inner());
    // At most one leaked string per API key: a bounded set.
    names
        .entry(api as i16)
        .or_insert_with(|| Box::leak(format!("{api:?}").into_boxed_str()))
}

/// Kafka's name for an error code (`NOT_LEADER_OR_FOLLOWER`), as its clients and tools
/// print it.
pub fn kafka_error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(ResponseError::Unknown(code)) => format!("UNKNOWN_ERROR_CODE_{code}"),
        Some(known) => {
            let camel = known.to_string();
            let mut name = String::with_capacity(camel.len() + 8);
            for (i, c) in camel.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            name
        }
    }
}

/// A request answered: its latency, and the error codes in its response.
pub fn request_done(api: ApiKey, took: Duration, response: Option<&ResponseKind>) {
    let name = api_name(api);
    counter!("strata_requests_total", "api" => name).increment(1);
    histogram!("strata_request_duration_seconds", "api" => name).record(took.as_secs_f64());
    if let Some(response) = response {
        for_each_error(response, |code| {
            counter!(
                "strata_request_errors_total",
                "api" => name,
                "error" => kafka_error_name(code),
            )
            .increment(1);
        });
    }
}

/// Calls `f` with every non-zero error code of a response: the top-level one and those
/// of each partition, topic or group. The APIs not listed count requests only.
fn for_each_error(response: &ResponseKind, mut f: impl FnMut(i16)) {
    let mut one = |code: i16| {
        if code != 0 {
            f(code)
        }
    };
    match response {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| one(p.error_code)),
        ResponseKind::Fetch(r) => {
            one(r.error_code);
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| one(p.error_code));
        }
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| one(p.error_code)),
        ResponseKind::Metadata(r) => r.topics.iter().for_each(|t| one(t.error_code)),
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| one(p.error_code)),
        ResponseKind::OffsetFetch(r) => {
            one(r.error_code);
            r.groups.iter().for_each(|g| one(g.error_code));
        }
        ResponseKind::FindCoordinator(r) => {
            one(r.error_code);
            r.coordinators.iter().for_each(|c| one(c.error_code));
        }
        ResponseKind::JoinGroup(r) => one(r.error_code),
        ResponseKind::SyncGroup(r) => one(r.error_code),
        ResponseKind::Heartbeat(r) => one(r.error_code),
        ResponseKind::LeaveGroup(r) => one(r.error_code),
        ResponseKind::DescribeGroups(r) => r.groups.iter().for_each(|g| one(g.error_code)),
        ResponseKind::ListGroups(r) => one(r.error_code),
        ResponseKind::DeleteGroups(r) => r.results.iter().for_each(|g| one(g.error_code)),
        ResponseKind::CreateTopics(r) => r.topics.iter().for_each(|t| one(t.error_code)),
        ResponseKind::DeleteTopics(r) => r.responses.iter().for_each(|t| one(t.error_code)),
        ResponseKind::CreatePartitions(r) => r.results.iter().for_each(|t| one(t.error_code)),
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| one(p.error_code)),
        ResponseKind::InitProducerId(r) => one(r.error_code),
        ResponseKind::AddOffsetsToTxn(r) => one(r.error_code),
        ResponseKind::EndTxn(r) => one(r.error_code),
        ResponseKind::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| one(p.error_code)),
        ResponseKind::AddPartitionsToTxn(r) => {
            one(r.error_code);
            r.results_by_transaction
                .iter()
                .flat_map(|t| &t.topic_results)
                .flat_map(|t| &t.results_by_partition)
                .for_each(|p| one(p.partition_error_code));
            r.results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| &t.results_by_partition)
                .for_each(|p| one(p.partition_error_code));
        }
        ResponseKind::OffsetForLeaderEpoch(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| one(p.error_code)),
        _ => {}
    }
}

/// Bytes appended to `topic` by a producer.
pub fn produced(topic: &str, bytes: usize) {
    counter!("strata_produced_bytes_total", "topic" => topic.to_string()).increment(bytes as u64);
}

/// Bytes of `topic` returned by a fetch, to a follower or a consumer.
pub fn fetched(topic: &str, bytes: usize, follower: bool) {
    let by = if follower { "follower" } else { "consumer" };
    counter!("strata_fetched_bytes_total", "topic" => topic.to_string(), "by" => by)
        .increment(bytes as u64);
}

/// A partition read found its records outside the page cache and waited for the disk
/// on the blocking pool, not on a request thread.
pub fn read_from_disk() {
    counter!("strata_disk_reads_total").increment(1);
}

/// A fetch was answered: `session` is `none`, `opened` or `incremental`.
pub fn fetch_answered(session: &'static str) {
    counter!("strata_fetch_requests_total", "session" => session).increment(1);
}

/// The controller started moving a partition's replicas (`why`: replace, drain,
/// balance, lead).
pub fn replica_move_started(why: &'static str) {
    counter!("strata_replica_moves_total", "reason" => why).increment(1);
}

/// Bytes a replica not in sync copied, from `source` (archive or leader).
pub fn rebuilt(source: &'static str, bytes: usize) {
    counter!("strata_replica_rebuild_bytes_total", "source" => source).increment(bytes as u64);
}

/// An ISR change committed by a partition led here.
pub fn isr_changed(before: usize, after: usize) {
    if after < before {
        counter!("strata_isr_shrinks_total").increment(1);
    } else if after > before {
        counter!("strata_isr_expands_total").increment(1);
    }
}

/// A group's rebalance completed (its members have their assignments).
pub fn rebalance_completed(took_ms: i64) {
    counter!("strata_group_rebalances_total").increment(1);
    histogram!("strata_group_rebalance_duration_seconds").record(took_ms.max(0) as f64 / 1000.0);
}

/// A Kafka connection closed as soon as it was accepted, for `why` (the setting).
pub fn connection_refused(why: &'static str) {
    counter!("strata_connections_refused_total", "reason" => why).increment(1);
}

/// A client over its `quota` is throttled for `time`.
pub fn quota_throttled(quota: &'static str, time: std::time::Duration) {
    counter!("strata_quota_throttled_total", "quota" => quota).increment(1);
    counter!("strata_quota_throttle_milliseconds_total", "quota" => quota)
        .increment(time.as_millis() as u64);
}

/// An HTTP request's credentials were missing or wrong (401).
pub fn http_authentication_failed() {
    counter!("strata_http_authentication_failures_total").increment(1);
}

/// The authorizer denied `operation` on a resource of type `resource_type`.
pub fn authorization_denied(resource_type: &'static str, operation: &'static str) {
    counter!(
        "strata_authorization_denied_total",
        "resource_type" => resource_type,
        "operation" => operation
    )
    .increment(1);
}

/// One SASL authentication finished: `outcome` is `ok` or `failed`; `reauth` tells a
/// re-authentication (KIP-368) from a connection's first.
pub fn sasl_authentication(mechanism: &'static str, outcome: &'static str, reauth: bool) {
    counter!(
        "strata_sasl_authentications_total",
        "mechanism" => mechanism,
        "outcome" => outcome,
        "reauthentication" => if reauth { "true" } else { "false" },
    )
    .increment(1);
}

/// One TLS handshake on an SSL or SASL_SSL listener finished: `outcome` is `ok` or
/// `failed` (no certificate where one is required, an untrusted one, not TLS at all).
pub fn tls_handshake(outcome: &'static str) {
    counter!("strata_tls_handshakes_total", "outcome" => outcome).increment(1);
}

/// A Kafka connection opened; the guard counts it closed when dropped.
pub fn connection_opened() -> ConnectionCounted {
    counter!("strata_connections_accepted_total").increment(1);
    CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    ConnectionCounted(())
}

/// Counts one open connection while it lives.
#[derive(Debug)]
pub struct ConnectionCounted(());

impl Drop for ConnectionCounted {
    fn drop(&mut self) {
        CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
    }
}
