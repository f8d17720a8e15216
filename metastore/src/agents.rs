//! Agent membership: each agent registers itself under its node id and keeps a lease.
//!
//! | key                          | value       | written by                                |
//! |------------------------------|-------------|-------------------------------------------|
//! | (prefix, "agent", node id)   | AgentRecord | that agent only, every lease renewal      |
//! | (prefix, "drain", node id)   | DrainRecord | an operator (`strata agents drain`)       |
//! | (prefix, "agents-version")   | counter     | atomic add when an agent joins or leaves, |
//! |                              |             | or a drain starts or stops                |
//!
//! An agent whose lease ran out is not a member. A node id belongs to one running
//! process at a time: registering fails while another incarnation holds a live lease.
//! An agent that leaves cleanly ends its lease at once but keeps its record, so that
//! when it left stays known (the controller replaces the replicas of agents gone for
//! longer than `replica_replacement_delay_ms`).
//!
//! A drain applies to the agent that ran on the node id when it was asked for (its data
//! directory): a new disk under the same node id is a new agent, not drained.
//! Leases compare wall clocks of the agents' machines, so they assume clocks agree to
//! well within a lease (NTP does this; see docs/metastore.md).

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use strata_core::{LiveAgent, LiveAgents};

use crate::error::{Error, Result};
use crate::kv::{KvTransaction, Watch, prefix_end};
use crate::topics::{Metastore, decode, encode};

/// A running agent, as the others see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub node_id: i32,
    /// Where clients reach its Kafka listener.
    pub host: String,
    pub port: i32,
    /// Its HTTP API (`host:port`).
    pub http: String,
    /// Every Kafka listener's advertised address, by listener name (the one above is
    /// the inter-agent listener's). Empty in records written before listeners had names:
    /// then the address above serves every listener.
    #[serde(default)]
    pub listeners: Vec<ListenerAddress>,
    pub rack: Option<String>,
    /// Random per process start: tells a restarted agent from the one before it.
    pub incarnation: String,
    /// Random per data directory: a process on the same data directory is the same
    /// agent restarted (the directory's lock means the one before it is gone).
    pub data_dir_id: String,
    /// Wall-clock milliseconds until which it is a member.
    pub lease_until_ms: i64,
}

/// Where one named Kafka listener of an agent is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerAddress {
    pub name: String,
    pub host: String,
    pub port: i32,
}

/// An agent being drained: it takes no new replicas or leaderships, and the controller
/// moves its leaderships and then its replicas to other agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRecord {
    /// The data directory of the agent drained (a new disk under its node id is not).
    pub data_dir_id: String,
    pub requested_at_ms: i64,
}

/// Every agent the metastore knows of (live or not: a record's lease end says when it
/// left), and the drains in force.
#[derive(Debug, Clone, Default)]
pub struct Roster {
    /// By node id.
    pub agents: Vec<AgentRecord>,
    pub drains: BTreeMap<i32, DrainRecord>,
}

impl Roster {
    /// The agents live at `now_ms`.
    pub fn live(&self, now_ms: i64) -> impl Iterator<Item = &AgentRecord> + '_ {
        self.agents
            .iter()
            .filter(move |a| a.lease_until_ms > now_ms)
    }

    /// Whether the agent registered as `a` is being drained.
    pub fn is_draining(&self, a: &AgentRecord) -> bool {
        self.drains
            .get(&a.node_id)
            .is_some_and(|d| d.data_dir_id == a.data_dir_id)
    }

    /// The agents live at `now_ms`, as elections and ISR changes see them.
    pub fn live_agents(&self, now_ms: i64) -> LiveAgents {
        LiveAgents::new(self.live(now_ms).map(|a| {
            (
                a.node_id,
                LiveAgent {
                    directory: a.data_dir_id.clone(),
                    draining: self.is_draining(a),
                },
            )
        }))
    }

    pub fn agent(&self, node_id: i32) -> Option<&AgentRecord> {
        self.agents.iter().find(|a| a.node_id == node_id)
    }
}

