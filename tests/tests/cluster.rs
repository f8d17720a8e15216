//! Cluster behaviour at the protocol level, on the in-process cluster harness
//! (`strata_tests::cluster`): three agents on one metastore, a partition replicated to
//! all three with `min.insync.replicas=2`, and one agent stopped, killed, isolated or
//! paused at a time. Every acknowledged write must survive, and an agent cut off from
//! the cluster must not acknowledge any.
// These tests drive real agents over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    DeleteRecordsRequest, FetchRequest, ListOffsetsRequest, MetadataRequest, metadata_request,
};
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use strata_tests::cluster::{Cluster, eventually};
use strata_tests::{Client, batch, create, name, produce};

const TOPIC: &str = "replicated";
/// Long enough for a lease to run out (2 s) and the controller to act, with room for a
/// slow machine.
const WITHIN: Duration = Duration::from_secs(30);

async fn three_agents() -> Cluster {
    three_agents_with(&[]).await
}

async fn three_agents_with(configs: &[(&str, &str)]) -> Cluster {
    let cluster = Cluster::start(3, |s| {
        s.topic_defaults.replication_factor = 3;
        s.topic_defaults
            .configs
            .insert("min.insync.replicas".into(), "2".into());
    })
    .await
    .expect("cluster starts");
    let mut client = cluster.client(1).await.expect("connect");
    assert_eq!(create(&mut client, TOPIC, 1, configs).await, 0);
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
    read_from(cluster, leader, 0).await
}

/// A consumer's fetch of partition 0 at `offset`, answered at once.
fn fetch_request(offset: i64) -> FetchRequest {
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
    request
}

/// One fetch at `offset`: the error code and the log start it answers.
async fn fetch_at(client: &mut Client, offset: i64) -> (i16, i64) {
    let r = client
        .send(12, &fetch_request(offset))
        .await
        .expect("fetch");
    let data = &r.responses[0].partitions[0];
    (data.error_code, data.log_start_offset)
}

