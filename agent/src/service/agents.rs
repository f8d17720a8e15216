//! The agents of the cluster as an operator sees them, and draining one: who is live,
//! on which rack and disk, how many replicas and leaderships each holds, which replicas
//! of gone agents wait for their replacement and until when, and for an agent being
//! drained, what it still holds and whether it is safe to stop. The HTTP API
//! (`/v1/agents`) and the CLI (`strata agents`) are its edges.
//!
//! A drain is a record in the metastore ([`strata_metastore::DrainRecord`]); the
//! controller then moves the agent's leaderships to other in-sync replicas and its
//! replicas to other agents (`controller.rs`, [`strata_replication::placement`]), and
//! gives it no new ones. It is safe to stop once it leads nothing and holds no replica.
//! Everything here is read fresh from the metastore.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
/// A live agent: where it listens (HTTP redirects go to its address).
pub use strata_metastore::AgentRecord;
use strata_metastore::{Roster, TopicRecord};
use strata_replication::placement::{self, Placed};
use utoipa::ToSchema;

use crate::audit::Audit;
use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::controller::{Healing, placed_agents_of};
use crate::replicas::ReplicaManager;

/// Why a request about agents is refused.
#[derive(Debug, thiserror::Error)]
pub enum AgentsError {
    /// A drain asked for without ALTER on the cluster.
    #[error(transparent)]
    Denied(crate::error::Error),
    #[error("no agent {0} has ever registered in this cluster")]
    UnknownAgent(i32),
    #[error(transparent)]
    Metastore(#[from] strata_metastore::Error),
}

/// One agent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = AgentStatus)]
pub struct AgentView {
    pub node_id: i32,
    pub live: bool,
    /// host:port of its inter-agent Kafka listener
    pub kafka: String,
    /// host:port of its HTTP API
    pub http: String,
    pub rack: Option<String>,
    /// The id of its data directory: a new disk is a new id
    pub data_dir_id: String,
    /// When its lease ended, if it is not live
    pub gone_since_ms: Option<i64>,
    /// Replicas on it, leaderships, and partitions that list it first.
    pub replicas: usize,
    pub leaderships: usize,
    pub preferred_leaderships: usize,
    /// Partitions whose replica on it is being moved elsewhere.
    pub moving_out: usize,
    /// Partitions whose replica on it is being added (copying).
    pub moving_in: usize,
    /// Replicas on it waiting for the replacement delay, and when the first is due.
    pub replacements_pending: usize,
    pub replacement_due_ms: Option<i64>,
    pub drain: Option<DrainView>,
}

/// A drain in progress.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = DrainStatus)]
pub struct DrainView {
    pub requested_at_ms: i64,
    pub leaderships_left: usize,
    pub replicas_left: usize,
    /// It leads nothing and holds no replica: stopping it costs nothing.
    pub safe_to_stop: bool,
    /// Why it is not done yet, when it cannot be done without more agents.
    pub waiting_for: Option<String>,
}

/// Every agent, and what placement is doing.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Agents)]
pub struct ClusterAgents {
    pub controller: i32,
    pub replica_replacement_delay_ms: i64,
    pub replica_moves_max: usize,
    pub moves_in_flight: usize,
    pub agents: Vec<AgentView>,
}

/// A partition named in a health report.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PartitionRef {
    pub topic: String,
    pub partition: u32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// The cluster at a glance (`GET /v1/cluster/health`, `strata cluster health`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClusterHealth {
    /// No partition offline or under-replicated, and no agent gone that holds replicas.
    pub healthy: bool,
    /// Why not, one line each.
    pub problems: Vec<String>,
    pub controller: i32,
    pub agents_live: usize,
    /// Registered agents whose lease has ended.
    pub agents_gone: Vec<i32>,
    /// Live agents by rack (`""`: none given).
    pub racks: BTreeMap<String, usize>,
    pub topics: usize,
    pub partitions: usize,
    /// Partitions without a live leader: nothing can be produced to or read from them.
    pub offline: Vec<PartitionRef>,
    /// Partitions whose ISR is smaller than their replica set.
    pub under_replicated: Vec<PartitionRef>,
    /// Replicas being copied to (reassignments, replacements and drains).
    pub replicas_rebuilding: usize,
    pub replacements_pending: usize,
    /// Agents being drained.
    pub draining: Vec<i32>,
    pub moves_in_flight: usize,
}

/// The agents service. Draining needs ALTER on the cluster and is audited here
/// (`agent.drain`, `agent.undrain`), refusals included.
pub struct Agents<'a> {
    pub replicas: &'a Arc<ReplicaManager>,
    pub healing: Healing,
    pub authorizer: &'a Authorizer,
    pub audit: &'a Audit,
}

