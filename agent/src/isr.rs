//! The leader's side of the ISR: every tick, each partition this agent leads says
//! whether its ISR should shrink or expand ([`strata_replication::LeaderState`]
//! decides), and the change goes to the metastore as a compare-and-set on the leader and
//! epoch.
//!
//! Who may be in an ISR comes from the agent records (KIP-841's eligibility): a
//! follower whose agent left the cluster, or came back on another data directory than
//! the one the partition record names for it (its log is gone), leaves at once; only a
//! follower whose agent is live on its recorded directory, and is not being drained,
//! may join, and the metastore transaction checks that again on the agents as it reads
//! them. A follower whose agent restarted or left is forgotten: what it fetched before
//! says nothing of the log it has now.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strata_replication::Members;

use crate::partition::Partition;
use crate::replicas::ReplicaManager;
use crate::tasks::Stopped;

/// The leader's side of the ISR: every tick, each partition this agent leads says
/// whether its ISR should shrink or expand, and the change goes to the metastore as a
/// compare-and-set on the leader and epoch. A change stays pending (and the watermark
/// keeps counting an added replica) until the metastore has answered it: after an error
/// it is sent again, since it may have committed. A leader whose disk failed hands its
/// leadership over. Stops on shutdown.
pub async fn manage_isr(replicas: Arc<ReplicaManager>, replica_lag_time_max_ms: i64) -> Stopped {
    let lag_ms = replica_lag_time_max_ms.max(1);
    // Often enough that an agent whose lease ran out leaves every ISR within a quarter
    // of a second of it, and a lagging follower within a quarter of the lag limit.
    let every = Duration::from_millis((lag_ms as u64 / 4).clamp(50, 250));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The process incarnation of each agent as last seen live.
    let mut incarnations: BTreeMap<i32, String> = BTreeMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = replicas.shutdown().cancelled() => return Stopped::Shutdown,
        }
        // Who is live is known only while this agent's own lease (and so its reads of
        // the others') is current.
        let membership = replicas.membership();
        let agents = membership.holds_lease().then(|| membership.live_agents());
        let restarted = restarted_or_left(&mut incarnations, &membership.live());
        for topic in replicas.topics() {
            for partition in topic.led_partitions() {
                if partition.is_offline() {
                    replicas.resign(&topic, partition).await;
                    continue;
                }
                for &node in &restarted {
                    partition.forget_follower(node);
                }
                let Some(record) = topic.record.partitions.get(partition.index as usize) else {
                    continue;
                };
                let members = agents
                    .as_ref()
                    .map(|a| (a.holding(record), a.may_join(record)));
                let members = members
                    .as_ref()
                    .map(|(holding, may_join)| Members { holding, may_join });
                if let Some((epoch, change)) =
                    partition.isr_tick(membership.clock().wall_ms(), lag_ms, members)
                {
                    change_isr(&replicas, &topic.record.name, partition, epoch, change).await;
                }
            }
        }
    }
}

/// The agents whose process changed or which left since the last call (by the
/// incarnation in their records), remembering the live ones' for the next.
fn restarted_or_left(
    seen: &mut BTreeMap<i32, String>,
    live: &[strata_metastore::AgentRecord],
) -> Vec<i32> {
    let mut changed: Vec<i32> = seen
        .iter()
        .filter(|(id, inc)| {
            !live
                .iter()
                .any(|a| a.node_id == **id && a.incarnation == **inc)
        })
        .map(|(id, _)| *id)
        .collect();
    seen.clear();
    for a in live {
        seen.insert(a.node_id, a.incarnation.clone());
    }
    changed.dedup();
    changed
}

async fn change_isr(
    replicas: &ReplicaManager,
    topic: &str,
    partition: &Partition,
    epoch: i32,
    change: strata_replication::IsrChange,
) {
    let me = replicas.node_id();
    let wanted = change.isr.clone();
    let min_insync = replicas
        .topic(topic)
        .map_or(1, |t| t.config.min_insync_replicas());
    let before = partition.gauges().leader.map_or(0, |l| l.isr);
    let result = replicas
        .metastore()
        .update_partition_seeing_agents(
            replicas.membership().clock().wall_ms(),
            topic,
            partition.index as u32,
            move |cur, agents| {
                (cur.leader == me && cur.leader_epoch == epoch).then(|| {
                    let mut next = cur.clone();
                    // Never list a replica that a reassignment removed meanwhile, and
                    // add only replicas that may join as the metastore sees them now.
                    next.isr = wanted
                        .iter()
                        .copied()
                        .filter(|r| cur.replicas.contains(r))
                        .filter(|r| cur.isr.contains(r) || agents.may_join_isr(cur, *r))
                        .collect();
                    strata_replication::settle_elr(cur, next, min_insync, agents)
                })
            },
        )
        .await;
    match result {
        Ok(Some(r)) if r.leader == me && r.leader_epoch == epoch => {
            if r.isr == change.isr {
                tracing::info!(partition = %partition.name(), epoch, isr = ?r.isr, reason = change.reason, "ISR changed");
            } else {
                tracing::info!(partition = %partition.name(), epoch, isr = ?r.isr, wanted = ?change.isr, "ISR change partly refused: a replica may not join (its agent left, is drained, or is on another disk)");
            }
            crate::metrics::isr_changed(before, r.isr.len());
            partition.isr_result(epoch, Some(r.isr));
        }
        Ok(_) => {
            tracing::info!(partition = %partition.name(), epoch, "ISR change refused: leadership moved on");
            partition.isr_result(epoch, None);
        }
        Err(e) => {
            // It may have committed: keep it pending and send it again next tick.
            tracing::warn!(partition = %partition.name(), error = %e, "cannot change the ISR in the metastore; will retry");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(node_id: i32, incarnation: &str) -> strata_metastore::AgentRecord {
        strata_metastore::AgentRecord {
            node_id,
            host: String::new(),
            port: 0,
            http: String::new(),
            listeners: Vec::new(),
            rack: None,
            incarnation: incarnation.to_string(),
            data_dir_id: String::new(),
            lease_until_ms: 0,
        }
    }

    #[test]
    fn restarts_and_departures_are_noticed_once() {
        let mut seen = BTreeMap::new();
        assert!(restarted_or_left(&mut seen, &[agent(1, "a"), agent(2, "b")]).is_empty());
        assert!(restarted_or_left(&mut seen, &[agent(1, "a"), agent(2, "b")]).is_empty());
        assert_eq!(
            restarted_or_left(&mut seen, &[agent(1, "a"), agent(2, "b2")]),
            vec![2]
        );
        assert_eq!(restarted_or_left(&mut seen, &[agent(2, "b2")]), vec![1]);
        assert!(restarted_or_left(&mut seen, &[agent(2, "b2")]).is_empty());
        assert!(restarted_or_left(&mut seen, &[agent(1, "a3"), agent(2, "b2")]).is_empty());
    }
}
