//! The operator CLI in the `strata` binary: `topics`, `groups`, `offsets`,
//! `partitions`, `cluster`, `agents`, `acls`, `users`, `quotas`, `audit`, `produce`
//! and `consume`, talking to any agent of a
//! running cluster through its HTTP API (`docs/cli.md`). Tables for people by default,
//! `--output json` for scripts (the API's own answers); errors go to stderr as the
//! API's problem detail with the Kafka error name, and exit with status 1.
//!
//! The CLI is a client of the HTTP API rather than of the Kafka protocol so that what an
//! operator does by hand and what a script does with curl are the same requests, audited
//! the same way; requests for a group or a partition led elsewhere follow the API's 307
//! to the right agent.

use std::io::{IsTerminal, Write};
use std::time::Duration;

mod agents;
mod records;
mod security;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::http::model::{
    AddPartitions, AlterConfigs, AuditLog, Cluster, CreateTopic, DisableRequest, Group, GroupList,
    OffsetOrError, OffsetsReset, ResetOffsets, Topic, TopicConfigs, TopicCreated, TopicList,
    TopicValidated, Verified,
};
use crate::partition::{PartitionView, RoleView};
use crate::service::agents::ClusterHealth;
use crate::service::maintenance::Tiered;
use crate::topic_config::Source as ConfigSource;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    /// Aligned columns, for people.
    #[default]
    Table,
    /// The API's JSON answers, one per line, for scripts.
    Json,
}

/// Where the cluster is, and how to print.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    /// HTTP API of any agent of the cluster.
    #[arg(
        long,
        env = "STRATA_HTTP",
        default_value = "http://127.0.0.1:9644",
        global = true
    )]
    pub http: String,
    /// A user of the cluster, when its HTTP API asks for credentials (HTTP Basic with the
    /// user's SCRAM password, from STRATA_PASSWORD).
    #[arg(long, env = "STRATA_USER", global = true)]
    pub user: Option<String>,
    /// A bearer token (an OAUTHBEARER JWT) instead of a user.
    #[arg(long, env = "STRATA_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

