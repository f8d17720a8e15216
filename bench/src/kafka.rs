//! Talking to the broker through librdkafka: client settings, the topic, watermarks.

use std::time::Duration;

use anyhow::{Context, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;

/// How long any metadata or admin call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "strata-bench");
    c
}

/// Creates `topic` with `partitions` partitions, or uses it if it exists; returns its
/// partition count once every partition has a leader.
pub fn ensure_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication_factor: i32,
) -> anyhow::Result<i32> {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap)
        .create()
        .context("cannot create the admin client")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let new = NewTopic::new(
        topic,
        partitions,
        TopicReplication::Fixed(replication_factor),
    );
    let options = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
    let results = runtime
        .block_on(admin.create_topics([&new], &options))
        .context("CreateTopics failed")?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => bail!("cannot create topic {name}: {code}"),
        }
    }
    let consumer: BaseConsumer = client_config(bootstrap).create()?;
    await_leaders(&consumer, topic, |_| true)
}

/// Asks for `topic`'s metadata on `client`'s own connections (which fills its cache)
/// until the topic has partitions and every one `wanted` picks has a leader, for at most
/// [`CALL_TIMEOUT`]; returns the partition count.
pub fn await_leaders(
    client: &BaseConsumer,
    topic: &str,
    wanted: impl Fn(i32) -> bool,
) -> anyhow::Result<i32> {
    let deadline = std::time::Instant::now() + CALL_TIMEOUT;
    loop {
        let metadata = client
            .fetch_metadata(Some(topic), CALL_TIMEOUT)
            .context("Metadata failed")?;
        if let Some(t) = metadata.topics().iter().find(|t| t.name() == topic)
            && t.error().is_none()
            && !t.partitions().is_empty()
            && t.partitions()
                .iter()
                .filter(|p| wanted(p.id()))
                .all(|p| p.leader() >= 0 && p.error().is_none())
        {
            return Ok(t.partitions().len() as i32);
        }
        if std::time::Instant::now() > deadline {
            bail!("topic {topic} has no leader for every partition after {CALL_TIMEOUT:?}");
        }
        // Metadata has no way to wait for a leader: ask again shortly.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `(low, high)` watermark of every partition, by index.
///
/// In a cluster a broker learns of a new topic, or of a partition's new leader, a moment
/// after the one that made the change: until then it answers that the partition is
/// unknown or has no leader there, as a Kafka broker whose metadata lags does. Those
/// answers are asked again, as clients do, until [`CALL_TIMEOUT`].
pub fn watermarks(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<Vec<(i64, i64)>> {
    let consumer: BaseConsumer = client_config(bootstrap).create()?;
    let deadline = std::time::Instant::now() + CALL_TIMEOUT;
    (0..partitions)
        .map(|p| {
            loop {
                match consumer.fetch_watermarks(topic, p, CALL_TIMEOUT) {
                    Err(e) if retried(&e) && std::time::Instant::now() < deadline => {
                        // Metadata has no way to wait for a change: ask again shortly,
                        // refreshing this client's cache (librdkafka keeps what it was
                        // told, a topic without that partition included, for a while).
                        std::thread::sleep(Duration::from_millis(100));
                        let _ = consumer.fetch_metadata(Some(topic), CALL_TIMEOUT);
                    }
                    marks => {
                        break marks
                            .with_context(|| format!("cannot read the watermarks of {topic}-{p}"));
                    }
                }
            }
        })
        .collect()
}

/// Answers a client asks again: the broker has not caught up with a change yet.
fn retried(e: &rdkafka::error::KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownPartition
                | RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::NotLeaderForPartition
        )
    )
}

/// The partition count of an existing topic.
pub fn partition_count(bootstrap: &str, topic: &str) -> anyhow::Result<i32> {
    let consumer: BaseConsumer = client_config(bootstrap).create()?;
    let metadata = consumer
        .fetch_metadata(Some(topic), CALL_TIMEOUT)
        .context("Metadata failed")?;
    match metadata.topics().iter().find(|t| t.name() == topic) {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(t.partitions().len() as i32)
        }
        _ => bail!("topic {topic} does not exist"),
    }
}
