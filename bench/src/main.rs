//! `strata-bench`: a load generator for any Kafka-compatible broker, on librdkafka, so
//! its figures are what real clients see. It produces, consumes or both (end-to-end),
//! prints throughput and latency percentiles, and reads back every record it sent to
//! check that none was lost, duplicated or corrupted; it exits non-zero if one was.
//!
//! ```text
//! strata-bench produce --records 1000000 --size 100 --partitions 8 --acks all
//! strata-bench consume --topic orders
//! strata-bench e2e --duration-s 30 --rate 20000
//! strata-bench produce-http --http 127.0.0.1:9644 --size 1024 --batch 100
//! ```
// A load generator measures real time: it reads the system clocks directly.
#![allow(clippy::disallowed_methods)]

mod consume;
mod http;
mod kafka;
mod payload;
mod produce;
mod report;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::consume::{ConsumeSettings, Ends};
use crate::produce::ProduceSettings;
use crate::report::{Latency, Report, Verification};

#[derive(Debug, Parser)]
#[command(
    name = "strata-bench",
    version,
    about = "Load generator for Kafka-compatible brokers"
)]
struct Cli {
    /// Bootstrap address of the broker (any Kafka-compatible broker).
    #[arg(long, global = true, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Also write the report as JSON to this file ("-" for stdout, after the table).
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Produce as fast as possible (or at --rate) and time acknowledgements.
    Produce(ProduceArgs),
    /// Read a topic from its start to the end offsets it had when the run began.
    Consume(ConsumeArgs),
    /// Producers and consumers together; latency is send to receipt.
    E2e(E2eArgs),
    /// Produce through strata's HTTP API (base64 values, one request of --batch
    /// records after another per producer); read back over Kafka.
    ProduceHttp(ProduceHttpArgs),
}

#[derive(Debug, Clone, Args)]
struct ProduceHttpArgs {
    #[command(flatten)]
    produce: ProduceArgs,
    /// The HTTP API (host:port) of the agent to send to.
    #[arg(long, default_value = "127.0.0.1:9644")]
    http: String,
    /// Records per request.
    #[arg(long, default_value_t = 100)]
    batch: usize,
}

#[derive(Debug, Clone, Args)]
struct ProduceArgs {
    /// Topic to use; created if missing. Default: a new topic per run.
    #[arg(long)]
    topic: Option<String>,
    /// Partitions of a topic this run creates.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Replication factor of a topic this run creates.
    #[arg(long, default_value_t = 1)]
    replication_factor: i32,
    /// Value size in bytes (at least 32: a header and a checksum ride in each value).
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Records per producer (default: 1,000,000 unless --duration-s is given).
    #[arg(long)]
    records: Option<u64>,
    /// Produce for this many seconds instead of a record count.
    #[arg(long)]
    duration_s: Option<f64>,
    /// Producer clients, each with its own sending thread.
    #[arg(long, default_value_t = 1)]
    producers: u32,
    /// acks.
    #[arg(long, default_value = "all", value_parser = ["0", "1", "all"])]
    acks: String,
    /// compression.type.
    #[arg(long, default_value = "none", value_parser = ["none", "gzip", "snappy", "lz4", "zstd"])]
    compression: String,
    /// linger.ms.
    #[arg(long, default_value_t = 5)]
    linger_ms: u32,
    /// batch.size in bytes.
    #[arg(long, default_value_t = 1_048_576)]
    batch_bytes: u32,
    /// enable.idempotence (then any duplicate fails the run).
    #[arg(long)]
    idempotence: bool,
    /// Records per second over all producers (0: as fast as possible).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Skip reading everything back (figures only; no loss check).
    #[arg(long)]
    no_verify: bool,
    /// Records per transaction: each producer is transactional (a transactional.id of
    /// its own) and commits every this many records; 0: not transactional.
    #[arg(long, default_value_t = 0)]
    transaction_records: u64,
}

#[derive(Debug, Clone, Args)]
struct ConsumeArgs {
    #[arg(long)]
    topic: String,
    /// Consume as this group (subscribe); default: assign every partition.
    #[arg(long)]
    group: Option<String>,
    /// Stop after this long without a record.
    #[arg(long, default_value_t = 30.0)]
    idle_timeout_s: f64,
}

