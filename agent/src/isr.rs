//! The leader's side of the ISR: every tick, each partition this agent leads says
//! whether its ISR should shrink or expand ([`strata_replication::LeaderState`]
//! decides), and the change goes to the metastore as a compare-and-set on the leader and
//! epoch.

use std::sync::Arc;
use std::time::Duration;

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
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = replicas.shutdown().cancelled() => return Stopped::Shutdown,
        }
        // Who is live is known only while this agent's own lease (and so its reads of
        // the others') is current.
        let membership = replicas.membership();
        let live = membership.holds_lease().then(|| membership.live_ids());
        for topic in replicas.topics() {
            for partition in topic.led_partitions() {
                if partition.is_offline() {
                    replicas.resign(&topic, partition).await;
                    continue;
                }
                if let Some((epoch, change)) =
                    partition.isr_tick(membership.clock().wall_ms(), lag_ms, live.as_deref())
                {
                    change_isr(&replicas, &topic.record.name, partition, epoch, change).await;
                }
            }
        }
    }
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
    let before = partition.gauges().leader.map_or(0, |l| l.isr);
    let result = replicas
        .metastore()
        .update_partition(topic, partition.index as u32, move |cur| {
            (cur.leader == me && cur.leader_epoch == epoch).then(|| {
                let mut next = cur.clone();
                // Never list a replica that a reassignment removed meanwhile.
                next.isr = wanted
                    .iter()
                    .copied()
                    .filter(|r| cur.replicas.contains(r))
                    .collect();
                next
            })
        })
        .await;
    match result {
        Ok(Some(r)) if r.leader == me && r.leader_epoch == epoch => {
            if r.isr == change.isr {
                tracing::info!(partition = %partition.name(), epoch, isr = ?r.isr, reason = change.reason, "ISR changed");
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
