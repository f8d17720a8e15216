//! Agent membership: each agent registers itself under its node id and keeps a lease.
//!
//! | key                          | value       | written by                            |
//! |------------------------------|-------------|---------------------------------------|
//! | (prefix, "agent", node id)   | AgentRecord | that agent only, every lease renewal  |
//! | (prefix, "agents-version")   | counter     | atomic add when an agent joins/leaves |
//!
//! An agent whose lease ran out is not a member. A node id belongs to one running
//! process at a time: registering fails while another incarnation holds a live lease.
//! Leases compare wall clocks of the agents' machines, so they assume clocks agree to
//! well within a lease (NTP does this; see docs/metastore.md).

use futures::FutureExt;
use serde::{Deserialize, Serialize};

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

    /// Removes the registration of this incarnation (a clean shutdown), so that others
    /// need not wait for the lease to run out. A newer incarnation's record stays.
    pub async fn deregister_agent(&self, node_id: i32, incarnation: &str) -> Result<()> {
        let key = self.agent_key(node_id);
        let version = self.agents_version_key();
        let incarnation = incarnation.to_string();
        self.transact(move |txn| {
            let (key, incarnation, version) = (key.clone(), incarnation.clone(), version.clone());
            async move {
                if let Some(v) = txn.get(&key).await? {
                    let holder: AgentRecord = decode(&key, &v)?;
                    if holder.incarnation == incarnation {
                        txn.clear(&key);
                        txn.atomic_add(&version, 1);
                    }
                }
                Ok(())
            }
            .boxed()
        })
        .await
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
            m.deregister_agent(1, "a").await.expect("deregister");
            assert_eq!(
                m.live_agents(25_000).await.expect("live").len(),
                1,
                "{name}"
            );
            m.deregister_agent(1, "c").await.expect("deregister");
            assert!(
                m.live_agents(25_000).await.expect("live").is_empty(),
                "{name}"
            );
            eprintln!("agent leases ok on {name}");
        }
    }
}