#[derive(Debug, Clone, Args)]
struct E2eArgs {
    #[command(flatten)]
    produce: ProduceArgs,
    /// Consumer clients, each assigned a share of the partitions.
    #[arg(long, default_value_t = 1)]
    consumers: u32,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(report) => {
            report.print_table();
            if let Err(e) = write_json(&cli, &report) {
                eprintln!("strata-bench: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
            if report.ok {
                std::process::ExitCode::SUCCESS
            } else {
                eprintln!(
                    "strata-bench: FAILED: records were lost, corrupted, duplicated or not acknowledged"
                );
                std::process::ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("strata-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn write_json(cli: &Cli, report: &Report) -> anyhow::Result<()> {
    let Some(path) = &cli.json else { return Ok(()) };
    let text = serde_json::to_string_pretty(report)?;
    if path.as_os_str() == "-" {
        println!("{text}");
    } else {
        std::fs::write(path, text + "\n")?;
    }
    Ok(())
}

fn run(cli: &Cli) -> anyhow::Result<Report> {
    match &cli.mode {
        Mode::Produce(args) => produce_mode(cli, args),
        Mode::Consume(args) => consume_mode(cli, args),
        Mode::E2e(args) => e2e_mode(cli, args),
        Mode::ProduceHttp(args) => produce_http_mode(cli, args),
    }
}

fn run_id() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    (nanos as u32) ^ std::process::id().rotate_left(16)
}

/// `(low, high)` watermark of each partition, by index.
type Watermarks = Vec<(i64, i64)>;

/// Reading stops at these high watermarks.
fn ends_at_high_watermarks(marks: &[(i64, i64)]) -> Ends {
    let ends = Ends::new();
    ends.set(marks.iter().map(|&(_, high)| high).collect())
        .expect("a new OnceLock is empty");
    ends
}

/// Validates the arguments and prepares the topic; returns the settings, the partition
/// count and the watermarks before the run.
fn prepare(
    cli: &Cli,
    args: &ProduceArgs,
    mode: &str,
) -> anyhow::Result<(ProduceSettings, i32, Watermarks)> {
    anyhow::ensure!(
        args.size >= payload::MIN_SIZE,
        "--size must be at least {} bytes",
        payload::MIN_SIZE
    );
    anyhow::ensure!(args.producers > 0, "--producers must be at least 1");
    let run = run_id();
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| format!("strata-bench-{mode}-{run:08x}"));
    let partitions = kafka::ensure_topic(
        &cli.bootstrap,
        &topic,
        args.partitions,
        args.replication_factor,
    )?;
    let before = kafka::watermarks(&cli.bootstrap, &topic, partitions)?;
    let duration = args.duration_s.map(Duration::from_secs_f64);
    let settings = ProduceSettings {
        bootstrap: cli.bootstrap.clone(),
        topic,
        run,
        size: args.size,
        producers: args.producers,
        count: match (args.records, duration) {
            (Some(n), _) => Some(n),
            (None, Some(_)) => None,
            (None, None) => Some(1_000_000),
        },
        duration,
        acks: args.acks.clone(),
        compression: args.compression.clone(),
        linger_ms: args.linger_ms,
        batch_bytes: args.batch_bytes,
        idempotence: args.idempotence || args.transaction_records > 0,
        rate: args.rate,
        transaction_records: args.transaction_records,
    };
    Ok((settings, partitions, before))
}

fn produce_settings_json(args: &ProduceArgs, partitions: i32) -> serde_json::Value {
    json!({
        "size": args.size,
        "partitions": partitions,
        "producers": args.producers,
        "acks": args.acks,
        "compression": args.compression,
        "linger_ms": args.linger_ms,
        "batch_bytes": args.batch_bytes,
        "idempotence": args.idempotence || args.transaction_records > 0,
        "rate": args.rate,
        "transaction_records": args.transaction_records,
    })
}

/// A consumer of this run's values, by assignment of the partitions `pick` selects,
/// from their high watermarks `before` the run.
fn reader(
    settings: &ProduceSettings,
    before: &[(i64, i64)],
    pick: impl Fn(usize) -> bool,
    idle_timeout: Duration,
) -> ConsumeSettings {
    ConsumeSettings {
        bootstrap: settings.bootstrap.clone(),
        topic: settings.topic.clone(),
        run: Some(settings.run),
        group: None,
        assigned: before
            .iter()
            .enumerate()
            .filter(|(p, _)| pick(*p))
            .map(|(p, &(_, high))| (p as i32, high))
            .collect(),
        idle_timeout,
    }
}

/// Reads back `[before.high, end)` of every partition and checks it against what was
/// acknowledged.
fn verify(
    settings: &ProduceSettings,
    before: &[(i64, i64)],
    acked: &payload::Tally,
    failed_sends: u64,
) -> anyhow::Result<Verification> {
    let after = kafka::watermarks(&settings.bootstrap, &settings.topic, before.len() as i32)?;
    let ends = ends_at_high_watermarks(&after);
    let read = consume::run(
        &reader(settings, before, |_| true, Duration::from_secs(30)),
        &ends,
        None,
        None,
    )?;
    Ok(compare(acked, &read, failed_sends))
}

fn compare(acked: &payload::Tally, read: &consume::Consumed, failed_sends: u64) -> Verification {
    let lost = acked
        .iter()
        .filter(|&(p, s)| !read.tally.contains(p, s))
        .count() as u64;
    Verification {
        expected: acked.distinct,
        received: read.tally.distinct,
        lost,
        duplicated: read.tally.duplicated,
        corrupted: read.corrupted,
        failed_sends,
        first_error: read.first_error.clone(),
    }
}

/// What a producing run's acknowledgements and (unless `no_verify`) its read-back say,
/// with the producers' first error where reading back found none.
fn checked(
    settings: &ProduceSettings,
    before: &[(i64, i64)],
    produced: &produce::Produced,
    no_verify: bool,
) -> anyhow::Result<Verification> {
    let mut verification = if no_verify {
        Verification {
            expected: produced.acks.acked.distinct,
            failed_sends: produced.acks.failed,
            ..Verification::default()
        }
    } else {
        verify(settings, before, &produced.acks.acked, produced.acks.failed)?
    };
    if verification.first_error.is_none() {
        verification.first_error = produced.acks.first_error.clone();
    }
    Ok(verification)
}

fn produce_mode(cli: &Cli, args: &ProduceArgs) -> anyhow::Result<Report> {
    let (settings, partitions, before) = prepare(cli, args, "produce")?;
    let produced = produce::run(&settings)?;
    let verification = checked(&settings, &before, &produced, args.no_verify)?;
    let seconds = produced.elapsed.as_secs_f64();
    Ok(Report {
        mode: "produce".into(),
        bootstrap: cli.bootstrap.clone(),
        topic: settings.topic.clone(),
        settings: produce_settings_json(args, partitions),
        records: produced.acks.acked.distinct,
        bytes: produced.acks.acked_bytes,
        seconds,
        records_per_s: produced.acks.acked.distinct as f64 / seconds,
        mb_per_s: produced.acks.acked_bytes as f64 / seconds / 1e6,
        latency: Latency::of(&produced.acks.latency),
        transactions: (args.transaction_records > 0).then(|| report::Transactions {
            records_per_transaction: args.transaction_records,
            committed: produced.commits,
            per_s: produced.commits as f64 / seconds,
            commit_latency: Latency::of(&produced.commit_latency),
        }),
        ok: verification.ok(args.idempotence || args.transaction_records > 0)
            && (args.no_verify || verification.received > 0),
        verification,
    })
}

fn produce_http_mode(cli: &Cli, args: &ProduceHttpArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.batch > 0, "--batch must be at least 1");
    anyhow::ensure!(
        args.produce.rate == 0
            && args.produce.transaction_records == 0
            && !args.produce.idempotence,
        "produce-http runs at full speed, without transactions or idempotence"
    );
    let (settings, partitions, before) = prepare(cli, &args.produce, "produce-http")?;
    let produced = http::run(&settings, &args.http, args.batch)?;
    let verification = checked(&settings, &before, &produced, args.produce.no_verify)?;
    let seconds = produced.elapsed.as_secs_f64();
    Ok(Report {
        mode: "produce-http".into(),
        bootstrap: format!("http://{}", args.http),
        topic: settings.topic.clone(),
        settings: json!({
            "size": args.produce.size,
            "partitions": partitions,
            "producers": args.produce.producers,
            "acks": args.produce.acks,
            "batch": args.batch,
        }),
        records: produced.acks.acked.distinct,
        bytes: produced.acks.acked_bytes,
        seconds,
        records_per_s: produced.acks.acked.distinct as f64 / seconds,
        mb_per_s: produced.acks.acked_bytes as f64 / seconds / 1e6,
        latency: Latency::of(&produced.acks.latency),
        transactions: None,
        ok: verification.ok(false) && (args.produce.no_verify || verification.received > 0),
        verification,
    })
}

fn consume_mode(cli: &Cli, args: &ConsumeArgs) -> anyhow::Result<Report> {
    let partitions = kafka::partition_count(&cli.bootstrap, &args.topic)?;
    let marks = kafka::watermarks(&cli.bootstrap, &args.topic, partitions)?;
    let expected: u64 = marks.iter().map(|&(low, high)| (high - low) as u64).sum();
    let ends = ends_at_high_watermarks(&marks);
    let read = consume::run(
        &ConsumeSettings {
            bootstrap: cli.bootstrap.clone(),
            topic: args.topic.clone(),
            run: None,
            group: args.group.clone(),
            assigned: marks
                .iter()
                .enumerate()
                .map(|(p, &(low, _))| (p as i32, low))
                .collect(),
            idle_timeout: Duration::from_secs_f64(args.idle_timeout_s),
        },
        &ends,
        args.group.is_some().then_some(expected),
        None,
    )?;
    // Values of several runs may share a topic, so this counts offsets, not stamps.
    let verification = Verification {
        expected,
        received: read.records,
        lost: expected.saturating_sub(read.records),
        duplicated: 0,
        corrupted: read.corrupted,
        failed_sends: 0,
        first_error: read.first_error.clone(),
    };
    let seconds = read.elapsed.as_secs_f64().max(1e-9);
    Ok(Report {
        mode: "consume".into(),
        bootstrap: cli.bootstrap.clone(),
        topic: args.topic.clone(),
        settings: json!({ "partitions": partitions, "group": args.group }),
        records: read.records,
        bytes: read.bytes,
        seconds,
        records_per_s: read.records as f64 / seconds,
        mb_per_s: read.bytes as f64 / seconds / 1e6,
        latency: None,
        transactions: None,
        ok: verification.ok(false),
        verification,
    })
}

fn e2e_mode(cli: &Cli, args: &E2eArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.consumers > 0, "--consumers must be at least 1");
    let (settings, partitions, before) = prepare(cli, &args.produce, "e2e")?;
    let ends: Ends = Ends::new();
    let consumers = args.consumers.min(partitions as u32);
    let ready = std::sync::Barrier::new(consumers as usize + 1);
    let (produced, reads) = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..consumers)
            .map(|c| {
                let consume_settings = reader(
                    &settings,
                    &before,
                    |p| p as u32 % consumers == c,
                    Duration::from_secs(60),
                );
                let (ends, ready) = (&ends, &ready);
                scope.spawn(move || consume::run(&consume_settings, ends, None, Some(ready)))
            })
            .collect();
        ready.wait();
        let produced = produce::run(&settings);
        // Whatever happened, tell the consumers where to stop.
        let after = kafka::watermarks(&settings.bootstrap, &settings.topic, partitions);
        let stop_at = match &after {
            Ok(after) => after.iter().map(|&(_, high)| high).collect(),
            Err(_) => before.iter().map(|&(_, high)| high).collect(),
        };
        ends.set(stop_at).expect("set once");
        let reads: Vec<_> = readers
            .into_iter()
            .map(|r| r.join().expect("consumer thread"))
            .collect();
        (produced.and_then(|p| after.map(|_| p)), reads)
    });
    let produced = produced?;
    let mut all = consume::Consumed::new();
    for read in reads {
        all.merge(read?);
    }
    let mut verification = compare(&produced.acks.acked, &all, produced.acks.failed);
    if verification.first_error.is_none() {
        verification.first_error = produced.acks.first_error.clone();
    }
    // From the first send until the last record arrived.
    let seconds = produced.elapsed.max(all.elapsed).as_secs_f64();
    Ok(Report {
        mode: "e2e".into(),
        bootstrap: cli.bootstrap.clone(),
        topic: settings.topic.clone(),
        settings: {
            let mut s = produce_settings_json(&args.produce, partitions);
            s["consumers"] = json!(consumers);
            s
        },
        records: all.tally.distinct,
        bytes: all.bytes,
        seconds,
        records_per_s: all.tally.distinct as f64 / seconds,
        mb_per_s: all.bytes as f64 / seconds / 1e6,
        latency: Latency::of(&all.latency),
        transactions: None,
        ok: verification.ok(args.produce.idempotence) && verification.received > 0,
        verification,
    })
}
