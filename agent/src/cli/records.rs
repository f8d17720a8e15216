//! `strata produce` and `strata consume`: records from stdin or files into a topic, and
//! a topic's records printed as lines (`/v1/topics/{topic}/produce`, `/read`,
//! `/consume` and `/commit`).

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde::Deserialize;

use super::{Api, Conn, Output, Refused, key_value, print_json, seg};
use crate::http::model::{
    CommitRequest, ConsumeRequest, ConsumeResponse, ConsumedMessage, HeaderEntry, Headers,
    MessageOutcome, ProduceRequest, ProduceResponse, ProducedMessage, ReadRequest, ReadResponse,
};

#[derive(Debug, Args)]
pub struct ProduceArgs {
    pub topic: String,
    /// Split each line at the first SEP into key and value (no key without it).
    #[arg(long)]
    pub key_separator: Option<String>,
    /// A header on every record, name=value (repeatable).
    #[arg(long, value_parser = key_value)]
    pub header: Vec<(String, String)>,
    /// Write to this partition (default: by key, as the Java client; keyless spread).
    #[arg(long)]
    pub partition: Option<i32>,
    /// all, 1 or 0.
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// Lines sent per request.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// How stdin's keys and values are written: text (UTF-8 lines) or base64 (each
    /// key and value base64, for bytes that are not text).
    #[arg(long, value_enum, default_value_t = LineEncoding::Text)]
    pub encoding: LineEncoding,
    /// Produce this file's bytes, exactly, as one record's value (repeatable; stdin is
    /// not read). Any bytes: binary files are sent as they are.
    #[arg(long, value_name = "PATH")]
    pub file: Vec<std::path::PathBuf>,
    /// The key of the --file records.
    #[arg(long, requires = "file")]
    pub key: Option<String>,
    #[command(flatten)]
    pub conn: Conn,
}

/// How `strata produce` reads keys and values from stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LineEncoding {
    Text,
    Base64,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    pub topic: String,
    /// Consume as a member of this consumer group, committing what was printed
    /// (without one: read the partitions directly, as kcat does; nothing is committed).
    #[arg(long, short = 'g')]
    pub group: Option<String>,
    /// Start at the earliest offset (default: the latest); in a group, where it has no
    /// committed offset.
    #[arg(long)]
    pub from_beginning: bool,
    /// Without a group: read only this partition (repeatable).
    #[arg(long, short = 'p', conflicts_with = "group")]
    pub partition: Vec<i32>,
    /// Without a group: start each partition given at this offset.
    #[arg(long, requires = "partition", conflicts_with = "from_beginning")]
    pub offset: Option<i64>,
    /// Stop after this many records.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Stop after this long without a record (default: never).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Print the key before the value, with --key-separator between.
    #[arg(long)]
    pub print_key: bool,
    #[arg(long, default_value = "\t")]
    pub key_separator: String,
    /// Print partition and offset before each record.
    #[arg(long)]
    pub print_offset: bool,
    /// Do not commit what was printed.
    #[arg(long)]
    pub no_commit: bool,
    #[command(flatten)]
    pub conn: Conn,
}