impl AgentRecord {
    /// The address clients that came in on `listener` should use to reach this agent;
    /// `None` if it has no such listener (Kafka then leaves the broker out of Metadata).
    pub fn address(&self, listener: &str) -> Option<(&str, i32)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners
            .iter()
            .find(|l| l.name == listener)
            .map(|l| (l.host.as_str(), l.port))
    }
}

impl Metastore {
    fn agent_key(&self, node_id: i32) -> Vec<u8> {
        self.key().str("agent").u32(node_id as u32).into_bytes()
    }

    fn agents_version_key(&self) -> Vec<u8> {
        self.key().str("agents-version").into_bytes()
    }

    /// Starts a watch that resolves when an agent joins or leaves cleanly (not on lease
    /// renewals, and not when a lease runs out: readers notice that by the time).
    pub async fn watch_agents(&self) -> Result<Watch> {
        self.kv().watch(&self.agents_version_key()).await
    }

    /// Registers or renews `record` (its node id, incarnation and lease). Fails with
    /// [`Error::NodeIdInUse`] while an agent with another data directory holds a lease
    /// on the node id at `now_ms`; the same data directory restarted (after a crash, its
    /// old lease still running) takes its id back at once. Idempotent: a rerun writes the
    /// same record.
    pub async fn register_agent(&self, record: AgentRecord, now_ms: i64) -> Result<()> {
        let key = self.agent_key(record.node_id);
        let version = self.agents_version_key();
        self.transact(move |txn| {
            let (key, record, version) = (key.clone(), record.clone(), version.clone());
            async move {
                let mut joining = true;
                if let Some(v) = txn.get(&key).await? {
                    let holder: AgentRecord = decode(&key, &v)?;
                    joining = holder.incarnation != record.incarnation;
                    if holder.data_dir_id != record.data_dir_id && holder.lease_until_ms > now_ms {
                        return Err(Error::NodeIdInUse {
                            node_id: record.node_id,
                            holder: format!("{}:{}", holder.host, holder.port),
                            lease_left_ms: holder.lease_until_ms - now_ms,
                        });
                    }
                }
                txn.set(&key, &encode(&record));
                if joining {
                    txn.atomic_add(&version, 1);
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Ends the lease of this incarnation at `now_ms` (a clean shutdown), so that others
    /// need not wait for it to run out; the record stays, saying when it left. A newer
    /// incarnation's record is left alone.
    pub async fn deregister_agent(
        &self,
        node_id: i32,
        incarnation: &str,
        now_ms: i64,
    ) -> Result<()> {
        let key = self.agent_key(node_id);
        let version = self.agents_version_key();
        let incarnation = incarnation.to_string();
        self.transact(move |txn| {
            let (key, incarnation, version) = (key.clone(), incarnation.clone(), version.clone());
            async move {
                if let Some(v) = txn.get(&key).await? {
                    let mut holder: AgentRecord = decode(&key, &v)?;
                    if holder.incarnation == incarnation && holder.lease_until_ms > now_ms {
                        holder.lease_until_ms = now_ms;
                        txn.set(&key, &encode(&holder));
                        txn.atomic_add(&version, 1);
                    }
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Forgets the record of agent `node_id` if it has been gone since before
    /// `before_ms` (the controller prunes agents no partition names any more).
    pub async fn forget_agent(&self, node_id: i32, before_ms: i64) -> Result<()> {
        let key = self.agent_key(node_id);
        self.transact(move |txn| {
            let key = key.clone();
            async move {
                if let Some(v) = txn.get(&key).await? {
                    let holder: AgentRecord = decode(&key, &v)?;
                    if holder.lease_until_ms < before_ms {
                        txn.clear(&key);
                    }
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }

    fn drain_key(&self, node_id: i32) -> Vec<u8> {
        self.key().str("drain").u32(node_id as u32).into_bytes()
    }

    /// Starts draining the agent registered as `node_id` (at `now_ms`); returns the
    /// drain (the one in force already, if any). Fails if no agent ever registered as
    /// `node_id`.
    pub async fn start_drain(&self, node_id: i32, now_ms: i64) -> Result<DrainRecord> {
        let (agent, drain) = (self.agent_key(node_id), self.drain_key(node_id));
        let version = self.agents_version_key();
        self.transact(move |txn| {
            let (agent, drain, version) = (agent.clone(), drain.clone(), version.clone());
            async move {
                let Some(v) = txn.get(&agent).await? else {
                    return Err(Error::Invalid(format!("no agent {node_id} is registered")));
                };
                let holder: AgentRecord = decode(&agent, &v)?;
                if let Some(v) = txn.get(&drain).await? {
                    let current: DrainRecord = decode(&drain, &v)?;
                    if current.data_dir_id == holder.data_dir_id {
                        return Ok(current);
                    }
                }
                let record = DrainRecord {
                    data_dir_id: holder.data_dir_id,
                    requested_at_ms: now_ms,
                };
                txn.set(&drain, &encode(&record));
                txn.atomic_add(&version, 1);
                Ok(record)
            }
            .boxed()
        })
        .await
    }

    /// Stops draining `node_id`; returns whether a drain was in force.
    pub async fn stop_drain(&self, node_id: i32) -> Result<bool> {
        let drain = self.drain_key(node_id);
        let version = self.agents_version_key();
        self.transact(move |txn| {
            let (drain, version) = (drain.clone(), version.clone());
            async move {
                let found = txn.get(&drain).await?.is_some();
                if found {
                    txn.clear(&drain);
                    txn.atomic_add(&version, 1);
                }
                Ok(found)
            }
            .boxed()
        })
        .await
    }

    /// Every agent record and drain.
    pub async fn roster(&self) -> Result<Roster> {
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            async move { this.roster_in(txn).await }.boxed()
        })
        .await
    }

    /// [`Metastore::roster`] inside a transaction of the caller's.
    pub(crate) async fn roster_in(&self, txn: &mut dyn KvTransaction) -> Result<Roster> {
        let begin = self.key().str("agent").into_bytes();
        let mut agents = Vec::new();
        for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
            agents.push(decode::<AgentRecord>(&k, &v)?);
        }
        let begin = self.key().str("drain").into_bytes();
        let mut drains = BTreeMap::new();
        for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
            let Some(node) = crate::keys::u32_at(&k, begin.len()) else {
                return Err(Error::Corrupt {
                    key: String::from_utf8_lossy(&k).into_owned(),
                    reason: "a drain key without a node id".to_string(),
                });
            };
            drains.insert(node as i32, decode::<DrainRecord>(&k, &v)?);
        }
        Ok(Roster { agents, drains })
    }

    /// Every agent whose lease is live at `now_ms`, by node id.
    pub async fn live_agents(&self, now_ms: i64) -> Result<Vec<AgentRecord>> {
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            async move { this.live_agents_in(txn, now_ms).await }.boxed()
        })
        .await
    }

    /// [`Metastore::live_agents`] inside a transaction of the caller's (so that a
    /// decision made on it commits only if no lease changed meanwhile).
    pub(crate) async fn live_agents_in(
        &self,
        txn: &mut dyn KvTransaction,
        now_ms: i64,
    ) -> Result<Vec<AgentRecord>> {
        let begin = self.key().str("agent").into_bytes();
        let end = prefix_end(&begin);
        let mut out = Vec::new();
        for (k, v) in txn.get_range(&begin, &end, 0, false).await? {
            let record: AgentRecord = decode(&k, &v)?;
            if record.lease_until_ms > now_ms {
                out.push(record);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent whose data directory is named by the incarnation's first letter.
    fn agent(node_id: i32, incarnation: &str, lease_until_ms: i64) -> AgentRecord {
        AgentRecord {
            node_id,
            listeners: Vec::new(),
            host: "127.0.0.1".into(),
            port: 9000 + node_id,
            http: format!("127.0.0.1:{}", 9600 + node_id),
            rack: None,
            incarnation: incarnation.into(),
            data_dir_id: incarnation[..1].into(),
            lease_until_ms,
        }
    }

    #[tokio::test]
    async fn leases_admit_one_incarnation_per_node_id() {
        for (name, m, _dir) in crate::test_metastores() {
            m.register_agent(agent(1, "a", 10_000), 0)
                .await
                .expect("register");
            m.register_agent(agent(2, "b", 10_000), 0)
                .await
                .expect("register");
            // Renewal by the same incarnation.
            m.register_agent(agent(1, "a", 20_000), 5_000)
                .await
                .expect("renew");
            // The same data directory restarted while its old lease runs: let in.
            m.register_agent(agent(1, "a2", 20_000), 6_000)
                .await
                .expect("restart");
            m.register_agent(agent(1, "a", 20_000), 7_000)
                .await
                .expect("renew");
            // Another agent with node id 1 while the lease is live: refused.
            let r = m.register_agent(agent(1, "c", 30_000), 15_000).await;
            assert!(
                matches!(r, Err(Error::NodeIdInUse { node_id: 1, .. })),
                "{name}: {r:?}"
            );
            let live: Vec<i32> = m
                .live_agents(15_000)
                .await
                .expect("live")
                .iter()
                .map(|a| a.node_id)
                .collect();
            assert_eq!(live, vec![1], "{name}: agent 2's lease ran out at 10 000");
            // Once the lease ran out, the new incarnation takes the id over.
            m.register_agent(agent(1, "c", 40_000), 25_000)
                .await
                .expect("take over");
            // The old incarnation's clean shutdown must not remove the new one.
            m.deregister_agent(1, "a", 25_000)
                .await
                .expect("deregister");
            assert_eq!(
                m.live_agents(25_000).await.expect("live").len(),
                1,
                "{name}"
            );
            m.deregister_agent(1, "c", 26_000)
                .await
                .expect("deregister");
            assert!(
                m.live_agents(26_000).await.expect("live").is_empty(),
                "{name}"
            );
            // Its record stays, saying when it left; pruning it needs that long ago.
            let roster = m.roster().await.expect("roster");
            assert_eq!(
                roster.agent(1).map(|a| a.lease_until_ms),
                Some(26_000),
                "{name}"
            );
            m.forget_agent(1, 26_000).await.expect("forget");
            assert!(
                m.roster().await.expect("roster").agent(1).is_some(),
                "{name}"
            );
            m.forget_agent(1, 26_001).await.expect("forget");
            assert!(
                m.roster().await.expect("roster").agent(1).is_none(),
                "{name}"
            );
            eprintln!("agent leases ok on {name}");
        }
    }

    /// A drain names the agent's data directory: the same agent restarted is still
    /// drained, a new disk under its node id is not; stopping it ends it.
    #[tokio::test]
    async fn a_drain_applies_to_the_agent_it_was_asked_for() {
        for (name, m, _dir) in crate::test_metastores() {
            assert!(
                matches!(m.start_drain(1, 0).await, Err(Error::Invalid(_))),
                "{name}: no such agent"
            );
            m.register_agent(agent(1, "a", 10_000), 0)
                .await
                .expect("register");
            m.register_agent(agent(2, "b", 10_000), 0)
                .await
                .expect("register");
            let d = m.start_drain(1, 500).await.expect("drain");
            assert_eq!(d.data_dir_id, "a", "{name}");
            assert_eq!(m.start_drain(1, 900).await.expect("again"), d, "{name}");
            let view = m.roster().await.expect("roster").live_agents(1_000);
            assert!(view.is_draining(1) && !view.is_draining(2), "{name}");
            // Restarted on the same directory: still drained.
            m.register_agent(agent(1, "a2", 20_000), 2_000)
                .await
                .expect("restart");
            assert!(
                m.roster()
                    .await
                    .expect("roster")
                    .live_agents(2_000)
                    .is_draining(1)
            );
            // A new disk under node id 1 (once the lease ran out): not drained.
            m.register_agent(agent(1, "x", 40_000), 30_000)
                .await
                .expect("new disk");
            let view = m.roster().await.expect("roster").live_agents(30_000);
            assert!(view.is_live(1) && !view.is_draining(1), "{name}");
            assert!(m.stop_drain(1).await.expect("stop"), "{name}");
            assert!(!m.stop_drain(1).await.expect("stop again"), "{name}");
        }
    }
}
