//! Where the partitions and groups of an HTTP request live, and the Kafka connections
//! to the agents that serve the ones not served here.
//!
//! A produce reaches every partition's leader: this agent's own through the produce
//! service, the others over their Kafka listener (ordinary Produce requests). A consumer
//! instance lives on the coordinator of its group; the other agents redirect to it
//! (307, which keeps the method and the body).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use kafka_protocol::protocol::Request;
use strata_metastore::AgentRecord;
use tokio::time::Instant;

use crate::membership::Membership;
use crate::peer::Peer;

/// Connections kept per agent, and how long an idle one is kept: well under the
/// agents' own idle timeout, so a kept connection is not one the other side closed.
const IDLE_PER_AGENT: usize = 4;
const IDLE_FOR: Duration = Duration::from_secs(60);

/// Kafka connections to other agents, reused across HTTP requests.
pub struct Peers {
    node_id: i32,
    max_record_bytes: usize,
    idle: Mutex<HashMap<i32, Vec<(Peer, Instant)>>>,
}

impl Peers {
    pub fn new(node_id: i32, max_record_bytes: usize) -> Peers {
        Peers {
            node_id,
            max_record_bytes,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `request` to agent `node` and waits for its response.
    pub async fn send<R: Request>(
        &self,
        membership: &Membership,
        node: i32,
        version: i16,
        request: &R,
    ) -> anyhow::Result<R::Response> {
        let kept = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let list = idle.entry(node).or_default();
            list.retain(|(_, since)| since.elapsed() < IDLE_FOR);
            list.pop()
        };
        let mut peer = match kept {
            Some((peer, _)) => peer,
            None => {
                let address = membership
                    .address_of(node)
                    .with_context(|| format!("agent {node} is not live"))?;
                Peer::connect(
                    &address,
                    self.node_id,
                    self.max_record_bytes,
                    membership.peer_access(),
                )
                .await
                .with_context(|| format!("cannot connect to agent {node} at {address}"))?
            }
        };
        let response = peer.send(version, request).await?;
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry(node).or_default();
        if list.len() < IDLE_PER_AGENT {
            list.push((peer, crate::clock::instant()));
        }
        Ok(response)
    }
}

/// Where clients reach an agent's HTTP API: its HTTP listener, with the host of its
/// advertised Kafka address when the listener is on every interface.
pub fn http_address(agent: &AgentRecord) -> String {
    match agent.http.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => format!("{}:{}", agent.host, addr.port()),
        _ => agent.http.clone(),
    }
}

/// A 307 to the same path and query on `agent`'s HTTP API.
pub fn redirect(agent: &AgentRecord, uri: &Uri) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let location = format!("http://{}{path}", http_address(agent));
    (
        StatusCode::TEMPORARY_REDIRECT,
        [(header::LOCATION, location)],
    )
        .into_response()
}
