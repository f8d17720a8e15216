//! Consumers: read partitions to known end offsets, checking every value.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::kafka::client_config;
use crate::payload::{self, Tally};
use crate::report::histogram;

/// Where reading stops: the end offset of every partition. Set before reading (consume,
/// verify) or once the producers are done (end-to-end).
pub type Ends = OnceLock<Vec<i64>>;

#[derive(Debug, Clone)]
pub struct ConsumeSettings {
    pub bootstrap: String,
    pub topic: String,
    /// Count only values of this run (others are skipped); `None` counts every value.
    pub run: Option<u32>,
    /// Subscribe with this group; otherwise read `assigned` by assignment.
    pub group: Option<String>,
    /// `(partition, first offset)` to read, by assignment.
    pub assigned: Vec<(i32, i64)>,
    /// With nothing arriving for this long, stop and report what is missing.
    pub idle_timeout: Duration,
}

#[derive(Debug)]
pub struct Consumed {
    pub tally: Tally,
    pub records: u64,
    pub bytes: u64,
    pub corrupted: u64,
    pub first_error: Option<String>,
    /// Send to receipt, for values of this run.
    pub latency: Histogram<u64>,
    pub elapsed: Duration,
}

impl Consumed {
    pub fn new() -> Consumed {
        Consumed {
            tally: Tally::default(),
            records: 0,
            bytes: 0,
            corrupted: 0,
            first_error: None,
            latency: histogram(),
            elapsed: Duration::ZERO,
        }
    }

    /// Adds what another consumer of the same run read (they ran side by side).
    pub fn merge(&mut self, other: Consumed) {
        self.tally.merge(&other.tally);
        self.records += other.records;
        self.bytes += other.bytes;
        self.corrupted += other.corrupted;
        self.latency
            .add(&other.latency)
            .expect("same histogram bounds");
        self.elapsed = self.elapsed.max(other.elapsed);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Reads until every partition reached its end in `ends` (with a group: until the
/// records between the watermarks in `expected_total` arrived).
/// `ready`, if given, is waited on once the consumer has made its first fetch, so that
/// producers can start only once consumers are listening.
pub fn run(
    settings: &ConsumeSettings,
    ends: &Ends,
    expected_total: Option<u64>,
    ready: Option<&std::sync::Barrier>,
) -> anyhow::Result<Consumed> {
    let consumer = match consumer(settings) {
        Ok(c) => c,
        Err(e) => {
            // Never leave the producers waiting for a consumer that will not come.
            if let Some(ready) = ready {
                ready.wait();
            }
            return Err(e);
        }
    };
    let mut next: Vec<i64> = Vec::new();
    for &(p, offset) in &settings.assigned {
        if next.len() <= p as usize {
            next.resize(p as usize + 1, 0);
        }
        next[p as usize] = offset;
    }
    let mut out = Consumed::new();
    if let Some(ready) = ready {
        // In a cluster a broker learns of a new topic a moment after the one that created
        // it. A fetch sent on metadata without a leader is refused, and librdkafka then
        // waits `fetch.error.backoff.ms` (500 ms): the first records would measure that
        // backoff, not the broker. So producers start once this consumer knows every
        // leader, and the first poll has sent the first fetch.
        let assigned = |p: i32| settings.assigned.iter().any(|&(a, _)| a == p);
        if let Err(e) = crate::kafka::await_leaders(&consumer, &settings.topic, assigned) {
            out.first_error.get_or_insert_with(|| format!("{e:#}"));
        }
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
            out.first_error.get_or_insert_with(|| e.to_string());
        }
        ready.wait();
    }
    // Throughput counts from the first record, not from joining a group or connecting.
    let mut first_arrival: Option<Instant> = None;
    let mut last_arrival = Instant::now();
    loop {
        let done = match expected_total {
            Some(total) => out.records >= total,
            None => ends.get().is_some_and(|ends| {
                settings
                    .assigned
                    .iter()
                    .all(|&(p, _)| next[p as usize] >= ends[p as usize])
            }),
        };
        if done || last_arrival.elapsed() > settings.idle_timeout {
            break;
        }
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(e)) => {
                out.first_error.get_or_insert_with(|| e.to_string());
                continue;
            }
            Some(Ok(m)) => m,
        };
        let now = payload::now_ns();
        last_arrival = Instant::now();
        out.elapsed = first_arrival.get_or_insert(last_arrival).elapsed();
        let p = message.partition() as usize;
        if next.len() <= p {
            next.resize(p + 1, 0);
        }
        next[p] = next[p].max(message.offset() + 1);
        out.records += 1;
        let value = message.payload().unwrap_or_default();
        out.bytes += value.len() as u64;
        match payload::read(value) {
            None => {
                out.corrupted += 1;
                out.first_error.get_or_insert_with(|| {
                    format!(
                        "the value at {}-{} offset {} ({} bytes) fails its checksum",
                        message.topic(),
                        message.partition(),
                        message.offset(),
                        value.len()
                    )
                });
            }
            Some(stamp) if settings.run.is_none_or(|r| r == stamp.run) => {
                out.tally.add(stamp.producer, stamp.seq);
                if settings.run.is_some() {
                    let _ = out
                        .latency
                        .record(now.saturating_sub(stamp.sent_ns).max(1_000));
                }
            }
            Some(_) => {}
        }
    }
    Ok(out)
}

fn consumer(settings: &ConsumeSettings) -> anyhow::Result<BaseConsumer> {
    let mut config = client_config(&settings.bootstrap);
    config
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        // librdkafka stops fetching a partition once 100,000 messages wait in its local
        // queue and then backs off for up to a second; with 100 B records that capped a
        // consumer at about 200,000 records/s whatever the broker (kcat showed the same).
        // A benchmark wants the broker to be the limit.
        .set("queued.min.messages", "10000000")
        .set("fetch.queue.backoff.ms", "1");
    let consumer: BaseConsumer = match &settings.group {
        Some(group) => {
            let c: BaseConsumer = config.set("group.id", group).create()?;
            c.subscribe(&[&settings.topic])
                .context("cannot subscribe")?;
            c
        }
        None => {
            // librdkafka wants a group id even for assignment; it is never used.
            let c: BaseConsumer = config.set("group.id", "strata-bench-unused").create()?;
            let mut list = TopicPartitionList::new();
            for &(p, offset) in &settings.assigned {
                list.add_partition_offset(&settings.topic, p, Offset::Offset(offset))?;
            }
            c.assign(&list).context("cannot assign partitions")?;
            c
        }
    };
    Ok(consumer)
}
