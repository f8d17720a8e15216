//! `strata agents`: the agents of the cluster, and draining one (`GET /v1/agents`,
//! `POST`/`DELETE /v1/agents/{id}/drain`).

use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use clap::Subcommand;
use serde_json::Value;

use super::{Api, Conn, Output, cell, print_json, table};

#[derive(Debug, Subcommand)]
pub enum Agents {
    /// Every agent, live or gone: replicas, leaderships, replacements pending, drains.
    List,
    /// One agent.
    Describe { node_id: i32 },
    /// Move an agent's leaderships, then its replicas, to other agents, and say when it
    /// is safe to stop.
    Drain {
        node_id: i32,
        /// Wait until it is safe to stop (exit 1 if it is not within --timeout).
        #[arg(long)]
        wait: bool,
        /// Seconds --wait waits at most.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Stop draining an agent.
    Undrain { node_id: i32 },
}

fn row(a: &Value) -> Vec<String> {
    let drain = &a["drain"];
    let state = if a["live"] != true {
        match a["replacement_due_ms"].as_i64() {
            Some(due) => format!("gone (replaced at {due})"),
            None => "gone".to_string(),
        }
    } else if drain.is_object() {
        if drain["safe_to_stop"] == true {
            "drained: safe to stop".to_string()
        } else {
            "draining".to_string()
        }
    } else {
        "live".to_string()
    };
    vec![
        cell(&a["node_id"]),
        state,
        cell(&a["rack"]),
        cell(&a["replicas"]),
        cell(&a["leaderships"]),
        format!("+{} -{}", cell(&a["moving_in"]), cell(&a["moving_out"])),
        cell(&a["kafka"]),
    ]
}

const HEADERS: [&str; 7] = [
    "NODE", "STATE", "RACK", "REPLICAS", "LEADS", "MOVING", "KAFKA",
];

pub async fn run(command: Agents, conn: &Conn) -> anyhow::Result<()> {
    let api = Api::new(conn)?;
    let json_out = conn.output == Output::Json;
    let mut out = std::io::stdout().lock();
    match command {
        Agents::List => {
            let v = api.get("/v1/agents").await?;
            if json_out {
                return print_json(&v);
            }
            writeln!(
                out,
                "controller {}  moves in flight {} (at most {})  replacement delay {} ms",
                cell(&v["controller"]),
                cell(&v["moves_in_flight"]),
                cell(&v["replica_moves_max"]),
                cell(&v["replica_replacement_delay_ms"])
            )?;
            let rows: Vec<Vec<String>> = v["agents"]
                .as_array()
                .into_iter()
                .flatten()
                .map(row)
                .collect();
            table(&mut out, &HEADERS, &rows)?;
            Ok(())
        }
        Agents::Describe { node_id } => {
            let v = api.get(&format!("/v1/agents/{node_id}")).await?;
            if json_out {
                return print_json(&v);
            }
            table(&mut out, &HEADERS, &[row(&v)])?;
            describe_drain(&mut out, &v)?;
            Ok(())
        }
        Agents::Drain {
            node_id,
            wait,
            timeout,
        } => {
            let path = format!("/v1/agents/{node_id}");
            let mut v = api
                .post(&format!("{path}/drain"), Value::Object(Default::default()))
                .await?;
            let deadline = crate::clock::instant() + Duration::from_secs(timeout);
            while wait && v["drain"]["safe_to_stop"] != true {
                if crate::clock::instant() >= deadline {
                    describe_drain(&mut out, &v)?;
                    bail!("agent {node_id} is not drained after {timeout} s");
                }
                if !json_out {
                    writeln!(
                        out,
                        "draining agent {node_id}: {} leaderships and {} replicas left",
                        cell(&v["drain"]["leaderships_left"]),
                        cell(&v["drain"]["replicas_left"])
                    )?;
                }
                crate::clock::pause(Duration::from_secs(2)).await;
                v = api.get(&path).await?;
            }
            if json_out {
                return print_json(&v);
            }
            describe_drain(&mut out, &v)?;
            Ok(())
        }
        Agents::Undrain { node_id } => {
            let v = api.delete(&format!("/v1/agents/{node_id}/drain")).await?;
            if json_out {
                return print_json(&v);
            }
            if v["was_draining"] == true {
                writeln!(out, "agent {node_id} is no longer drained")?;
            } else {
                writeln!(out, "agent {node_id} was not being drained")?;
            }
            Ok(())
        }
    }
}

fn describe_drain(out: &mut impl Write, v: &Value) -> anyhow::Result<()> {
    let d = &v["drain"];
    if !d.is_object() {
        return Ok(());
    }
    if d["safe_to_stop"] == true {
        writeln!(
            out,
            "agent {} is drained: it leads nothing and holds no replica; safe to stop",
            cell(&v["node_id"])
        )?;
    } else {
        writeln!(
            out,
            "agent {} is draining: {} leaderships and {} replicas left",
            cell(&v["node_id"]),
            cell(&d["leaderships_left"]),
            cell(&d["replicas_left"])
        )?;
        if let Some(why) = d["waiting_for"].as_str() {
            writeln!(out, "  waiting for {why}")?;
        }
    }
    Ok(())
}