/// The operator commands (`strata <command> --help` for each).
#[derive(Debug, Subcommand)]
pub enum Operator {
    /// The cluster: its id, controller and live agents; `cluster health` for what needs
    /// attention.
    Cluster {
        #[command(subcommand)]
        command: Option<ClusterCommand>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Every agent (live or gone), and draining one before it is stopped.
    Agents {
        #[command(subcommand)]
        command: agents::Agents,
        #[command(flatten)]
        conn: Conn,
    },
    /// List, describe, create, alter and delete topics.
    Topics {
        #[command(subcommand)]
        command: Topics,
        #[command(flatten)]
        conn: Conn,
    },
    /// List, describe and delete consumer groups.
    Groups {
        #[command(subcommand)]
        command: Groups,
        #[command(flatten)]
        conn: Conn,
    },
    /// Move a group's committed offsets (reset or replay).
    Offsets {
        #[command(subcommand)]
        command: Offsets,
        #[command(flatten)]
        conn: Conn,
    },
    /// Inspect a partition, disable or enable its writes, re-run tiering, verify its
    /// archive.
    Partitions {
        #[command(subcommand)]
        command: Partitions,
        #[command(flatten)]
        conn: Conn,
    },
    /// ACL bindings: list, create (as `kafka-acls.sh --add`), delete.
    Acls {
        #[command(subcommand)]
        command: security::Acls,
        #[command(flatten)]
        conn: Conn,
    },
    /// SCRAM users: list, describe, set a password, delete.
    Users {
        #[command(subcommand)]
        command: security::Users,
        #[command(flatten)]
        conn: Conn,
    },
    /// Client quotas of users, client ids and addresses: list and alter.
    Quotas {
        #[command(subcommand)]
        command: security::Quotas,
        #[command(flatten)]
        conn: Conn,
    },
    /// The last entries of an agent's audit log.
    Audit {
        /// How many entries.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        conn: Conn,
    },
    /// Produce the lines of stdin, one record each.
    Produce(records::ProduceArgs),
    /// Print records as lines, as a member of a consumer group.
    Consume(records::ConsumeArgs),
}

#[derive(Debug, Subcommand)]
pub enum Topics {
    /// Every topic.
    List,
    /// Partitions (leader, replicas, ISR, offsets) and effective configs of a topic.
    Describe { topic: String },
    /// Create a topic (the cluster's defaults where a flag is left out).
    Create {
        topic: String,
        #[arg(long, short = 'p')]
        partitions: Option<i32>,
        #[arg(long, short = 'r')]
        replication_factor: Option<i16>,
        /// A topic config, name=value (repeatable).
        #[arg(long = "config", short = 'c', value_parser = key_value)]
        configs: Vec<(String, String)>,
        /// Check the request without creating anything.
        #[arg(long)]
        validate_only: bool,
    },
    /// Delete a topic and its data (the archive's objects after a grace period).
    Delete { topic: String },
    /// Set or remove topic configs; the others keep their values.
    AlterConfigs {
        topic: String,
        /// name=value (repeatable).
        #[arg(long, value_parser = key_value)]
        set: Vec<(String, String)>,
        /// A config name to return to its default (repeatable).
        #[arg(long)]
        delete: Vec<String>,
    },
    /// Grow a topic to COUNT partitions.
    AddPartitions {
        topic: String,
        #[arg(long)]
        count: i32,
    },
}

#[derive(Debug, Subcommand)]
pub enum Groups {
    /// Every group of every agent.
    List,
    /// Members, assignments, committed offsets and lag of a group.
    Describe { group: String },
    /// Delete an empty group and its offsets.
    Delete { group: String },
}

#[derive(Debug, Subcommand)]
pub enum Offsets {
    /// Move an inactive group's committed offsets of one topic (its consumers must be
    /// stopped), as kafka-consumer-groups.sh --reset-offsets; --to-timestamp replays.
    Reset {
        group: String,
        #[arg(long)]
        topic: String,
        /// The first offset still held.
        #[arg(long, group = "target")]
        to_earliest: bool,
        /// The end of the log (skip what is there).
        #[arg(long, group = "target")]
        to_latest: bool,
        /// An offset (kept within the log).
        #[arg(long, group = "target")]
        to_offset: Option<i64>,
        /// The first record at or after this time (ms since the epoch).
        #[arg(long, group = "target")]
        to_timestamp: Option<i64>,
        /// Only these partitions (comma-separated; default all).
        #[arg(long, value_delimiter = ',')]
        partitions: Vec<i32>,
        /// Show the plan without committing it.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum Partitions {
    /// The leader's view: replicas, epoch, log start and end, high watermark, ISR and
    /// followers' progress.
    Describe { topic: String, partition: i32 },
    /// Refuse produce to the partition (reads go on), for incident response.
    Disable {
        topic: String,
        partition: i32,
        /// Why: shown to the producers refused and kept in the audit log.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Accept produce to the partition again.
    Enable { topic: String, partition: i32 },
    /// Archive the partition's closed segments now.
    Tier { topic: String, partition: i32 },
    /// Read the partition's archive back and check it against the manifest (exit 1 on
    /// a mismatch).
    Verify { topic: String, partition: i32 },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Agents live and gone, partitions offline or under-replicated, repairs under way;
    /// exits 1 when something needs attention.
    Health,
}

/// `strata cluster health`: a summary, the problems, and the partitions they concern.
async fn health(conn: &Conn) -> anyhow::Result<()> {
    let answer = Api::new(conn)?.get("/v1/cluster/health").await?;
    let v: ClusterHealth = serde_json::from_value(answer.clone())
        .context("the agent's answer is not a cluster health report")?;
    if conn.output == Output::Json {
        print_json(&answer)?;
    } else {
        let mut out = std::io::stdout().lock();
        let racks = v
            .racks
            .iter()
            .map(|(rack, n)| {
                let rack = if rack.is_empty() { "-" } else { rack.as_str() };
                format!("{rack}:{n}")
            })
            .collect::<Vec<_>>()
            .join(" ");
        writeln!(
            out,
            "{}  controller {}  agents {} live{} (racks {})  topics {}  partitions {}",
            if v.healthy { "healthy" } else { "UNHEALTHY" },
            v.controller,
            v.agents_live,
            match v.agents_gone.len() {
                0 => String::new(),
                n => format!(", {n} gone ({})", ids(&v.agents_gone)),
            },
            racks,
            v.topics,
            v.partitions,
        )?;
        writeln!(
            out,
            "offline {}  under-replicated {}  rebuilding {}  replacements pending {}  draining {}  moves {}",
            v.offline.len(),
            v.under_replicated.len(),
            v.replicas_rebuilding,
            v.replacements_pending,
            match v.draining.is_empty() {
                false => ids(&v.draining),
                true => "-".to_string(),
            },
            v.moves_in_flight,
        )?;
        for problem in &v.problems {
            writeln!(out, "- {problem}")?;
        }
        let mut rows = Vec::new();
        for (state, partitions) in [
            ("offline", &v.offline),
            ("under-replicated", &v.under_replicated),
        ] {
            for p in partitions {
                rows.push(vec![
                    state.to_string(),
                    p.topic.clone(),
                    p.partition.to_string(),
                    p.leader.to_string(),
                    ids(&p.replicas),
                    ids(&p.isr),
                ]);
            }
        }
        if !rows.is_empty() {
            writeln!(out)?;
            table(
                &mut out,
                &["STATE", "TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"],
                &rows,
            )?;
        }
    }
    if !v.healthy {
        bail!("the cluster needs attention");
    }
    Ok(())
}

/// An offset a leader gave, why it gave none, or `-`.
fn offset_cell(offset: &Option<OffsetOrError>) -> String {
    match offset {
        Some(OffsetOrError::Offset(o)) => o.to_string(),
        Some(OffsetOrError::Error { error }) => error.clone(),
        None => "-".to_string(),
    }
}

/// An answer as its model.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> anyhow::Result<T> {
    serde_json::from_value(v).with_context(|| format!("the agent's answer is not {what}"))
}

/// Node ids as a cell shows them: `1,2,3`.
fn ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not name=value")),
    }
}

