//! Leader elections and placement, run by the one agent that holds the controller lease
//! in the metastore ([`strata_metastore::controller`]). The controller looks at every
//! partition whose leader is not live (its lease ran out, or it left) or no longer holds
//! its log and elects a new one with [`strata_replication::elect`], completes
//! reassignments whose new replicas are in sync
//! ([`strata_replication::finish_reassignment`]), moves leaderships off agents being
//! drained, and now and then hands leadership back to preferred replicas with
//! [`strata_replication::prefer`]. Every few seconds it also heals and balances the
//! cluster ([`strata_replication::placement::plan`]): replicas of agents gone longer than
//! `replica_replacement_delay_ms`, or being drained, are replaced on live agents, and
//! replicas and preferred leaderships are spread over the agents, through the
//! reassignment machinery, at most `replica_moves_max` at once.
//!
//! Each decision is one metastore transaction that checks the controller lease is still
//! this agent's, reads the live agents, re-reads the partition and applies the rule only
//! if the leader epoch is still the one the decision was made on, and bumps the epoch.
//! So an agent that lost the lease (paused, cut off) cannot elect anything, two agents
//! can never both act as controller, and no election is made on a stale list of live
//! agents: the metastore, not the controller, is the authority.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strata_metastore::Roster;
use strata_replication::placement::{self, Placed, PlacedAgent, Plan};

pub use crate::config::Healing;

use crate::replicas::ReplicaManager;
use crate::tasks::Stopped;

/// How often the controller looks for partitions without a live leader. An expired lease
/// is noticed at the next membership refresh (a fifth of the lease) plus this.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// How often the controller plans replacements and balancing.
const PLAN_EVERY: Duration = Duration::from_secs(1);

/// Claims (and renews) the controller lease, and runs elections and placement while this
/// agent holds it. Gives the lease up on shutdown.
pub async fn run(
    replicas: Arc<ReplicaManager>,
    lease: Duration,
    rebalance_every: Duration,
    healing: Healing,
) -> Stopped {
    let renew_every = lease / 5;
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let clock = Arc::clone(replicas.membership().clock());
    let mut next_rebalance = clock.monotonic() + rebalance_every;
    let mut next_claim = clock.monotonic();
    let mut next_plan = clock.monotonic() + PLAN_EVERY;
    let mut held_until: Option<Duration> = None;
    // Node ids that partitions name but no agent record does: when first noticed.
    let mut unseen: BTreeMap<i32, i64> = BTreeMap::new();
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
        let mut lost = elect_all(&replicas, rebalance).await.is_err();
        if !lost && clock.monotonic() >= next_plan {
            next_plan = clock.monotonic() + PLAN_EVERY;
            lost = heal(&replicas, &healing, &mut unseen).await.is_err();
        }
        if lost {
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
                        // A leader being drained hands over to a replica that is not.
                        live.is_draining(cur.leader)
                            .then(|| strata_replication::move_leadership(cur, cur.leader, live))
                            .flatten()
                            .filter(|next| !live.is_draining(next.leader))
                    })
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

