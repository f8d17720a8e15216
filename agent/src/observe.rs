//! The state half of `/metrics`: at each scrape, the gauges are set from what the agent
//! holds (partition offsets and sizes, replica, consumer and tiering lag,
//! under-replicated and offline partitions, connections, free disk), then every series
//! is rendered. Events are recorded in `metrics.rs`.

use std::sync::Arc;

use metrics::gauge;

use crate::broker::Broker;
use crate::partition::Partition;

/// Sets the state gauges from what the agent holds now, then renders every series in
/// Prometheus's text format.
pub async fn render(broker: &Broker) -> String {
    let handle = crate::metrics::handle();
    observe(broker).await;
    handle.run_upkeep();
    handle.render()
}

async fn observe(broker: &Broker) {
    let now = crate::clock::now_ms();
    gauge!("strata_connections").set(crate::metrics::open_connections() as f64);
    if let Ok(stat) = rustix::fs::statvfs(&broker.settings().data_dir) {
        gauge!("strata_data_dir_free_bytes").set((stat.f_bavail * stat.f_frsize) as f64);
    }
    let membership = broker.membership();
    let controller = membership.controller_id() == broker.node_id();
    gauge!("strata_active_controller").set(if controller { 1.0 } else { 0.0 });
    let live = membership.live_ids();
    let tiering = broker.tiering();
    let (mut led, mut under_replicated, mut under_min_isr, mut offline) = (0, 0, 0, 0);
    let mut rebuilding = 0;
    let mut leaders = Vec::new();
    for topic in broker.replicas().topics() {
        let name = topic.record.name.as_str();
        if controller {
            offline += topic
                .record
                .partitions
                .iter()
                .filter(|p| p.leader < 0 || !live.contains(&p.leader))
                .count();
        }
        for partition in topic.local_partitions() {
            let g = partition.gauges();
            let labels = [
                ("topic", name.to_string()),
                ("partition", partition.index.to_string()),
            ];
            gauge!("strata_partition_log_start_offset", &labels).set(g.log_start_offset as f64);
            gauge!("strata_partition_log_end_offset", &labels).set(g.log_end_offset as f64);
            gauge!("strata_partition_high_watermark", &labels).set(g.high_watermark as f64);
            gauge!("strata_partition_size_bytes", &labels).set(g.size_bytes as f64);
            let Some(leader) = &g.leader else {
                gauge!("strata_partition_leader", &labels).set(0.0);
                let me = broker.node_id();
                if let Some(p) = topic.record.partitions.get(partition.index as usize)
                    && p.leader >= 0
                    && !p.isr.contains(&me)
                {
                    rebuilding += 1;
                }
                continue;
            };
            gauge!("strata_partition_leader", &labels).set(1.0);
            led += 1;
            if leader.isr < leader.replicas {
                under_replicated += 1;
            }
            if leader.isr < topic.config.min_insync_replicas() {
                under_min_isr += 1;
            }
            for (follower, lag) in &leader.follower_lag {
                let labels = [
                    ("topic", name.to_string()),
                    ("partition", partition.index.to_string()),
                    ("follower", follower.to_string()),
                ];
                gauge!("strata_replica_lag_records", &labels).set(*lag as f64);
            }
            if let Some(worker) = tiering {
                let archived_upto = worker.archived_upto(name, partition.index);
                let next = (archived_upto + 1).max(g.log_start_offset);
                let lag_records = (g.log_end_offset - next).max(0);
                let lag_seconds = if lag_records > 0 {
                    partition
                        .batch_timestamp(next)
                        .map_or(0.0, |ts| (now - ts).max(0) as f64 / 1000.0)
                } else {
                    0.0
                };
                gauge!("strata_tiering_lag_records", &labels).set(lag_records as f64);
                gauge!("strata_tiering_lag_bytes", &labels)
                    .set(partition.segments_from(next).0 as f64);
                gauge!("strata_tiering_lag_seconds", &labels).set(lag_seconds);
            }
            leaders.push((name.to_string(), partition.clone(), g.high_watermark));
        }
    }
    let (mut in_flight, mut pending, mut draining) = (0, 0, 0);
    if controller {
        let plan = crate::controller::current_plan(
            broker.replicas(),
            &broker.settings().healing(),
            &mut Default::default(),
        );
        in_flight = plan.in_flight;
        pending = plan.pending.len();
        let roster = membership.roster();
        draining = roster.live(now).filter(|a| roster.is_draining(a)).count();
    }
    gauge!("strata_replica_moves_in_flight").set(in_flight as f64);
    gauge!("strata_replica_replacements_pending").set(pending as f64);
    gauge!("strata_agents_draining").set(draining as f64);
    gauge!("strata_replicas_rebuilding").set(rebuilding as f64);
    gauge!("strata_leader_partitions").set(led as f64);
    gauge!("strata_under_replicated_partitions").set(under_replicated as f64);
    gauge!("strata_under_min_isr_partitions").set(under_min_isr as f64);
    gauge!("strata_offline_partitions").set(offline as f64);
    if !leaders.is_empty() {
        observe_consumer_lag(broker, &leaders, now).await;
    }
}

/// Consumer lag of every group with a committed offset on a partition led here: the
/// leader holds the high watermark, and the committed offsets are in the metastore, so
/// each (group, partition) series comes from exactly one agent.
async fn observe_consumer_lag(
    broker: &Broker,
    leaders: &[(String, Arc<Partition>, i64)],
    now: i64,
) {
    let metastore = broker.metastore();
    let Ok(groups) = metastore.groups().await else {
        return;
    };
    for (group, _) in groups {
        let Ok(offsets) = metastore.group_offsets(&group).await else {
            continue;
        };
        for ((topic, index), committed) in &offsets {
            let Some((_, partition, hw)) = leaders
                .iter()
                .find(|(t, p, _)| t == topic && p.index == *index)
            else {
                continue;
            };
            if committed.offset < 0 {
                continue;
            }
            let lag = (hw - committed.offset).max(0);
            let seconds = if lag > 0 {
                partition
                    .batch_timestamp(committed.offset)
                    .map_or(0.0, |ts| (now - ts).max(0) as f64 / 1000.0)
            } else {
                0.0
            };
            let labels = [
                ("group", group.clone()),
                ("topic", topic.clone()),
                ("partition", index.to_string()),
            ];
            gauge!("strata_consumer_group_lag_records", &labels).set(lag as f64);
            gauge!("strata_consumer_group_lag_seconds", &labels).set(seconds);
        }
    }
}
