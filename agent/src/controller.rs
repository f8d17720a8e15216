//! Leader elections, run by the one agent that holds the controller lease in the
//! metastore ([`strata_metastore::controller`]). The controller looks at every partition
//! whose leader is not live (its lease ran out, or it left) and elects a new one with
//! [`strata_replication::elect`], completes reassignments whose new replicas are in sync
//! ([`strata_replication::finish_reassignment`]), and now and then hands leadership back
//! to preferred replicas with [`strata_replication::prefer`].
//!
//! Each decision is one metastore transaction that checks the controller lease is still
//! this agent's, reads the live agents, re-reads the partition and applies the rule only
//! if the leader epoch is still the one the decision was made on, and bumps the epoch.
//! So an agent that lost the lease (paused, cut off) cannot elect anything, two agents
//! can never both act as controller, and no election is made on a stale list of live
//! agents: the metastore, not the controller, is the authority.

use std::sync::Arc;
use std::time::Duration;

use crate::replicas::ReplicaManager;
use crate::tasks::Stopped;

/// How often the controller looks for partitions without a live leader. An expired lease
/// is noticed at the next membership refresh (a fifth of the lease) plus this.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Claims (and renews) the controller lease, and runs elections while this agent holds
/// it. Gives the lease up on shutdown.
pub async fn run(
    replicas: Arc<ReplicaManager>,
    lease: Duration,
    rebalance_every: Duration,
) -> Stopped {
    let renew_every = lease / 5;
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let clock = Arc::clone(replicas.membership().clock());
    let mut next_rebalance = clock.monotonic() + rebalance_every;
    let mut next_claim = clock.monotonic();
    let mut held_until: Option<Duration> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = replicas.shutdown().cancelled() => break,
        }
        if clock.monotonic() >= next_claim {
            next_claim = clock.monotonic() + renew_every;
            held_until = claim(&replicas, lease, renew_every).await;
        }
        if held_until.is_none_or(|until| clock.monotonic() >= until) {
            continue;
        }
        let rebalance = !rebalance_every.is_zero() && clock.monotonic() >= next_rebalance;
        if rebalance {
            next_rebalance = clock.monotonic() + rebalance_every;
        }
        if elect_all(&replicas, rebalance).await.is_err() {
            held_until = None;
            next_claim = clock.monotonic();
        }
    }
    let membership = replicas.membership();
    if let Err(e) = replicas
        .metastore()
        .release_controller(replicas.node_id(), membership.incarnation())
        .await
    {
        tracing::debug!(error = %e, "cannot give the controller lease up; it will run out");
    }
    Stopped::Shutdown
}

/// Takes or renews the controller lease. Returns until when this agent may act on it
/// (one renewal short of the lease, measured on this agent's monotonic clock from
/// before the claim was sent), or `None` if another agent holds it.
async fn claim(
    replicas: &ReplicaManager,
    lease: Duration,
    renew_every: Duration,
) -> Option<Duration> {
    let membership = replicas.membership();
    if !membership.holds_lease() {
        return None;
    }
    let clock = replicas.membership().clock();
    let sent = clock.monotonic();
    let now = clock.wall_ms();
    let claimed = replicas
        .metastore()
        .claim_controller(
            replicas.node_id(),
            membership.incarnation(),
            now,
            now + lease.as_millis() as i64,
        )
        .await;
    match claimed {
        Ok(holder) => {
            let ours = holder.node_id == replicas.node_id()
                && holder.incarnation == membership.incarnation();
            membership.set_controller(holder.node_id);
            ours.then(|| sent + lease - renew_every)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot claim or renew the controller lease");
            None
        }
    }
}

/// This agent is no longer the controller.
struct LostLease;

/// One pass over every partition.
async fn elect_all(replicas: &ReplicaManager, rebalance: bool) -> Result<(), LostLease> {
    let me = (
        replicas.node_id(),
        replicas.membership().incarnation().to_string(),
    );
    let live = replicas.membership().live_agents();
    for topic in replicas.topics() {
        let unclean = topic.config.unclean_leader_election();
        let min_insync = topic.config.min_insync_replicas();
        for p in &topic.record.partitions {
            let decide = move |cur: &strata_replication::PartitionRecord,
                               live: &strata_replication::LiveAgents| {
                strata_replication::elect(cur, live, unclean, min_insync)
                    .or_else(|| strata_replication::finish_reassignment(cur, live))
                    .or_else(|| {
                        rebalance
                            .then(|| strata_replication::prefer(cur, live))
                            .flatten()
                    })
                    .map(|next| strata_replication::settle_elr(cur, next, min_insync, live))
            };
            // This agent's view only says where to look; the transaction decides on
            // the metastore's.
            if decide(p, &live).is_none() {
                continue;
            }
            let seen_epoch = p.leader_epoch;
            let result = replicas
                .metastore()
                .update_partition_as_controller(
                    (me.0, &me.1),
                    replicas.membership().clock().wall_ms(),
                    &topic.record.name,
                    p.index,
                    move |cur, live| {
                        if cur.leader_epoch == seen_epoch {
                            decide(cur, live)
                        } else {
                            None
                        }
                    },
                )
                .await;
            match result {
                Ok(Some(r)) if r.leader_epoch > seen_epoch => {
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
                Err(strata_metastore::Error::NotController { holder, .. }) => {
                    tracing::info!(?holder, "no longer the controller");
                    return Err(LostLease);
                }
                Err(e) => {
                    tracing::warn!(topic = %topic.record.name, partition = p.index, error = %e, "election failed");
                }
            }
        }
    }
    Ok(())
}