/// The agents as placement sees them, from the metastore's roster at `now_ms`; node ids
/// that the partitions name but no record does are gone since they were first noticed
/// (`unseen`, kept by the caller).
pub fn placed_agents_of(
    roster: &Roster,
    partitions: &[Placed<'_>],
    now_ms: i64,
    unseen: &mut BTreeMap<i32, i64>,
) -> BTreeMap<i32, PlacedAgent> {
    let mut agents: BTreeMap<i32, PlacedAgent> = roster
        .agents
        .iter()
        .map(|a| {
            let live = a.lease_until_ms > now_ms;
            (
                a.node_id,
                PlacedAgent {
                    rack: a.rack.clone(),
                    live,
                    draining: roster.is_draining(a),
                    gone_since_ms: (!live).then_some(a.lease_until_ms),
                },
            )
        })
        .collect();
    let named: std::collections::BTreeSet<i32> = partitions
        .iter()
        .flat_map(|p| p.record.replicas.iter().copied())
        .collect();
    unseen.retain(|n, _| named.contains(n) && !agents.contains_key(n));
    for n in named {
        if let std::collections::btree_map::Entry::Vacant(e) = agents.entry(n) {
            let since = *unseen.entry(n).or_insert(now_ms);
            e.insert(PlacedAgent {
                rack: None,
                live: false,
                draining: false,
                gone_since_ms: Some(since),
            });
        }
    }
    agents
}

/// How long the record of an agent gone for good (no partition names it) is kept: a
/// day, or ten replacement delays if that is longer.
fn forget_after(healing: &Healing) -> i64 {
    (healing.replacement_delay.as_millis() as i64 * 10).max(24 * 3600 * 1000)
}

/// Forgets the records (and drains) of agents gone for longer than [`forget_after`]
/// that no partition names: with agents replaced under new node ids, they would pile
/// up in every roster read.
async fn forget_departed(replicas: &ReplicaManager, healing: &Healing) {
    let now = replicas.membership().clock().wall_ms();
    let before = now - forget_after(healing);
    let roster = replicas.membership().roster();
    let named: std::collections::BTreeSet<i32> = replicas
        .topics()
        .iter()
        .flat_map(|t| t.record.partitions.iter())
        .flat_map(|p| p.replicas.iter().copied())
        .collect();
    for a in roster.agents.iter().filter(|a| a.lease_until_ms < before) {
        if named.contains(&a.node_id) {
            continue;
        }
        let metastore = replicas.metastore();
        let forgotten = async {
            metastore.forget_agent(a.node_id, before).await?;
            metastore.stop_drain(a.node_id).await
        };
        match forgotten.await {
            Ok(_) => tracing::info!(node_id = a.node_id, "forgot an agent gone for good"),
            Err(e) => {
                tracing::warn!(node_id = a.node_id, error = %e, "cannot forget a departed agent")
            }
        }
    }
}

/// What placement would do now, as this agent sees the cluster (the controller's plan,
/// or a view of it for `GET /v1/agents`).
pub fn current_plan(
    replicas: &ReplicaManager,
    healing: &Healing,
    unseen: &mut BTreeMap<i32, i64>,
) -> Plan {
    let now = replicas.membership().clock().wall_ms();
    let topics = replicas.topics();
    let placed: Vec<Placed> = topics
        .iter()
        .flat_map(|t| {
            t.record.partitions.iter().map(|p| Placed {
                topic: &t.record.name,
                record: p,
            })
        })
        .collect();
    let agents = placed_agents_of(&replicas.membership().roster(), &placed, now, unseen);
    placement::plan(&placed, &agents, &healing.policy(), now)
}

/// One pass of self-healing and balancing: plans, then starts each move as a
/// reassignment, in a transaction that checks the controller lease and that the
/// partition is still as planned on.
async fn heal(
    replicas: &ReplicaManager,
    healing: &Healing,
    unseen: &mut BTreeMap<i32, i64>,
) -> Result<(), LostLease> {
    forget_departed(replicas, healing).await;
    let plan = current_plan(replicas, healing, unseen);
    let me = (
        replicas.node_id(),
        replicas.membership().incarnation().to_string(),
    );
    for m in plan.moves {
        let (before, target) = (m.replicas.clone(), m.target.clone());
        let result = replicas
            .metastore()
            .update_partition_as_controller(
                (me.0, &me.1),
                replicas.membership().clock().wall_ms(),
                &m.topic,
                m.index,
                move |cur, _| {
                    (cur.replicas == before && cur.adding.is_empty() && cur.removing.is_empty())
                        .then(|| strata_replication::reassign(cur, &target).ok())
                        .flatten()
                },
            )
            .await;
        match result {
            Ok(Some(r)) if r.replicas.starts_with(&m.target) => {
                crate::metrics::replica_move_started(match m.why {
                    placement::Why::Replace { .. } => "replace",
                    placement::Why::Drain { .. } => "drain",
                    placement::Why::Balance { .. } => "balance",
                    placement::Why::Lead { .. } => "lead",
                });
                tracing::info!(
                    topic = %m.topic,
                    partition = m.index,
                    from = ?m.replicas,
                    to = ?m.target,
                    why = ?m.why,
                    "moving replicas"
                );
            }
            Ok(_) => {}
            Err(strata_metastore::Error::NotController { holder, .. }) => {
                tracing::info!(?holder, "no longer the controller");
                return Err(LostLease);
            }
            Err(e) => {
                tracing::warn!(topic = %m.topic, partition = m.index, error = %e, "cannot start a replica move");
            }
        }
    }
    Ok(())
}
