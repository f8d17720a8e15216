//! Producers: one librdkafka producer and one sending thread each. Acknowledgements
//! arrive in the delivery callback, which times them and marks the record as acked.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::kafka::client_config;
use crate::payload::{self, Stamp, Tally, Writer};
use crate::report::histogram;

/// How producers send.
#[derive(Debug, Clone)]
pub struct ProduceSettings {
    pub bootstrap: String,
    pub topic: String,
    pub run: u32,
    pub size: usize,
    pub producers: u32,
    /// Records per producer, or until `duration` passes.
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    pub acks: String,
    pub compression: String,
    pub linger_ms: u32,
    pub batch_bytes: u32,
    pub idempotence: bool,
    /// Records per second over all producers; 0 = as fast as possible.
    pub rate: u64,
    /// Records per transaction; 0: not transactional.
    pub transaction_records: u64,
}

/// What the producers' acknowledgements said.
#[derive(Debug)]
pub struct Acks {
    pub acked: Tally,
    pub acked_bytes: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    /// Send (or due time) to acknowledgement.
    pub latency: Histogram<u64>,
}

impl Acks {
    pub fn new() -> Acks {
        Acks {
            acked: Tally::default(),
            acked_bytes: 0,
            failed: 0,
            first_error: None,
            latency: histogram(),
        }
    }

    pub fn merge(&mut self, other: &mut Acks) {
        self.acked.merge(&other.acked);
        self.acked_bytes += other.acked_bytes;
        self.failed += other.failed;
        if self.first_error.is_none() {
            self.first_error = other.first_error.take();
        }
        self.latency
            .add(&other.latency)
            .expect("same histogram bounds");
    }
}

/// What the producers did.
#[derive(Debug)]
pub struct Produced {
    pub acks: Acks,
    pub elapsed: Duration,
    /// Transactions committed, and each commit's duration (ns).
    pub commits: u64,
    pub commit_latency: Histogram<u64>,
}

