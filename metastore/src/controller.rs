//! The controller lease: which one agent runs elections.
//!
//! | key                     | value           | written by                               |
//! |-------------------------|-----------------|------------------------------------------|
//! | (prefix, "controller")  | ControllerLease | the holder (renewals), or a claimant once |
//! |                         |                 | the holder's lease ran out               |
//!
//! An agent claims the lease when nobody holds it or the holder's lease ended, and
//! renews it while it holds it. Every decision a controller makes
//! ([`Metastore::update_partition_as_controller`]) checks, in the same transaction, that
//! its lease is still the current one, and reads the live agents in that transaction
//! too: so two agents can never both act as controller, and no election is made on a
//! stale view of who is live (a renewal that lands first makes the election conflict
//! and re-read). Like agent leases, it compares wall clocks across agents.

use futures::FutureExt;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use strata_core::LiveAgents;

use crate::error::{Error, Result};
use crate::topics::{Metastore, PartitionRecord, decode, encode};

/// Who runs elections, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerLease {
    pub node_id: i32,
    /// The holder's process (an agent restarted under the same node id claims anew).
    pub incarnation: String,
    /// Wall-clock milliseconds until which the holder is the controller.
    pub lease_until_ms: i64,
}

impl ControllerLease {
    fn held_by(&self, node_id: i32, incarnation: &str, now_ms: i64) -> bool {
        self.node_id == node_id && self.incarnation == incarnation && self.lease_until_ms > now_ms
    }
}

impl Metastore {
    fn controller_key(&self) -> Vec<u8> {
        self.key().str("controller").into_bytes()
    }

    /// The controller lease as it stands, whether or not it ran out.
    pub async fn controller(&self) -> Result<Option<ControllerLease>> {
        let key = self.controller_key();
        self.transact(move |txn| {
            let key = key.clone();
            async move {
                match txn.get(&key).await? {
                    Some(v) => Ok(Some(decode(&key, &v)?)),
                    None => Ok(None),
                }
            }
            .boxed()
        })
        .await
    }