impl Agents<'_> {
    /// ALTER on the cluster: what a drain needs.
    fn may_drain(&self, who: &Caller) -> Result<(), AgentsError> {
        let (alter, cluster) = (Operation::Alter, ResourceType::Cluster);
        if self
            .authorizer
            .allows(who.authz(), alter, cluster, CLUSTER_NAME)
        {
            return Ok(());
        }
        Err(AgentsError::Denied(crate::error::Error::denied(
            who,
            alter,
            cluster,
            CLUSTER_NAME,
        )))
    }

    fn record<T>(
        &self,
        who: &Caller,
        action: &str,
        node_id: i32,
        outcome: &Result<T, AgentsError>,
        answer: impl FnOnce(&T) -> serde_json::Value,
    ) {
        let logged = match outcome {
            Ok(t) => Ok(answer(t)),
            Err(e) => Err(e.to_string()),
        };
        self.audit.record(
            who,
            action,
            &format!("agent:{node_id}"),
            serde_json::json!({}),
            logged,
        );
    }

    fn now_ms(&self) -> i64 {
        self.replicas.membership().clock().wall_ms()
    }

    /// Every agent the metastore knows of, by node id.
    pub async fn list(&self) -> Result<ClusterAgents, AgentsError> {
        let metastore = self.replicas.metastore();
        let roster = metastore.roster().await?;
        let topics = metastore.topics().await?;
        Ok(self.view(&roster, &topics))
    }

    /// The cluster's health: agents, partitions offline or under-replicated, and the
    /// repairs under way.
    pub async fn health(&self) -> Result<ClusterHealth, AgentsError> {
        let metastore = self.replicas.metastore();
        let roster = metastore.roster().await?;
        let topics = metastore.topics().await?;
        let now = self.now_ms();
        let view = self.view(&roster, &topics);
        // Liveness as the agents' view decided it.
        let live: Vec<i32> = view
            .agents
            .iter()
            .filter(|a| a.live)
            .map(|a| a.node_id)
            .collect();
        let mut racks = BTreeMap::new();
        for a in view.agents.iter().filter(|a| a.live) {
            *racks.entry(a.rack.clone().unwrap_or_default()).or_insert(0) += 1;
        }
        let mut offline = Vec::new();
        let mut under_replicated = Vec::new();
        let mut partitions = 0;
        let mut rebuilding = 0;
        for t in &topics {
            for p in &t.partitions {
                partitions += 1;
                rebuilding += p.adding.len();
                let named = || PartitionRef {
                    topic: t.name.clone(),
                    partition: p.index,
                    leader: p.leader,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                };
                if !live.contains(&p.leader) {
                    offline.push(named());
                }
                if p.isr.len() < p.replicas.len() {
                    under_replicated.push(named());
                }
            }
        }
        let agents_gone: Vec<i32> = view
            .agents
            .iter()
            .filter(|a| !a.live)
            .map(|a| a.node_id)
            .collect();
        let mut problems = Vec::new();
        if !offline.is_empty() {
            problems.push(format!(
                "{} partitions offline (no live leader)",
                offline.len()
            ));
        }
        if !under_replicated.is_empty() {
            problems.push(format!(
                "{} partitions under-replicated (ISR smaller than the replicas)",
                under_replicated.len()
            ));
        }
        for a in view.agents.iter().filter(|a| !a.live && a.replicas > 0) {
            problems.push(format!(
                "agent {} is gone and holds {} replicas{}",
                a.node_id,
                a.replicas,
                match a.replacement_due_ms {
                    Some(due) => format!(
                        " (they are replaced elsewhere in {} s unless it comes back)",
                        ((due - now).max(0) + 999) / 1000
                    ),
                    None => String::new(),
                }
            ));
        }
        Ok(ClusterHealth {
            healthy: problems.is_empty(),
            problems,
            controller: view.controller,
            agents_live: live.len(),
            agents_gone,
            racks,
            topics: topics.len(),
            partitions,
            offline,
            under_replicated,
            replicas_rebuilding: rebuilding,
            replacements_pending: view.agents.iter().map(|a| a.replacements_pending).sum(),
            draining: view
                .agents
                .iter()
                .filter(|a| a.drain.is_some())
                .map(|a| a.node_id)
                .collect(),
            moves_in_flight: view.moves_in_flight,
        })
    }

    /// One agent.
    pub async fn get(&self, node_id: i32) -> Result<AgentView, AgentsError> {
        self.list()
            .await?
            .agents
            .into_iter()
            .find(|a| a.node_id == node_id)
            .ok_or(AgentsError::UnknownAgent(node_id))
    }

    /// Starts draining agent `node_id` (the one registered under it now), for a caller
    /// with ALTER on the cluster; returns it.
    pub async fn drain(&self, who: &Caller, node_id: i32) -> Result<AgentView, AgentsError> {
        let outcome = self.drained(who, node_id).await;
        self.record(who, "agent.drain", node_id, &outcome, |v| {
            serde_json::to_value(v).unwrap_or_default()
        });
        outcome
    }

    async fn drained(&self, who: &Caller, node_id: i32) -> Result<AgentView, AgentsError> {
        self.may_drain(who)?;
        match self
            .replicas
            .metastore()
            .start_drain(node_id, self.now_ms())
            .await
        {
            Err(strata_metastore::Error::Invalid(_)) => {
                return Err(AgentsError::UnknownAgent(node_id));
            }
            r => r?,
        };
        tracing::info!(node_id, "draining agent");
        self.get(node_id).await
    }

    /// Stops draining `node_id`, for a caller with ALTER on the cluster; returns
    /// whether a drain was in force.
    pub async fn undrain(&self, who: &Caller, node_id: i32) -> Result<bool, AgentsError> {
        let outcome = self.undrained(who, node_id).await;
        self.record(
            who,
            "agent.undrain",
            node_id,
            &outcome,
            |was| serde_json::json!({ "node_id": node_id, "draining": false, "was_draining": was }),
        );
        outcome
    }

    async fn undrained(&self, who: &Caller, node_id: i32) -> Result<bool, AgentsError> {
        self.may_drain(who)?;
        let metastore = self.replicas.metastore();
        if metastore.roster().await?.agent(node_id).is_none() {
            return Err(AgentsError::UnknownAgent(node_id));
        }
        let was = metastore.stop_drain(node_id).await?;
        if was {
            tracing::info!(node_id, "no longer draining agent");
        }
        Ok(was)
    }

    fn view(&self, roster: &Roster, topics: &[TopicRecord]) -> ClusterAgents {
        let now = self.now_ms();
        let placed: Vec<Placed> = topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| Placed {
                    topic: &t.name,
                    record: p,
                })
            })
            .collect();
        let agents = placed_agents_of(roster, &placed, now, &mut BTreeMap::new());
        let plan = placement::plan(&placed, &agents, &self.healing.policy(), now);
        let views = roster
            .agents
            .iter()
            .map(|a| {
                let n = a.node_id;
                let live = a.lease_until_ms > now;
                let on = |f: &dyn Fn(&strata_metastore::PartitionRecord) -> bool| {
                    placed.iter().filter(|p| f(p.record)).count()
                };
                let replicas = on(&|r| r.replicas.contains(&n));
                let leaderships = on(&|r| r.leader == n);
                let pending: Vec<i64> = plan
                    .pending
                    .iter()
                    .filter(|p| p.replica == n)
                    .map(|p| p.due_ms)
                    .collect();
                let drain = roster
                    .drains
                    .get(&n)
                    .filter(|_| roster.is_draining(a))
                    .map(|d| {
                        let planned = plan.moves.iter().any(|m| m.replicas.contains(&n));
                        let moving = on(&|r| r.removing.contains(&n));
                        DrainView {
                            requested_at_ms: d.requested_at_ms,
                            leaderships_left: leaderships,
                            replicas_left: replicas,
                            safe_to_stop: replicas == 0 && leaderships == 0,
                            waiting_for: (replicas > 0 && moving == 0 && !planned).then(|| {
                                "an agent to take its replicas: every live agent that is not being \
                             drained already holds a replica of the partitions left, or the \
                             moves budget is in use"
                                    .to_string()
                            }),
                        }
                    });
                AgentView {
                    node_id: n,
                    live,
                    kafka: format!("{}:{}", a.host, a.port),
                    http: a.http.clone(),
                    rack: a.rack.clone(),
                    data_dir_id: a.data_dir_id.clone(),
                    gone_since_ms: (!live).then_some(a.lease_until_ms),
                    replicas,
                    leaderships,
                    preferred_leaderships: on(&|r| r.replicas.first() == Some(&n)),
                    moving_out: on(&|r| r.removing.contains(&n)),
                    moving_in: on(&|r| r.adding.contains(&n)),
                    replacements_pending: pending.len(),
                    replacement_due_ms: pending.iter().min().copied(),
                    drain,
                }
            })
            .collect();
        ClusterAgents {
            controller: self.replicas.membership().controller_id(),
            replica_replacement_delay_ms: self.healing.replacement_delay.as_millis() as i64,
            replica_moves_max: self.healing.max_moves,
            moves_in_flight: plan.in_flight,
            agents: views,
        }
    }
}