struct AckContext {
    acks: Mutex<Acks>,
}

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let now = payload::now_ns();
        let mut acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(message) => {
                use rdkafka::Message;
                let value = message.payload().unwrap_or_default();
                match payload::read(value) {
                    Some(stamp) => {
                        acks.acked.add(stamp.producer, stamp.seq);
                        acks.acked_bytes += value.len() as u64;
                        let _ = acks
                            .latency
                            .record(now.saturating_sub(stamp.sent_ns).max(1_000));
                    }
                    None => {
                        acks.failed += 1;
                        acks.first_error
                            .get_or_insert_with(|| "an acknowledged value does not check".into());
                    }
                }
            }
            Err((e, _)) => {
                acks.failed += 1;
                acks.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

fn producer(settings: &ProduceSettings, index: u32) -> anyhow::Result<BaseProducer<AckContext>> {
    let mut config = client_config(&settings.bootstrap);
    if settings.transaction_records > 0 {
        config
            .set(
                "transactional.id",
                format!("strata-bench-{}-{index}", settings.run),
            )
            // librdkafka wants message.timeout.ms (set below) within it.
            .set("transaction.timeout.ms", "120000");
    }
    config
        .set("acks", &settings.acks)
        .set("compression.type", &settings.compression)
        .set("linger.ms", settings.linger_ms.to_string())
        .set("batch.size", settings.batch_bytes.to_string())
        .set("enable.idempotence", settings.idempotence.to_string())
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.timeout.ms", "120000");
    config
        .create_with_context(AckContext {
            acks: Mutex::new(Acks::new()),
        })
        .context("cannot create a producer")
}

/// The longest sleep between two looks at the delivery reports while a producer waits.
const PACE_STEP: Duration = Duration::from_micros(100);

/// Serves the delivery reports librdkafka has ready, without waiting for more. The
/// producers wait by sleeping, not in `poll`: rust-rdkafka's poll is a busy loop for
/// any part of its timeout under a millisecond (it asks librdkafka for the remainder in
/// whole milliseconds, 0, until its deadline), which at a fixed rate kept a core busy
/// in the load generator, taken from the broker under test on a small machine.
fn serve_ready(producer: &BaseProducer<AckContext>) {
    // One event (a batch of reports) per call; a few calls drain what a wait gathers.
    for _ in 0..8 {
        producer.poll(Duration::ZERO);
    }
}

/// Runs the producers to the end (count or duration) and waits for every delivery.
pub fn run(settings: &ProduceSettings) -> anyhow::Result<Produced> {
    let producers = (0..settings.producers)
        .map(|i| producer(settings, i))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if settings.transaction_records > 0 {
        for p in &producers {
            p.init_transactions(Duration::from_secs(30))
                .context("init_transactions")?;
        }
    }
    let commits = Mutex::new((0u64, histogram()));
    let start = Instant::now();
    let start_ns = payload::now_ns();
    let per_producer_rate = settings.rate as f64 / f64::from(settings.producers);
    std::thread::scope(|scope| {
        for (index, producer) in producers.iter().enumerate() {
            let settings = settings.clone();
            let commits = &commits;
            scope.spawn(move || {
                send_all(
                    producer,
                    index as u32,
                    &settings,
                    per_producer_rate,
                    start,
                    start_ns,
                    commits,
                )
            });
        }
    });
    for p in &producers {
        // Everything was sent; wait (up to the message timeout) for the last acks.
        let _ = p.flush(Duration::from_secs(130));
    }
    let elapsed = start.elapsed();
    let mut acks = Acks::new();
    for p in &producers {
        acks.merge(&mut p.context().acks.lock().unwrap_or_else(|e| e.into_inner()));
    }
    let (commits, commit_latency) = commits.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(Produced {
        acks,
        elapsed,
        commits,
        commit_latency,
    })
}

fn send_all(
    producer: &BaseProducer<AckContext>,
    index: u32,
    settings: &ProduceSettings,
    rate: f64,
    start: Instant,
    start_ns: u64,
    commits: &Mutex<(u64, Histogram<u64>)>,
) {
    let per_txn = settings.transaction_records;
    let commit = |open: &mut bool| {
        if !std::mem::take(open) {
            return;
        }
        let began = Instant::now();
        // Deliver first, serving callbacks at a fine grain: rust-rdkafka's own flush in
        // commit_transaction polls in steps of up to 100 ms.
        while producer.in_flight_count() > 0 && began.elapsed() < Duration::from_secs(60) {
            serve_ready(producer);
            std::thread::sleep(Duration::from_micros(50));
        }
        let committed = producer.commit_transaction(Duration::from_secs(60));
        let took = began.elapsed().as_nanos() as u64;
        let mut c = commits.lock().unwrap_or_else(|p| p.into_inner());
        match committed {
            Ok(()) => {
                c.0 += 1;
                let _ = c.1.record(took.max(1));
            }
            Err(e) => {
                let ctx = producer.context();
                let mut acks = ctx.acks.lock().unwrap_or_else(|p| p.into_inner());
                acks.failed += 1;
                acks.first_error
                    .get_or_insert_with(|| format!("commit_transaction: {e}"));
            }
        }
    };
    let mut open = false;
    let mut writer = Writer::new(
        settings.size,
        u64::from(settings.run) << 32 | u64::from(index),
    );
    let mut seq = 0u64;
    loop {
        if settings.count.is_some_and(|n| seq >= n)
            || settings.duration.is_some_and(|d| start.elapsed() >= d)
        {
            commit(&mut open);
            return;
        }
        if per_txn > 0 && !open {
            if let Err(e) = producer.begin_transaction() {
                let ctx = producer.context();
                let mut acks = ctx.acks.lock().unwrap_or_else(|p| p.into_inner());
                acks.failed += 1;
                acks.first_error
                    .get_or_insert_with(|| format!("begin_transaction: {e}"));
                return;
            }
            open = true;
        }
        // At a fixed rate, each record has a due time; latency counts from it, so a
        // stall in the broker shows up in the figures instead of slowing the load.
        let sent_ns = if rate > 0.0 {
            let due_ns = start_ns + (seq as f64 / rate * 1e9) as u64;
            loop {
                let now = payload::now_ns();
                if now >= due_ns {
                    break;
                }
                serve_ready(producer);
                std::thread::sleep(Duration::from_nanos(due_ns - now).min(PACE_STEP));
            }
            due_ns
        } else {
            payload::now_ns()
        };
        let stamp = Stamp {
            run: settings.run,
            producer: index,
            seq,
            sent_ns,
        };
        let mut record: BaseRecord<'_, [u8], [u8]> =
            BaseRecord::to(&settings.topic).payload(writer.value(stamp));
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    // The local queue is full: serve acknowledgements until there is room.
                    serve_ready(producer);
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => {
                    let ctx = producer.context();
                    let mut acks = ctx.acks.lock().unwrap_or_else(|p| p.into_inner());
                    acks.failed += 1;
                    acks.first_error.get_or_insert_with(|| e.to_string());
                    break;
                }
            }
        }
        seq += 1;
        if per_txn > 0 && seq.is_multiple_of(per_txn) {
            commit(&mut open);
        } else if seq.is_multiple_of(1024) {
            producer.poll(Duration::ZERO);
        }
    }
}
