//! Cluster behaviour at the protocol level, on the in-process cluster harness
//! (`strata_tests::cluster`): three agents on one metastore, a partition replicated to
//! all three with `min.insync.replicas=2`, and one agent stopped, killed, isolated or
//! paused at a time. Every acknowledged write must survive, and an agent cut off from
//! the cluster must not acknowledge any.
// These tests drive real agents over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, MetadataRequest, metadata_request};
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use strata_tests::cluster::{Cluster, eventually};
use strata_tests::{Client, batch, create, name, produce};

const TOPIC: &str = "replicated";
/// Long enough for a lease to run out (2 s) and the controller to act, with room for a
/// slow machine.
const WITHIN: Duration = Duration::from_secs(30);

async fn three_agents() -> Cluster {
    let cluster = Cluster::start(3, |s| {
        s.topic_defaults.replication_factor = 3;
        s.topic_defaults
            .configs
            .insert("min.insync.replicas".into(), "2".into());
    })
    .await
    .expect("cluster starts");
    let mut client = cluster.client(1).await.expect("connect");
    assert_eq!(create(&mut client, TOPIC, 1, &[]).await, 0);
    all_in_sync(&cluster, 1).await;
    cluster
}

/// Waits until agent `via` reports all three replicas in sync.
async fn all_in_sync(cluster: &Cluster, via: i32) {
    eventually(WITHIN, "every replica in sync", || async {
        Ok(partition(cluster, via).await?.filter(|p| p.isr.len() == 3))
    })
    .await
    .expect("every replica in sync");
}

/// The partition as agent `via` describes it (through its proxy).
#[derive(Debug, Clone)]
struct Described {
    leader: i32,
    epoch: i32,
    isr: Vec<i32>,
}

async fn partition(cluster: &Cluster, via: i32) -> anyhow::Result<Option<Described>> {
    let mut client = cluster.client(via).await?;
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(name(TOPIC));
    let mut request = MetadataRequest::default();
    request.topics = Some(vec![t]);
    let r = client.send(12, &request).await?;
    let Some(p) = r.topics.first().and_then(|t| t.partitions.first()) else {
        return Ok(None);
    };
    let mut isr: Vec<i32> = p.isr_nodes.iter().map(|n| n.0).collect();
    isr.sort_unstable();
    Ok(
        (p.error_code == 0 && p.leader_id.0 >= 0).then_some(Described {
            leader: p.leader_id.0,
            epoch: p.leader_epoch,
            isr,
        }),
    )
}

/// A leader other than `old`, in a newer epoch than `epoch`, as agent `via` sees it.
async fn new_leader(cluster: &Cluster, via: i32, old: i32, epoch: i32) -> Described {
    eventually(WITHIN, "a new leader", || async {
        Ok(partition(cluster, via)
            .await?
            .filter(|p| p.leader != old && p.epoch > epoch))
    })
    .await
    .expect("a new leader")
}