pub(super) async fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    let api = Api::new(&args.conn)?;
    let path = format!("/v1/topics/{}/produce", seg(&args.topic));
    let headers: Vec<HeaderEntry> = (args.header.iter())
        .map(|(k, v)| HeaderEntry {
            key: k.clone(),
            value: Some(v.clone()),
        })
        .collect();
    let message = |key: Option<String>, value: String| ProducedMessage {
        key: key.map(Into::into),
        value: Some(value.into()),
        headers: Some(Headers::List(headers.clone())),
        partition: args.partition,
        timestamp: None,
    };
    let acks = match args.acks.as_str() {
        "all" | "-1" => "all",
        "1" => "1",
        "0" => "0",
        other => bail!("--acks must be all, 1 or 0, not {other:?}"),
    };
    let tty = std::io::stderr().is_terminal();
    // Files: each one record, its bytes base64 on the wire so nothing is altered.
    let files = args
        .file
        .iter()
        .map(|path| {
            use base64::Engine as _;
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let base64 = &base64::engine::general_purpose::STANDARD;
            let key = args.key.as_ref().map(|k| base64.encode(k.as_bytes()));
            Ok(message(key, base64.encode(bytes)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let encoding = if files.is_empty() && args.encoding == LineEncoding::Text {
        "utf-8"
    } else {
        "base64"
    };
    if encoding == "base64" && !headers.is_empty() {
        bail!("--header goes with text records only: header values are sent as text");
    }
    let mut files = files.into_iter();
    // Stdin is read only without files.
    let stdin = std::io::stdin();
    let mut lines = args.file.is_empty().then(|| stdin.lock().split(b'\n'));
    let mut line_number = 0u64;
    let (mut sent, mut failed) = (0u64, 0u64);
    loop {
        let mut messages: Vec<ProducedMessage> = files.by_ref().take(args.batch.max(1)).collect();
        for line in lines.iter_mut().flatten() {
            line_number += 1;
            let mut line = line.context("cannot read stdin")?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).map_err(|_| {
                anyhow::anyhow!(
                    "stdin line {line_number} is not UTF-8 text: for bytes that are not text, \
                     give each key and value in base64 (--encoding base64) or produce whole \
                     files (--file PATH)"
                )
            })?;
            let (key, value) = match &args.key_separator {
                Some(sep) => match line.split_once(sep.as_str()) {
                    Some((k, v)) => (Some(k.to_string()), v.to_string()),
                    None => (None, line.clone()),
                },
                None => (None, line.clone()),
            };
            messages.push(message(key, value));
            if messages.len() >= args.batch.max(1) {
                break;
            }
        }
        if messages.is_empty() {
            break;
        }
        let n = messages.len() as u64;
        let request = ProduceRequest {
            messages,
            acks: Some(acks.into()),
            encoding: Some(encoding.to_string()),
            timeout_ms: None,
        };
        let v = match api.post(&path, request).await {
            Ok(v) => v,
            // Some records written: count them, report the rest.
            Err(e) => match e.downcast_ref::<Refused>() {
                Some(r) if r.body["offsets"].is_array() => r.body.clone(),
                _ => return Err(e.context(format!("after {sent} records produced"))),
            },
        };
        let answer = ProduceResponse::deserialize(&v).context("the produce answer")?;
        let errors: Vec<_> = answer
            .offsets
            .iter()
            .filter_map(|o| match o {
                MessageOutcome::Failed(failed) => Some(failed),
                MessageOutcome::Written(_) => None,
            })
            .collect();
        if let Some(first) = errors.first() {
            eprintln!(
                "strata: {} of {n} records refused: {} ({})",
                errors.len(),
                first.message,
                first.error
            );
        }
        failed += errors.len() as u64;
        sent += n - errors.len() as u64;
        if args.conn.output == Output::Json {
            print_json(&v)?;
        }
        if tty {
            eprint!("\rproduced {sent} records");
        }
    }
    if tty {
        eprintln!();
    }
    if args.conn.output == Output::Table {
        eprintln!(
            "produced {sent} records to {}{}",
            args.topic,
            if failed > 0 {
                format!(", {failed} refused")
            } else {
                String::new()
            }
        );
    }
    if failed > 0 {
        bail!("{failed} of {} records were not produced", sent + failed);
    }
    Ok(())
}

pub(super) async fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    let api = Api::new(&args.conn)?;
    let tty = std::io::stderr().is_terminal();
    let mut printed = 0u64;
    let mut consumer_id: Option<String> = None;
    let outcome: anyhow::Result<()> = match args.group.clone() {
        // Ctrl-C ends the run as its end would (a member leaves its group below).
        Some(group) => tokio::select! {
            r = consume_in_group(&api, &args, &group, &mut consumer_id, &mut printed, tty) => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
        },
        None => tokio::select! {
            r = read_directly(&api, &args, &mut printed, tty) => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
        },
    };
    if tty {
        eprintln!();
    }
    // Leave the group now rather than after the instance's timeout.
    if let Some(id) = consumer_id {
        let _ = api.delete(&format!("/v1/consumers/{}", seg(&id))).await;
    }
    outcome
}

/// How many records the next call asks for: what is left of --max-messages, at most
/// 500 at a time.
fn wanted(args: &ConsumeArgs, printed: u64) -> u64 {
    args.max_messages.map_or(500, |m| (m - printed).min(500))
}

/// Prints `messages` as --print-key, --print-offset and --output ask; answers where
/// each partition continues.
fn print_messages(
    args: &ConsumeArgs,
    messages: &[ConsumedMessage],
) -> anyhow::Result<BTreeMap<String, i64>> {
    let mut next: BTreeMap<String, i64> = BTreeMap::new();
    let mut out = std::io::stdout().lock();
    for m in messages {
        if args.conn.output == Output::Json {
            writeln!(out, "{}", serde_json::to_string(m)?)?;
        } else {
            if args.print_offset {
                write!(out, "{}:{}{}", m.partition, m.offset, args.key_separator)?;
            }
            if args.print_key {
                let key = m.key.as_deref().unwrap_or("");
                write!(out, "{key}{}", args.key_separator)?;
            }
            writeln!(out, "{}", m.value.as_deref().unwrap_or(""))?;
        }
        next.insert(m.partition.to_string(), m.offset + 1);
    }
    out.flush()?;
    Ok(next)
}

/// --timeout-ms has passed since the last record.
fn idle_too_long(args: &ConsumeArgs, idle_since: tokio::time::Instant) -> bool {
    args.timeout_ms
        .is_some_and(|t| idle_since.elapsed() >= Duration::from_millis(t))
}

fn progress(args: &ConsumeArgs, printed: u64, tty: bool) {
    if tty {
        match args.max_messages {
            Some(m) => eprint!("\rconsumed {printed} of {m} records"),
            None => eprint!("\rconsumed {printed} records"),
        }
    }
}

/// Without a group: `POST /v1/topics/{topic}/read`, carrying each answer's
/// `next_offsets` into the next call. Nothing to join, nothing committed.
async fn read_directly(
    api: &Api,
    args: &ConsumeArgs,
    printed: &mut u64,
    tty: bool,
) -> anyhow::Result<()> {
    let path = format!("/v1/topics/{}/read", seg(&args.topic));
    let mut offsets: Option<BTreeMap<String, i64>> = args
        .offset
        .map(|o| args.partition.iter().map(|p| (p.to_string(), o)).collect());
    let mut idle_since = crate::clock::instant();
    loop {
        if args.max_messages.is_some_and(|m| *printed >= m) {
            return Ok(());
        }
        let body = ReadRequest {
            offsets: (offsets.as_ref())
                .map(|o| o.iter().map(|(p, o)| (p.clone(), (*o).into())).collect()),
            partitions: (offsets.is_none() && !args.partition.is_empty())
                .then(|| args.partition.iter().map(|&p| p.into()).collect()),
            from: Some(
                if args.from_beginning {
                    "earliest"
                } else {
                    "latest"
                }
                .to_string(),
            ),
            max_messages: Some(wanted(args, *printed) as usize),
            timeout_ms: Some(1000),
            isolation_level: None,
            encoding: None,
        };
        let answer: ReadResponse =
            serde_json::from_value(api.post(&path, body).await?).context("the read answer")?;
        if !answer.next_offsets.is_empty() {
            offsets = Some(answer.next_offsets);
        }
        let messages = answer.messages;
        if messages.is_empty() {
            if idle_too_long(args, idle_since) {
                return Ok(());
            }
            continue;
        }
        idle_since = crate::clock::instant();
        print_messages(args, &messages)?;
        *printed += messages.len() as u64;
        progress(args, *printed, tty);
    }
}

/// As a member of `group`: an instance of its own (deleted at the end by the caller),
/// committing what was printed unless --no-commit.
async fn consume_in_group(
    api: &Api,
    args: &ConsumeArgs,
    group: &str,
    consumer_id: &mut Option<String>,
    printed: &mut u64,
    tty: bool,
) -> anyhow::Result<()> {
    let path = format!("/v1/topics/{}/consume", seg(&args.topic));
    let commit_path = format!("/v1/topics/{}/commit", seg(&args.topic));
    let commit = !args.no_commit;
    let mut idle_since = crate::clock::instant();
    loop {
        if args.max_messages.is_some_and(|m| *printed >= m) {
            return Ok(());
        }
        // A member of its own (deleted at the end), never the caller's implicit
        // instance, which another consumer of the same user may be using.
        let body = ConsumeRequest {
            group_id: group.to_string(),
            consumer_id: consumer_id.clone(),
            new_consumer: consumer_id.is_none(),
            max_messages: Some(wanted(args, *printed) as usize),
            timeout_ms: Some(1000),
            auto_offset_reset: Some(
                if args.from_beginning {
                    "earliest"
                } else {
                    "latest"
                }
                .to_string(),
            ),
            isolation_level: None,
            encoding: None,
        };
        let answer: ConsumeResponse =
            serde_json::from_value(api.post(&path, body).await?).context("the consume answer")?;
        *consumer_id = Some(answer.consumer_id);
        let messages = answer.messages;
        if messages.is_empty() {
            if idle_too_long(args, idle_since) {
                return Ok(());
            }
            continue;
        }
        idle_since = crate::clock::instant();
        let next = print_messages(args, &messages)?;
        *printed += messages.len() as u64;
        if commit {
            let request = CommitRequest {
                group_id: group.to_string(),
                consumer_id: consumer_id.clone(),
                generation_id: None,
                offsets: next.into_iter().map(|(p, o)| (p, o.into())).collect(),
                metadata: None,
            };
            api.post(&commit_path, request).await?;
        }
        progress(args, *printed, tty);
    }
}