/// An HTTP API client for one cluster.
pub(crate) struct Api {
    base: String,
    client: reqwest::Client,
    /// The Authorization header, when credentials were given.
    authorization: Option<String>,
}

/// The API's refusal of a request: its problem detail.
#[derive(Debug, thiserror::Error)]
#[error("{detail}{}", kafka.as_ref().map(|k| format!(" ({k})")).unwrap_or_default())]
pub struct Refused {
    pub status: u16,
    pub detail: String,
    pub kafka: Option<String>,
    pub body: Value,
}

impl Api {
    fn new(conn: &Conn) -> anyhow::Result<Api> {
        let base = if conn.http.contains("://") {
            conn.http.trim_end_matches('/').to_string()
        } else {
            format!("http://{}", conn.http.trim_end_matches('/'))
        };
        if !base.starts_with("http://") {
            bail!("--http {:?}: only http:// is served for now", conn.http);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(120))
            .build()
            .context("cannot build the HTTP client")?;
        let authorization = match (&conn.user, &conn.token) {
            (Some(_), Some(_)) => bail!("give --user or --token, not both"),
            (Some(user), None) => {
                let password = std::env::var("STRATA_PASSWORD").context(
                    "--user needs the password in STRATA_PASSWORD (never on the command line)",
                )?;
                use base64::Engine as _;
                let pair = format!("{user}:{password}");
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ))
            }
            (None, Some(token)) => Some(format!("Bearer {token}")),
            (None, None) => None,
        };
        Ok(Api {
            base,
            client,
            authorization,
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut request = self.client.request(method, &url);
        if let Some(a) = &self.authorization {
            request = request.header("authorization", a);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach strata at {}", self.base))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("cannot read the answer of {url}"))?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or_else(
            |_| json!({ "detail": String::from_utf8_lossy(&bytes).trim().to_string() }),
        );
        if status.is_success() {
            return Ok(value);
        }
        Err(Refused {
            status: status.as_u16(),
            detail: value["detail"]
                .as_str()
                .map_or_else(|| format!("HTTP {status}"), str::to_string),
            kafka: value["kafka_error"].as_str().map(str::to_string),
            body: value,
        }
        .into())
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// A request's body is one of the API's request models (`crate::http::model`).
    async fn post(&self, path: &str, body: impl serde::Serialize) -> anyhow::Result<Value> {
        let body = serde_json::to_value(body).context("the request")?;
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    async fn put(&self, path: &str, body: impl serde::Serialize) -> anyhow::Result<Value> {
        let body = serde_json::to_value(body).context("the request")?;
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    async fn patch(&self, path: &str, body: impl serde::Serialize) -> anyhow::Result<Value> {
        let body = serde_json::to_value(body).context("the request")?;
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }
}

/// A path segment, percent-encoded (topic and group names may hold any character the
/// API then refuses clearly, rather than a broken URL).
fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Prints rows under headers, columns aligned.
fn table(out: &mut impl Write, headers: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string()
    };
    writeln!(out, "{}", line(headers.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

/// A JSON value as a table cell.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        Value::Object(o) if o.contains_key("error") => cell(&o["error"]),
        other => other.to_string(),
    }
}

/// A time in milliseconds since the epoch as RFC 3339 in UTC, to the millisecond
/// (`2026-12-07T05:01:02.205Z`).
fn utc(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

fn print_json(v: &Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}")?;
    Ok(())
}

/// Runs an operator command; `Err` is printed by the caller and exits 1.
pub async fn run(command: Operator) -> anyhow::Result<()> {
    match command {
        Operator::Cluster {
            command: Some(ClusterCommand::Health),
            conn,
        } => health(&conn).await,
        Operator::Cluster {
            command: None,
            conn,
        } => {
            let v = Api::new(&conn)?.get("/v1/cluster").await?;
            if conn.output == Output::Json {
                return print_json(&v);
            }
            let v: Cluster =
                serde_json::from_value(v).context("the agent's answer is not a cluster")?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "cluster {}  controller {}  version {}",
                v.cluster_id, v.controller, v.version
            )?;
            let rows: Vec<Vec<String>> = v
                .agents
                .iter()
                .map(|a| {
                    let rack = a.rack.clone().unwrap_or_else(|| "-".to_string());
                    vec![a.node_id.to_string(), a.kafka.clone(), a.http.clone(), rack]
                })
                .collect();
            table(&mut out, &["NODE", "KAFKA", "HTTP", "RACK"], &rows)?;
            Ok(())
        }
        Operator::Agents { command, conn } => agents::run(command, &conn).await,
        Operator::Topics { command, conn } => topics(command, &conn).await,
        Operator::Groups { command, conn } => groups(command, &conn).await,
        Operator::Offsets { command, conn } => offsets(command, &conn).await,
        Operator::Partitions { command, conn } => partitions(command, &conn).await,
        Operator::Acls { command, conn } => security::acls(command, &conn).await,
        Operator::Users { command, conn } => security::users(command, &conn).await,
        Operator::Quotas { command, conn } => security::quotas(command, &conn).await,
        Operator::Audit { limit, conn } => {
            let v = Api::new(&conn)?
                .get(&format!("/v1/audit?limit={limit}"))
                .await?;
            if conn.output == Output::Json {
                return print_json(&v);
            }
            let log: AuditLog = typed(v, "the audit log")?;
            let rows: Vec<Vec<String>> = (log.entries.into_iter())
                .map(|e| {
                    vec![
                        u64::try_from(e.time_ms).map_or_else(|_| e.time_ms.to_string(), utc),
                        e.principal,
                        e.address.unwrap_or("-".to_string()),
                        e.action,
                        e.resource,
                        if e.ok {
                            "ok".to_string()
                        } else {
                            format!("refused: {}", cell(&e.outcome))
                        },
                    ]
                })
                .collect();
            table(
                &mut std::io::stdout().lock(),
                &[
                    "TIME",
                    "PRINCIPAL",
                    "ADDRESS",
                    "ACTION",
                    "RESOURCE",
                    "OUTCOME",
                ],
                &rows,
            )?;
            Ok(())
        }
        Operator::Produce(args) => records::produce(args).await,
        Operator::Consume(args) => records::consume(args).await,
    }
}

async fn topics(command: Topics, conn: &Conn) -> anyhow::Result<()> {
    let api = Api::new(conn)?;
    let json_out = conn.output == Output::Json;
    let mut out = std::io::stdout().lock();
    match command {
        Topics::List => {
            let v = api.get("/v1/topics").await?;
            if json_out {
                return print_json(&v);
            }
            let v: TopicList = typed(v, "a topic list")?;
            let rows: Vec<Vec<String>> = v
                .topics
                .into_iter()
                .map(|t| {
                    let disabled = t.disabled_partitions.iter().map(|p| p.to_string());
                    vec![
                        t.name,
                        t.partitions.to_string(),
                        t.replication_factor.to_string(),
                        t.topic_id,
                        disabled.collect::<Vec<_>>().join(","),
                    ]
                })
                .collect();
            table(
                &mut out,
                &["TOPIC", "PARTITIONS", "REPLICATION", "ID", "DISABLED"],
                &rows,
            )?;
        }
        Topics::Describe { topic } => {
            let v = api.get(&format!("/v1/topics/{}", seg(&topic))).await?;
            if json_out {
                return print_json(&v);
            }
            describe_topic(&mut out, &typed(v, "a topic")?)?;
        }
        Topics::Create {
            topic,
            partitions,
            replication_factor,
            configs,
            validate_only,
        } => {
            let request = CreateTopic {
                name: topic.clone(),
                partitions,
                replication_factor,
                configs: Some(configs.into_iter().collect()),
                validate_only: Some(validate_only),
            };
            let v = api.post("/v1/topics", request).await?;
            if json_out {
                return print_json(&v);
            }
            if validate_only {
                let v: TopicValidated = typed(v, "a topic validated")?;
                writeln!(
                    out,
                    "topic {topic} would be created with {} partitions, replication factor {}",
                    v.partitions, v.replication_factor
                )?;
            } else {
                writeln!(out, "created topic {topic}")?;
                if let TopicCreated::Described(t) = typed(v, "a topic created")? {
                    describe_topic(&mut out, &t)?;
                }
            }
        }
        Topics::Delete { topic } => {
            let v = api.delete(&format!("/v1/topics/{}", seg(&topic))).await?;
            if json_out {
                return print_json(&v);
            }
            writeln!(out, "deleted topic {topic}")?;
        }
        Topics::AlterConfigs { topic, set, delete } => {
            if set.is_empty() && delete.is_empty() {
                bail!("nothing to change: give --set name=value or --delete name");
            }
            let request = AlterConfigs {
                set: set.into_iter().collect(),
                delete,
                validate_only: None,
            };
            let v = api
                .patch(&format!("/v1/topics/{}/configs", seg(&topic)), request)
                .await?;
            if json_out {
                return print_json(&v);
            }
            writeln!(out, "topic {topic} now sets:")?;
            let v: TopicConfigs = typed(v, "a topic's configs")?;
            let rows: Vec<Vec<String>> = v.configs.into_iter().map(|(k, v)| vec![k, v]).collect();
            table(&mut out, &["CONFIG", "VALUE"], &rows)?;
        }
        Topics::AddPartitions { topic, count } => {
            let request = AddPartitions {
                count: Some(count),
                validate_only: None,
            };
            let v = api
                .post(&format!("/v1/topics/{}/partitions", seg(&topic)), request)
                .await?;
            if json_out {
                return print_json(&v);
            }
            writeln!(out, "topic {topic} now has {count} partitions")?;
        }
    }
    Ok(())
}

fn describe_topic(out: &mut impl Write, v: &Topic) -> anyhow::Result<()> {
    writeln!(
        out,
        "topic {}  id {}  replication factor {}",
        v.name, v.topic_id, v.replication_factor
    )?;
    let rows: Vec<Vec<String>> = v
        .partitions
        .iter()
        .map(|p| {
            vec![
                p.partition.to_string(),
                p.leader.to_string(),
                p.leader_epoch.to_string(),
                ids(&p.replicas),
                ids(&p.isr),
                offset_cell(&p.log_start_offset),
                offset_cell(&p.high_watermark),
                p.disabled
                    .as_ref()
                    .map_or("-".to_string(), |r| format!("disabled: {r}")),
            ]
        })
        .collect();
    table(
        out,
        &[
            "PARTITION",
            "LEADER",
            "EPOCH",
            "REPLICAS",
            "ISR",
            "LOG_START",
            "HIGH_WATERMARK",
            "WRITES",
        ],
        &rows,
    )?;
    let set: Vec<Vec<String>> = v
        .configs
        .iter()
        .filter(|(_, c)| c.source != ConfigSource::Default)
        .map(|(k, c)| vec![k.clone(), c.value.clone(), c.source.name().to_string()])
        .collect();
    if !set.is_empty() {
        writeln!(out)?;
        table(out, &["CONFIG", "VALUE", "SOURCE"], &set)?;
    }
    Ok(())
}

async fn groups(command: Groups, conn: &Conn) -> anyhow::Result<()> {
    let api = Api::new(conn)?;
    let json_out = conn.output == Output::Json;
    let mut out = std::io::stdout().lock();
    match command {
        Groups::List => {
            let v = api.get("/v1/groups").await?;
            if json_out {
                return print_json(&v);
            }
            let v: GroupList = typed(v, "a group list")?;
            let rows: Vec<Vec<String>> = v
                .groups
                .into_iter()
                .map(|g| {
                    let coordinator = g.coordinator.to_string();
                    vec![g.group_id, g.state, g.protocol_type, coordinator]
                })
                .collect();
            table(
                &mut out,
                &["GROUP", "STATE", "PROTOCOL", "COORDINATOR"],
                &rows,
            )?;
            for u in &v.unreachable {
                eprintln!("strata: agent {} did not answer: {}", u.node_id, u.error);
            }
        }
        Groups::Describe { group } => {
            let v = api.get(&format!("/v1/groups/{}", seg(&group))).await?;
            if json_out {
                return print_json(&v);
            }
            let v: Group = typed(v, "a group")?;
            writeln!(
                out,
                "group {}  state {}  coordinator {}  members {}  total lag {}",
                v.group_id,
                v.state,
                v.coordinator,
                v.members.len(),
                v.total_lag
            )?;
            // Every member, with or without partitions.
            let members: Vec<Vec<String>> = v
                .members
                .iter()
                .map(|m| {
                    let assigned = m
                        .assignment
                        .iter()
                        .map(|a| format!("{}:{}", a.topic, ids(&a.partitions)))
                        .collect::<Vec<_>>();
                    vec![
                        m.member_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                        if assigned.is_empty() {
                            "-".to_string()
                        } else {
                            assigned.join(" ")
                        },
                    ]
                })
                .collect();
            if !members.is_empty() {
                table(
                    &mut out,
                    &["MEMBER", "CLIENT_ID", "HOST", "ASSIGNMENT"],
                    &members,
                )?;
                writeln!(out)?;
            }
            let or_dash = |n: Option<i64>| n.map_or("-".to_string(), |n| n.to_string());
            let rows: Vec<Vec<String>> = v
                .offsets
                .iter()
                .map(|o| {
                    vec![
                        o.topic.clone(),
                        o.partition.to_string(),
                        or_dash(o.committed_offset),
                        offset_cell(&o.high_watermark),
                        or_dash(o.lag),
                        o.member_id.clone().unwrap_or_else(|| "-".to_string()),
                    ]
                })
                .collect();
            table(
                &mut out,
                &[
                    "TOPIC",
                    "PARTITION",
                    "COMMITTED",
                    "HIGH_WATERMARK",
                    "LAG",
                    "MEMBER",
                ],
                &rows,
            )?;
        }
        Groups::Delete { group } => {
            let v = api.delete(&format!("/v1/groups/{}", seg(&group))).await?;
            if json_out {
                return print_json(&v);
            }
            writeln!(out, "deleted group {group}")?;
        }
    }
    Ok(())
}

async fn offsets(command: Offsets, conn: &Conn) -> anyhow::Result<()> {
    let api = Api::new(conn)?;
    let Offsets::Reset {
        group,
        topic,
        to_earliest,
        to_latest,
        to_offset,
        to_timestamp,
        partitions,
        dry_run,
    } = command;
    let (to, offset, timestamp_ms) = match (to_earliest, to_latest, to_offset, to_timestamp) {
        (true, _, _, _) => ("earliest", None, None),
        (_, true, _, _) => ("latest", None, None),
        (_, _, Some(o), _) => ("offset", Some(o.into()), None),
        (_, _, _, Some(t)) => ("timestamp", None, Some(t.into())),
        _ => bail!("say where to: --to-earliest, --to-latest, --to-offset N or --to-timestamp MS"),
    };
    let body = ResetOffsets {
        topic: topic.clone(),
        to: to.to_string(),
        offset,
        timestamp_ms,
        partitions: (!partitions.is_empty())
            .then(|| partitions.iter().map(|&p| p.into()).collect()),
        dry_run: Some(dry_run),
    };
    let tty = std::io::stderr().is_terminal();
    if tty && !dry_run {
        eprintln!("moving the offsets of group {group} on {topic}...");
    }
    let v = api
        .post(&format!("/v1/groups/{}/offsets", seg(&group)), body)
        .await?;
    if conn.output == Output::Json {
        return print_json(&v);
    }
    let reset: OffsetsReset = typed(v, "an offset reset")?;
    let mut out = std::io::stdout().lock();
    let rows: Vec<Vec<String>> = (reset.partitions.iter())
        .map(|p| {
            vec![
                reset.topic.clone(),
                p.partition.to_string(),
                p.previous_offset.map_or("-".to_string(), |o| o.to_string()),
                p.new_offset.to_string(),
            ]
        })
        .collect();
    table(&mut out, &["TOPIC", "PARTITION", "PREVIOUS", "NEW"], &rows)?;
    if dry_run {
        writeln!(out, "(dry run: nothing committed)")?;
    }
    Ok(())
}

async fn partitions(command: Partitions, conn: &Conn) -> anyhow::Result<()> {
    let api = Api::new(conn)?;
    let json_out = conn.output == Output::Json;
    let mut out = std::io::stdout().lock();
    let at =
        |t: &str, p: i32, action: &str| format!("/v1/topics/{}/partitions/{p}{action}", seg(t));
    match command {
        Partitions::Describe { topic, partition } => {
            let v = api.get(&at(&topic, partition, "")).await?;
            if json_out {
                return print_json(&v);
            }
            let view: PartitionView = typed(v, "a partition's view")?;
            let r = &view.replica;
            let (role, isr, followers) = match &r.role {
                RoleView::Leader { isr, followers, .. } => ("leader", ids(isr), followers.clone()),
                RoleView::Follower { .. } => ("follower", "-".to_string(), Vec::new()),
            };
            let rows: Vec<Vec<String>> = [
                ("role", role.to_string()),
                ("node_id", view.node_id.to_string()),
                ("leader_epoch", r.leader_epoch.to_string()),
                ("replicas", ids(&view.replicas)),
                ("isr", isr),
                ("log_start_offset", r.log_start_offset.to_string()),
                (
                    "local_log_start_offset",
                    view.local_log_start_offset.to_string(),
                ),
                ("log_end_offset", r.log_end_offset.to_string()),
                ("high_watermark", r.high_watermark.to_string()),
                ("last_stable_offset", r.last_stable_offset.to_string()),
                ("offline", r.offline.to_string()),
                ("disabled", view.disabled.clone().unwrap_or("-".to_string())),
            ]
            .into_iter()
            .map(|(field, value)| vec![field.to_string(), value])
            .collect();
            writeln!(out, "partition {topic}-{partition}")?;
            table(&mut out, &["FIELD", "VALUE"], &rows)?;
            let followers: Vec<Vec<String>> = (followers.iter())
                .map(|f| {
                    vec![
                        f.node_id.to_string(),
                        f.log_end_offset.map_or("-".to_string(), |o| o.to_string()),
                        f.caught_up_ms_ago.to_string(),
                    ]
                })
                .collect();
            if !followers.is_empty() {
                writeln!(out)?;
                table(
                    &mut out,
                    &["FOLLOWER", "LOG_END", "CAUGHT_UP_MS_AGO"],
                    &followers,
                )?;
            }
        }
        Partitions::Disable {
            topic,
            partition,
            reason,
        } => {
            let v = api
                .post(
                    &at(&topic, partition, "/disable"),
                    DisableRequest { reason },
                )
                .await?;
            if json_out {
                return print_json(&v);
            }
            writeln!(
                out,
                "writes to {topic}-{partition} disabled ({}); reads go on",
                cell(&v["reason"])
            )?;
        }
        Partitions::Enable { topic, partition } => {
            let v = api
                .post(&at(&topic, partition, "/enable"), json!({}))
                .await?;
            if json_out {
                return print_json(&v);
            }
            writeln!(out, "writes to {topic}-{partition} enabled")?;
        }
        Partitions::Tier { topic, partition } => {
            let v = api.post(&at(&topic, partition, "/tier"), json!({})).await?;
            if json_out {
                return print_json(&v);
            }
            let tiered: Tiered = typed(v, "a tiering pass")?;
            writeln!(
                out,
                "{topic}-{partition}: archived up to offset {} (was {})",
                tiered.archived_upto, tiered.archived_upto_before
            )?;
            if let Some(w) = tiered.waiting_for {
                writeln!(out, "waiting for {w}")?;
            }
        }
        Partitions::Verify { topic, partition } => {
            let v = api
                .post(&at(&topic, partition, "/verify"), json!({}))
                .await?;
            if json_out {
                print_json(&v)?;
            }
            let verified: Verified = typed(v, "a verification")?;
            if !json_out {
                let report = &verified.report;
                let offset = |o: Option<i64>| o.map_or("-".to_string(), |o| o.to_string());
                if report.entries == 0 {
                    writeln!(
                        out,
                        "{topic}-{partition}: nothing archived yet (segments are archived once closed)"
                    )?;
                } else {
                    writeln!(
                        out,
                        "{topic}-{partition}: {} of {} archived objects read back ({} bytes), offsets {}..{}",
                        report.verified,
                        report.entries,
                        report.bytes_read,
                        offset(report.first_offset),
                        offset(report.last_offset)
                    )?;
                }
                let rows: Vec<Vec<String>> = (report.mismatches.iter())
                    .map(|m| vec![m.object.clone(), m.problem.clone()])
                    .collect();
                if !rows.is_empty() {
                    table(&mut out, &["OBJECT", "PROBLEM"], &rows)?;
                }
                let unreferenced = report.unreferenced.len();
                if unreferenced > 0 {
                    writeln!(
                        out,
                        "{unreferenced} objects not in the manifest (garbage awaiting collection, most likely)"
                    )?;
                }
            }
            if !verified.ok {
                bail!("the archive of {topic}-{partition} does not match its manifest");
            }
            writeln!(std::io::stderr(), "the archive matches its manifest")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_cells_read_json() {
        let mut out = Vec::new();
        table(
            &mut out,
            &["TOPIC", "PARTITIONS"],
            &[
                vec!["orders".into(), "3".into()],
                vec!["a".into(), "12".into()],
            ],
        )
        .expect("table");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "TOPIC   PARTITIONS\norders  3\na       12\n"
        );
        assert_eq!(cell(&json!([1, 2])), "1,2");
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(
            cell(&json!({"error": "LEADER_NOT_AVAILABLE"})),
            "LEADER_NOT_AVAILABLE"
        );
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
        assert!(key_value("=x").is_err());
        assert_eq!(
            key_value("a=b=c").expect("kv"),
            ("a".to_string(), "b=c".to_string())
        );
    }
}