/// Produces `value` with acks=all; the error code and the offset.
async fn produce_value(client: &mut Client, value: &str, timeout_ms: i32) -> (i16, i64) {
    let records = batch(&[(None, Some(value.as_bytes()), &[])], 0, Compression::None);
    let mut request = produce(TOPIC, 0, records, -1);
    request.timeout_ms = timeout_ms;
    match client.send(9, &request).await {
        Ok(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        // The connection broke (the agent went away): not acknowledged.
        Err(_) => (-1, -1),
    }
}

/// NOT_LEADER_OR_FOLLOWER and NOT_ENOUGH_REPLICAS: refused before anything was
/// appended (a follower's lease or lag on this loaded machine), so a retry cannot
/// write the value twice.
const REFUSED_BEFORE_APPEND: [i16; 2] = [6, 19];

/// Produces `values` to the leader; every one must be acknowledged, retried (as a
/// client would) only after a refusal that appended nothing.
async fn produce_all(cluster: &Cluster, leader: i32, values: &[String]) {
    let mut client = cluster.client(leader).await.expect("connect");
    for v in values {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            match produce_value(&mut client, v, 10_000).await {
                (0, _) => break,
                (code, _)
                    if REFUSED_BEFORE_APPEND.contains(&code)
                        && tokio::time::Instant::now() < deadline =>
                {
                    // A client's retry.backoff.ms.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                (code, _) => panic!("{v} to leader {leader}: error {code}"),
            }
        }
    }
}

/// Every value below the high watermark, read from the leader.
async fn read_all(cluster: &Cluster, leader: i32) -> Vec<String> {
    let mut client = cluster.client(leader).await.expect("connect");
    let mut values = Vec::new();
    let mut offset = 0;
    loop {
        let mut p = FetchPartition::default();
        p.partition = 0;
        p.fetch_offset = offset;
        p.partition_max_bytes = 1024 * 1024;
        let mut t = FetchTopic::default();
        t.topic = name(TOPIC);
        t.partitions = vec![p];
        let mut request = FetchRequest::default();
        request.replica_id = kafka_protocol::messages::BrokerId(-1);
        request.max_wait_ms = 0;
        request.max_bytes = 1024 * 1024;
        request.topics = vec![t];
        let r = client.send(12, &request).await.expect("fetch");
        let data = &r.responses[0].partitions[0];
        assert_eq!(data.error_code, 0, "fetch from {leader} at {offset}");
        let mut records: Bytes = data.records.clone().unwrap_or_default();
        if records.is_empty() {
            assert!(
                offset >= data.high_watermark,
                "nothing read below the watermark"
            );
            return values;
        }
        for record in RecordBatchDecoder::decode(&mut records)
            .expect("decodes")
            .records
        {
            let value = record.value.expect("a value");
            values.push(String::from_utf8(value.to_vec()).expect("utf-8"));
            offset = record.offset + 1;
        }
    }
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// A bystander: an agent that is neither `a` nor `b`.
fn other(cluster: &Cluster, a: i32, b: i32) -> i32 {
    cluster
        .ids()
        .into_iter()
        .find(|id| *id != a && *id != b)
        .expect("three agents")
}

/// Stopped cleanly or killed, the leader's acknowledged writes are on the new leader,
/// which takes writes at once; back, the old leader catches up into the ISR.
async fn leader_goes_away(kill: bool) {
    let mut cluster = three_agents().await;
    let before = partition(&cluster, 1)
        .await
        .expect("metadata")
        .expect("led");
    let first = values("before", 20);
    produce_all(&cluster, before.leader, &first).await;
    if kill {
        cluster.kill(before.leader).await;
    } else {
        cluster.stop(before.leader).await;
    }
    let via = other(&cluster, before.leader, before.leader);
    let after = new_leader(&cluster, via, before.leader, before.epoch).await;
    let second = values("after", 20);
    produce_all(&cluster, after.leader, &second).await;
    let read = read_all(&cluster, after.leader).await;
    assert_eq!(
        read,
        [first, second].concat(),
        "every acknowledged write, in order"
    );
    cluster.restart(before.leader).await.expect("restarts");
    all_in_sync(&cluster, after.leader).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_hands_over_without_losing_acknowledged_writes() {
    leader_goes_away(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_without_losing_acknowledged_writes() {
    leader_goes_away(true).await;
}

/// An isolated leader acknowledges nothing more (its lease runs out and its followers
/// stop fetching), while the others elect a new one that does; healed, the old leader
/// follows, cuts what it alone had, and rejoins the ISR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_is_replaced_and_acknowledges_nothing() {
    let cluster = three_agents().await;
    let before = partition(&cluster, 1)
        .await
        .expect("metadata")
        .expect("led");
    let first = values("before", 10);
    produce_all(&cluster, before.leader, &first).await;
    cluster.isolate(before.leader);
    // Straight to the isolated agent, past the network: it must not acknowledge.
    let mut direct = cluster.direct_client(before.leader).await.expect("connect");
    let (code, offset) = produce_value(&mut direct, "isolated", 3_000).await;
    assert_ne!(code, 0, "acknowledged at {offset} while isolated");
    let via = other(&cluster, before.leader, before.leader);
    let after = new_leader(&cluster, via, before.leader, before.epoch).await;
    let second = values("after", 10);
    produce_all(&cluster, after.leader, &second).await;
    cluster.heal(before.leader);
    all_in_sync(&cluster, after.leader).await;
    let read = read_all(&cluster, after.leader).await;
    assert_eq!(
        read,
        [first, second].concat(),
        "acknowledged writes only, in order"
    );
    cluster.shutdown().await;
}

/// A paused follower leaves the ISR (writes go on with the two left) and comes back
/// once resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_follower_leaves_the_isr_and_comes_back() {
    let cluster = three_agents().await;
    let p = partition(&cluster, 1)
        .await
        .expect("metadata")
        .expect("led");
    let follower = other(&cluster, p.leader, p.leader);
    cluster.pause(follower);
    eventually(WITHIN, "the paused follower out of the ISR", || async {
        Ok(partition(&cluster, p.leader)
            .await?
            .filter(|d| !d.isr.contains(&follower) && d.isr.len() == 2))
    })
    .await
    .expect("out of the ISR");
    let written = values("two-in-sync", 10);
    produce_all(&cluster, p.leader, &written).await;
    cluster.resume(follower);
    all_in_sync(&cluster, p.leader).await;
    assert_eq!(read_all(&cluster, p.leader).await, written);
    cluster.shutdown().await;
}