/// ListOffsets(earliest): the error code and the offset.
async fn earliest(client: &mut Client) -> (i16, i64) {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = -2;
    let mut t = ListOffsetsTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![p];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = kafka_protocol::messages::BrokerId(-1);
    request.topics = vec![t];
    let r = client.send(7, &request).await.expect("list offsets");
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// Every value from `offset` up to the high watermark, read from the leader.
async fn read_from(cluster: &Cluster, leader: i32, from: i64) -> Vec<String> {
    let mut client = cluster.client(leader).await.expect("connect");
    let mut values = Vec::new();
    let mut offset = from;
    loop {
        let r = client
            .send(12, &fetch_request(offset))
            .await
            .expect("fetch");
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

/// DeleteRecords moves the log start in the metastore: the followers apply it to their
/// own logs (their segments below it go), and after the leader is killed the new one
/// answers the same start, refuses fetches below it, and serves everything above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_start_holds_across_replicas_and_a_leader_change() {
    let mut cluster = three_agents_with(&[("segment.bytes", "1024")]).await;
    let before = partition(&cluster, 1)
        .await
        .expect("metadata")
        .expect("led");
    let written = values("kept-or-not", 60);
    produce_all(&cluster, before.leader, &written).await;

    let mut client = cluster.client(before.leader).await.expect("connect");
    let mut t = DeleteRecordsTopic::default();
    t.name = name(TOPIC);
    let mut p = DeleteRecordsPartition::default();
    p.partition_index = 0;
    p.offset = 45;
    t.partitions = vec![p];
    let mut request = DeleteRecordsRequest::default();
    request.topics = vec![t];
    request.timeout_ms = 10_000;
    let r = client.send(2, &request).await.expect("delete records");
    let answer = &r.topics[0].partitions[0];
    assert_eq!((answer.error_code, answer.low_watermark), (0, 45));

    // Every follower moves its own log start (and deletes what lies below it).
    for id in cluster.ids().into_iter().filter(|&id| id != before.leader) {
        eventually(WITHIN, "a follower at the new log start", || async {
            let agent = cluster.agent(id);
            let topic = agent.broker.replicas().topic(TOPIC);
            let replica = topic.as_ref().and_then(|t| t.replica(0).cloned());
            Ok(replica.filter(|r| r.log_start_offset() == 45))
        })
        .await
        .expect("the follower applies the log start");
    }

    cluster.kill(before.leader).await;
    let via = other(&cluster, before.leader, before.leader);
    let after = new_leader(&cluster, via, before.leader, before.epoch).await;
    let start = eventually(WITHIN, "the new leader answers offsets", || async {
        let mut client = cluster.client(after.leader).await?;
        let (code, offset) = earliest(&mut client).await;
        // OFFSET_NOT_AVAILABLE until its watermark reaches its epoch's start (KIP-207).
        Ok((code == 0).then_some(offset))
    })
    .await
    .expect("earliest");
    assert_eq!(start, 45);
    let mut client = cluster.client(after.leader).await.expect("connect");
    let (code, log_start) = fetch_at(&mut client, 10).await;
    assert_eq!(
        (code, log_start),
        (1, 45),
        "OFFSET_OUT_OF_RANGE below the start"
    );
    assert_eq!(read_from(&cluster, after.leader, 45).await, written[45..]);
    cluster.shutdown().await;
}

/// While an agent opens the replicas of a topic new to it (seconds, for hundreds of
/// partitions: each new replica is recorded in the metastore), the other agents already
/// name it as a leader. It lists the topic from then on and answers its partitions
/// NOT_LEADER_OR_FOLLOWER, which every client retries, never UNKNOWN_TOPIC_OR_PARTITION:
/// librdkafka's consumer reports that one to the application ("Subscribed topic not
/// available") and takes it as permanent when it looks up offsets. Agent 2 is watched
/// from before the topic is created, so the window is seen whatever its length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_opening_a_new_topic_answers_not_leader_and_not_unknown() {
    const NEW: &str = "arriving";
    const PARTITIONS: i32 = 400;
    let cluster = Cluster::start(2, |s| s.topic_defaults.replication_factor = 2)
        .await
        .expect("cluster starts");
    let mut watcher = cluster.client(2).await.expect("connect");
    let mut creator = cluster.client(1).await.expect("connect");
    let created = tokio::spawn(async move { create(&mut creator, NEW, PARTITIONS, &[]).await });
    let (mut listed, mut not_leader) = (false, 0);
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "agent 2 did not serve its partitions within {WITHIN:?}"
        );
        let mut t = metadata_request::MetadataRequestTopic::default();
        t.name = Some(name(NEW));
        let mut request = MetadataRequest::default();
        request.topics = Some(vec![t]);
        // As a consumer asks (with auto-creation the agent would wait for the topic).
        request.allow_auto_topic_creation = false;
        let described = watcher
            .send(12, &request)
            .await
            .expect("metadata")
            .topics
            .remove(0);
        if described.error_code == 3 {
            assert!(!listed, "agent 2 listed the topic, then said it is unknown");
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        assert_eq!(described.error_code, 0, "metadata of the new topic");
        listed = true;
        let mut topic = ListOffsetsTopic::default();
        topic.name = name(NEW);
        topic.partitions = described
            .partitions
            .iter()
            .filter(|p| p.leader_id.0 == 2)
            .map(|p| {
                let mut asked = ListOffsetsPartition::default();
                asked.partition_index = p.partition_index;
                asked.timestamp = -1;
                asked
            })
            .collect();
        assert!(
            !topic.partitions.is_empty(),
            "agent 2 leads some partitions"
        );
        let mut request = ListOffsetsRequest::default();
        request.replica_id = kafka_protocol::messages::BrokerId(-1);
        request.topics = vec![topic];
        let answered = watcher.send(7, &request).await.expect("list offsets");
        let codes: Vec<i16> = answered.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert!(
            codes.iter().all(|&c| c == 0 || c == 6),
            "a listed topic's partitions answer offsets or NOT_LEADER_OR_FOLLOWER: {codes:?}"
        );
        not_leader += codes.iter().filter(|&&c| c == 6).count();
        if codes.iter().all(|&c| c == 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(created.await.expect("create"), 0);
    assert!(
        not_leader > 0,
        "agent 2 was seen listing the topic while it opened its replicas"
    );
    cluster.shutdown().await;
}