    /// Takes the controller lease for `node_id` (its process `incarnation`) until
    /// `until_ms`, if nobody holds it at `now_ms` or this process already does; returns
    /// the lease as it stands afterwards (someone else's, if it was taken). Idempotent.
    pub async fn claim_controller(
        &self,
        node_id: i32,
        incarnation: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<ControllerLease> {
        let key = self.controller_key();
        let incarnation = incarnation.to_string();
        self.transact(move |txn| {
            let (key, incarnation) = (key.clone(), incarnation.clone());
            async move {
                if let Some(v) = txn.get(&key).await? {
                    let holder: ControllerLease = decode(&key, &v)?;
                    let ours = holder.node_id == node_id && holder.incarnation == incarnation;
                    if !ours && holder.lease_until_ms > now_ms {
                        return Ok(holder);
                    }
                }
                let lease = ControllerLease {
                    node_id,
                    incarnation,
                    lease_until_ms: until_ms,
                };
                txn.set(&key, &encode(&lease));
                Ok(lease)
            }
            .boxed()
        })
        .await
    }

    /// Gives the lease up (a clean shutdown), if this process holds it.
    pub async fn release_controller(&self, node_id: i32, incarnation: &str) -> Result<()> {
        let key = self.controller_key();
        let incarnation = incarnation.to_string();
        self.transact(move |txn| {
            let (key, incarnation) = (key.clone(), incarnation.clone());
            async move {
                if let Some(v) = txn.get(&key).await? {
                    let holder: ControllerLease = decode(&key, &v)?;
                    if holder.node_id == node_id && holder.incarnation == incarnation {
                        txn.clear(&key);
                    }
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// [`Metastore::update_partition`] for the controller: applies only while
    /// `node_id`/`incarnation` holds the controller lease at `now_ms`, checked in the
    /// same transaction (else [`Error::NotController`]), and `change` gets the agents
    /// live at `now_ms` as read in that transaction.
    pub async fn update_partition_as_controller<F>(
        &self,
        (node_id, incarnation): (i32, &str),
        now_ms: i64,
        topic: &str,
        index: u32,
        change: F,
    ) -> Result<Option<PartitionRecord>>
    where
        F: Fn(&PartitionRecord, &LiveAgents) -> Option<PartitionRecord> + Send + Sync + 'static,
    {
        let holder = (node_id, incarnation.to_string());
        self.update_partition_with_agents(Some(holder), now_ms, topic, index, change)
            .await
    }

    /// [`Metastore::update_partition`] where `change` gets the agents live at `now_ms`
    /// (their data directories and drains) as read in the same transaction: for changes
    /// that must not rest on a stale view of who holds which log (a leader's ISR
    /// additions, an agent opening a replica).
    pub async fn update_partition_seeing_agents<F>(
        &self,
        now_ms: i64,
        topic: &str,
        index: u32,
        change: F,
    ) -> Result<Option<PartitionRecord>>
    where
        F: Fn(&PartitionRecord, &LiveAgents) -> Option<PartitionRecord> + Send + Sync + 'static,
    {
        self.update_partition_with_agents(None, now_ms, topic, index, change)
            .await
    }

    async fn update_partition_with_agents<F>(
        &self,
        controller: Option<(i32, String)>,
        now_ms: i64,
        topic: &str,
        index: u32,
        change: F,
    ) -> Result<Option<PartitionRecord>>
    where
        F: Fn(&PartitionRecord, &LiveAgents) -> Option<PartitionRecord> + Send + Sync + 'static,
    {
        let key = self.controller_key();
        let topic = topic.to_string();
        let this = self.clone();
        let change = Arc::new(change);
        self.transact(move |txn| {
            let (this, key, topic, controller) =
                (this.clone(), key.clone(), topic.clone(), controller.clone());
            let change = Arc::clone(&change);
            async move {
                if let Some((node_id, incarnation)) = &controller {
                    let holder: Option<ControllerLease> = match txn.get(&key).await? {
                        Some(v) => Some(decode(&key, &v)?),
                        None => None,
                    };
                    if !holder
                        .as_ref()
                        .is_some_and(|h| h.held_by(*node_id, incarnation, now_ms))
                    {
                        return Err(Error::NotController {
                            node_id: *node_id,
                            holder: holder.map(|h| h.node_id),
                        });
                    }
                }
                let live = this.roster_in(txn).await?.live_agents(now_ms);
                this.change_partition_in(txn, &topic, index, &move |cur| change(cur, &live))
                    .await
            }
            .boxed()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{AgentRecord, NewTopic};

    fn agent(node_id: i32, lease_until_ms: i64) -> AgentRecord {
        AgentRecord {
            node_id,
            listeners: Vec::new(),
            host: "127.0.0.1".to_string(),
            port: 9092,
            http: String::new(),
            rack: None,
            incarnation: format!("i{node_id}"),
            data_dir_id: format!("d{node_id}"),
            lease_until_ms,
        }
    }

    /// One controller at a time: a second claimant waits for the lease to run out; a
    /// stale holder's decisions are refused in their own transaction; the live agents
    /// a decision sees are those of the transaction, not the caller's view.
    #[tokio::test]
    async fn one_controller_at_a_time_and_decisions_check_the_lease() {
        for (backend, m, _dir) in crate::test_metastores() {
            m.register_agent(agent(1, 10_000), 0)
                .await
                .expect("agent 1");
            m.register_agent(agent(2, 10_000), 0)
                .await
                .expect("agent 2");
            m.create_topic(NewTopic {
                name: "t".to_string(),
                replication_factor: 2,
                configs: BTreeMap::new(),
                assignments: vec![vec![1, 2]],
            })
            .await
            .expect("topic");
            let a = m.claim_controller(1, "i1", 0, 3_000).await.expect("claim");
            assert_eq!(a.node_id, 1, "{backend}");
            let b = m
                .claim_controller(2, "i2", 1_000, 4_000)
                .await
                .expect("claim");
            assert_eq!(b.node_id, 1, "{backend}: taken while held");
            let renewed = m
                .claim_controller(1, "i1", 2_000, 5_000)
                .await
                .expect("renew");
            assert_eq!(renewed.lease_until_ms, 5_000, "{backend}");

            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let elect = {
                let seen = Arc::clone(&seen);
                // Guarded by the epoch, as every election is: a rerun after "maybe
                // committed" changes nothing.
                move |cur: &PartitionRecord, live: &LiveAgents| {
                    *seen.lock().expect("lock") = live.ids().collect::<Vec<_>>();
                    (cur.leader_epoch == 0).then(|| PartitionRecord {
                        leader: 2,
                        leader_epoch: 1,
                        ..cur.clone()
                    })
                }
            };
            // Agent 2, not the controller, is refused.
            let refused = m
                .update_partition_as_controller((2, "i2"), 2_500, "t", 0, elect.clone())
                .await;
            assert!(
                matches!(
                    refused,
                    Err(Error::NotController {
                        node_id: 2,
                        holder: Some(1)
                    })
                ),
                "{backend}: {refused:?}"
            );
            // The holder decides, seeing the agents live at its time.
            let done = m
                .update_partition_as_controller((1, "i1"), 2_500, "t", 0, elect.clone())
                .await
                .expect("decide")
                .expect("partition");
            assert_eq!((done.leader, done.leader_epoch), (2, 1), "{backend}");
            assert_eq!(*seen.lock().expect("lock"), vec![1, 2], "{backend}");
            // Once the lease ran out the old holder decides nothing, and 2 may claim.
            let stale = m
                .update_partition_as_controller((1, "i1"), 6_000, "t", 0, elect.clone())
                .await;
            assert!(
                matches!(stale, Err(Error::NotController { .. })),
                "{backend}: {stale:?}"
            );
            let taken = m
                .claim_controller(2, "i2", 6_000, 9_000)
                .await
                .expect("claim");
            assert_eq!(taken.node_id, 2, "{backend}");
            // A restarted agent 1 (a new incarnation) is not the holder either.
            let b = m
                .claim_controller(1, "i1-again", 7_000, 10_000)
                .await
                .expect("claim");
            assert_eq!(b.node_id, 2, "{backend}");
            m.release_controller(2, "i2").await.expect("release");
            assert_eq!(m.controller().await.expect("read"), None, "{backend}");
        }
    }
}
