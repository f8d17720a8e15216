//! Leader elections. The live agent with the lowest node id acts as controller: it looks
//! at every partition whose leader is not live (its lease ran out, or it left) and elects
//! a new one with [`strata_replication::elect`], completes reassignments whose new
//! replicas are in sync ([`strata_replication::finish_reassignment`]), and now and then
//! hands leadership back to preferred replicas with [`strata_replication::prefer`].
//!
//! Each decision is one metastore transaction that re-reads the partition and applies
//! the rule only if the leader epoch is still the one the decision was made on, and that
//! bumps the epoch. So a stale controller, or two agents that briefly both think they are
//! the controller, cannot elect twice or undo a newer election: the metastore, not the
//! controller, is the authority.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::broker::Broker;

/// How often the controller looks for partitions without a live leader. An expired lease
/// is noticed at the next membership refresh (a fifth of the lease) plus this.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Runs elections while this agent is the controller. Stops on shutdown.
pub async fn run(broker: Arc<Broker>) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let rebalance_every = Duration::from_millis(broker.settings.leader_rebalance_interval_ms);
    let mut next_rebalance = Instant::now() + rebalance_every;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = broker.shutdown.cancelled() => return,
        }
        if broker.membership.controller_id() != broker.node_id {
            continue;
        }
        let rebalance = !rebalance_every.is_zero() && Instant::now() >= next_rebalance;
        if rebalance {
            next_rebalance = Instant::now() + rebalance_every;
        }
        elect_all(&broker, rebalance).await;
    }
}

/// One pass over every partition.
async fn elect_all(broker: &Broker, rebalance: bool) {
    let live = broker.membership.live_ids();
    for topic in broker.topics() {
        let unclean = topic.config.unclean_leader_election();
        for p in &topic.record.partitions {
            let decide = {
                let live = live.clone();
                move |cur: &strata_replication::PartitionRecord| {
                    strata_replication::elect(cur, &live, unclean)
                        .or_else(|| strata_replication::finish_reassignment(cur, &live))
                        .or_else(|| {
                            rebalance
                                .then(|| strata_replication::prefer(cur, &live))
                                .flatten()
                        })
                }
            };
            let Some(wanted) = decide(p) else { continue };
            let seen_epoch = p.leader_epoch;
            let result = broker
                .metastore
                .update_partition(&topic.record.name, p.index, move |cur| {
                    if cur.leader_epoch == seen_epoch {
                        decide(cur)
                    } else {
                        None
                    }
                })
                .await;
            match result {
                Ok(Some(r)) if r.leader_epoch == wanted.leader_epoch => {
                    tracing::info!(
                        topic = %topic.record.name,
                        partition = p.index,
                        old_leader = p.leader,
                        leader = r.leader,
                        epoch = r.leader_epoch,
                        isr = ?r.isr,
                        replicas = ?r.replicas,
                        "elected a leader"
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(topic = %topic.record.name, partition = p.index, error = %e, "election failed");
                }
            }
        }
    }
}
