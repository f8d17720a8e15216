//! `strata agents`: the agents of the cluster, and draining one (`GET /v1/agents`,
//! `POST`/`DELETE /v1/agents/{id}/drain`).

use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use clap::Subcommand;
use serde_json::Value;

use super::{Api, Conn, Output, print_json, table, typed};
use crate::http::model::Undrained;
use crate::service::agents::{AgentView, ClusterAgents};

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

fn row(a: &AgentView) -> Vec<String> {
    let state = match (&a.drain, a.replacement_due_ms) {
        _ if !a.live => match a.replacement_due_ms {
            Some(due) => format!("gone (replaced at {due})"),
            None => "gone".to_string(),
        },
        (Some(drain), _) if drain.safe_to_stop => "drained: safe to stop".to_string(),
        (Some(_), _) => "draining".to_string(),
        (None, _) => "live".to_string(),
    };
    vec![
        a.node_id.to_string(),
        state,
        a.rack.clone().unwrap_or_else(|| "-".to_string()),
        a.replicas.to_string(),
        a.leaderships.to_string(),
        format!("+{} -{}", a.moving_in, a.moving_out),
        a.kafka.clone(),
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
            let v: ClusterAgents = typed(v, "the agents")?;
            writeln!(
                out,
                "controller {}  moves in flight {} (at most {})  replacement delay {} ms",
                v.controller,
                v.moves_in_flight,
                v.replica_moves_max,
                v.replica_replacement_delay_ms
            )?;
            let rows: Vec<Vec<String>> = v.agents.iter().map(row).collect();
            table(&mut out, &HEADERS, &rows)?;
            Ok(())
        }
        Agents::Describe { node_id } => {
            let v = api.get(&format!("/v1/agents/{node_id}")).await?;
            if json_out {
                return print_json(&v);
            }
            let v: AgentView = typed(v, "an agent")?;
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
            let mut answer = api
                .post(&format!("{path}/drain"), Value::Object(Default::default()))
                .await?;
            let mut v: AgentView = typed(answer.clone(), "an agent")?;
            let deadline = crate::clock::instant() + Duration::from_secs(timeout);
            while wait && !v.drain.as_ref().is_some_and(|d| d.safe_to_stop) {
                if crate::clock::instant() >= deadline {
                    describe_drain(&mut out, &v)?;
                    bail!("agent {node_id} is not drained after {timeout} s");
                }
                if !json_out && let Some(d) = &v.drain {
                    writeln!(
                        out,
                        "draining agent {node_id}: {} leaderships and {} replicas left",
                        d.leaderships_left, d.replicas_left
                    )?;
                }
                crate::clock::pause(Duration::from_secs(2)).await;
                answer = api.get(&path).await?;
                v = typed(answer.clone(), "an agent")?;
            }
            if json_out {
                return print_json(&answer);
            }
            describe_drain(&mut out, &v)?;
            Ok(())
        }
        Agents::Undrain { node_id } => {
            let v = api.delete(&format!("/v1/agents/{node_id}/drain")).await?;
            if json_out {
                return print_json(&v);
            }
            let v: Undrained = typed(v, "an undrain")?;
            if v.was_draining {
                writeln!(out, "agent {node_id} is no longer drained")?;
            } else {
                writeln!(out, "agent {node_id} was not being drained")?;
            }
            Ok(())
        }
    }
}

fn describe_drain(out: &mut impl Write, v: &AgentView) -> anyhow::Result<()> {
    let Some(d) = &v.drain else {
        return Ok(());
    };
    if d.safe_to_stop {
        writeln!(
            out,
            "agent {} is drained: it leads nothing and holds no replica; safe to stop",
            v.node_id
        )?;
    } else {
        writeln!(
            out,
            "agent {} is draining: {} leaderships and {} replicas left",
            v.node_id, d.leaderships_left, d.replicas_left
        )?;
        if let Some(why) = &d.waiting_for {
            writeln!(out, "  waiting for {why}")?;
        }
    }
    Ok(())
}
