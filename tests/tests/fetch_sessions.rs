//! Incremental fetch sessions (KIP-227) and topics named by id (KIP-516, Fetch v13+ and
//! Produce v13), at the protocol level: what a session remembers, what an incremental
//! answer leaves out, and every refusal. Real clients use the same paths in the Java
//! (`FetchSessionsTest`) and Go suites.
// These tests drive a real agent over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{
    BrokerId, DeleteTopicsRequest, FetchRequest, FetchResponse, ProduceRequest,
};
use strata_tests::{Client, TestAgent, create, name, produce, simple_batch, topic_id};
use uuid::Uuid;

const V_NAMES: i16 = 12;
const V_IDS: i16 = 17;

fn partition(index: i32, offset: i64) -> FetchPartition {
    let mut p = FetchPartition::default();
    p.partition = index;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    p
}

/// A topic of a fetch request, by name and id (each version encodes the one it has).
fn topic(topic: &str, id: Uuid, partitions: Vec<FetchPartition>) -> FetchTopic {
    let mut t = FetchTopic::default();
    t.topic = name(topic);
    t.topic_id = id;
    t.partitions = partitions;
    t
}

fn request(session_id: i32, epoch: i32, topics: Vec<FetchTopic>) -> FetchRequest {
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(-1);
    r.max_wait_ms = 0;
    r.min_bytes = 0;
    r.max_bytes = 1 << 24;
    r.session_id = session_id;
    r.session_epoch = epoch;
    r.topics = topics;
    r
}

/// (partition, has records) for each partition answered, in order.
fn answered(r: &FetchResponse) -> Vec<(i32, bool)> {
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
            let records = p.records.as_ref().is_some_and(|b| !b.is_empty());
            (p.partition_index, records)
        })
        .collect()
}

async fn append(c: &mut Client, topic: &str, partition: i32, records: Bytes) {
    let r = c
        .send(9, &produce(topic, partition, records, -1))
        .await
        .expect("produce");
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}

async fn fetch(c: &mut Client, version: i16, req: &FetchRequest) -> FetchResponse {
    c.send(version, req).await.expect("fetch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_fetch_answers_only_what_changed_and_long_polls_the_whole_session() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "s", 3, &[]).await, 0);
    append(&mut c, "s", 0, simple_batch(1, 1_000)).await;
    append(&mut c, "s", 1, simple_batch(1, 1_000)).await;

    // A full fetch with epoch 0 opens a session and answers every partition.
    let all = (0..3).map(|p| partition(p, 0)).collect();
    let full = request(0, 0, vec![topic("s", Uuid::nil(), all)]);
    let r = fetch(&mut c, V_NAMES, &full).await;
    assert_eq!(r.error_code, 0);
    let id = r.session_id;
    assert!(id > 0, "a session is opened");
    assert_eq!(answered(&r), vec![(0, true), (1, true), (2, false)]);

    // The consumer moves past what it read; nothing else changed, so nothing is
    // answered (a partition left out of the answer has nothing new).
    let moved = vec![topic(
        "s",
        Uuid::nil(),
        vec![partition(0, 1), partition(1, 1)],
    )];
    let r = fetch(&mut c, V_NAMES, &request(id, 1, moved)).await;
    assert_eq!((r.error_code, r.session_id), (0, id));
    assert_eq!(answered(&r), vec![]);

    // An incremental fetch naming no partition waits on the whole session: an append
    // to partition 2 wakes it, and only partition 2 is answered.
    let mut waiting = request(id, 2, vec![]);
    waiting.max_wait_ms = 20_000;
    waiting.min_bytes = 1;
    let addr = agent.kafka_addr();
    let parked = tokio::spawn(async move {
        let mut f = Client::connect(addr).await.expect("connect");
        fetch(&mut f, V_NAMES, &waiting).await
    });
    let started = std::time::Instant::now();
    append(&mut c, "s", 2, simple_batch(2, 1_000)).await;
    let r = parked.await.expect("join");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert_eq!(answered(&r), vec![(2, true)]);
    let p2 = &r.responses[0].partitions[0];
    assert_eq!(p2.high_watermark, 2);

    // A forgotten partition is no longer read or answered.
    let mut forget = request(id, 3, vec![topic("s", Uuid::nil(), vec![partition(2, 2)])]);
    let r = fetch(&mut c, V_NAMES, &forget).await;
    assert_eq!(answered(&r), vec![]);
    let mut f = ForgottenTopic::default();
    f.topic = name("s");
    f.partitions = vec![2];
    forget = request(id, 4, vec![]);
    forget.forgotten_topics_data = vec![f];
    append(&mut c, "s", 2, simple_batch(1, 1_000)).await;
    let r = fetch(&mut c, V_NAMES, &forget).await;
    assert_eq!(answered(&r), vec![]);
    append(&mut c, "s", 0, simple_batch(1, 1_000)).await;
    let r = fetch(&mut c, V_NAMES, &request(id, 5, vec![])).await;
    assert_eq!(
        answered(&r),
        vec![(0, true)],
        "partition 0 is still in the session"
    );

    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_refuse_wrong_epochs_unknown_ids_and_closed_sessions() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "r", 1, &[]).await, 0);
    let open = request(0, 0, vec![topic("r", Uuid::nil(), vec![partition(0, 0)])]);
    let id = fetch(&mut c, V_NAMES, &open).await.session_id;
    assert!(id > 0);

    let code = |r: FetchResponse| r.error_code;
    let epoch = ResponseError::InvalidFetchSessionEpoch.code();
    let not_found = ResponseError::FetchSessionIdNotFound.code();
    assert_eq!(
        code(fetch(&mut c, V_NAMES, &request(id, 2, vec![])).await),
        epoch
    );
    assert_eq!(
        code(fetch(&mut c, V_NAMES, &request(id, 1, vec![])).await),
        0
    );
    assert_eq!(
        code(fetch(&mut c, V_NAMES, &request(id, 1, vec![])).await),
        epoch
    );
    assert_eq!(
        code(fetch(&mut c, V_NAMES, &request(id ^ 1, 1, vec![])).await),
        not_found
    );
    // A session opened by name is not used by id.
    let by_id = fetch(&mut c, V_IDS, &request(id, 2, vec![])).await;
    assert_eq!(
        by_id.error_code,
        ResponseError::FetchSessionTopicIdError.code()
    );

    // Epoch -1 closes the session it names and answers without one.
    let id = fetch(&mut c, V_NAMES, &open).await.session_id;
    let mut close = open.clone();
    close.session_id = id;
    close.session_epoch = -1;
    let r = fetch(&mut c, V_NAMES, &close).await;
    assert_eq!((r.error_code, r.session_id), (0, 0));
    assert_eq!(answered(&r), vec![(0, false)]);
    assert_eq!(
        code(fetch(&mut c, V_NAMES, &request(id, 1, vec![])).await),
        not_found
    );

    agent.stop().await;

    // With no slots there are no sessions: a full fetch is answered with session id 0.
    let agent = TestAgent::start_with(|s| s.max_incremental_fetch_session_cache_slots = 0)
        .await
        .expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "r", 1, &[]).await, 0);
    let r = fetch(&mut c, V_NAMES, &open).await;
    assert_eq!((r.error_code, r.session_id), (0, 0));
    assert_eq!(answered(&r), vec![(0, false)]);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_returned_records_goes_to_the_back_of_the_session() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "q", 2, &[]).await, 0);
    append(&mut c, "q", 0, simple_batch(1, 1_000)).await;
    append(&mut c, "q", 0, simple_batch(1, 1_000)).await;
    append(&mut c, "q", 1, simple_batch(1, 1_000)).await;
    // max_bytes 1: only the first batch of an answer is returned.
    let mut open = request(
        0,
        0,
        vec![topic(
            "q",
            Uuid::nil(),
            vec![partition(0, 0), partition(1, 0)],
        )],
    );
    open.max_bytes = 1;
    let r = fetch(&mut c, V_NAMES, &open).await;
    let id = r.session_id;
    assert_eq!(answered(&r), vec![(0, true), (1, false)]);
    // Partition 0 has more, but partition 1 is read first now.
    let mut next = request(id, 1, vec![topic("q", Uuid::nil(), vec![partition(0, 1)])]);
    next.max_bytes = 1;
    let r = fetch(&mut c, V_NAMES, &next).await;
    assert_eq!(answered(&r), vec![(1, true)]);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_named_by_id_are_read_written_and_refused_when_unknown() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "i", 1, &[]).await, 0);
    let id = topic_id(&mut c, "i").await;

    // Produce v13 by id: appended, and answered with the id.
    let by_id = |topic: &str, id: Uuid| -> ProduceRequest {
        let mut r = produce(topic, 0, simple_batch(3, 1_000), -1);
        r.topic_data[0].name = name("");
        r.topic_data[0].topic_id = id;
        r
    };
    let r = c.send(13, &by_id("i", id)).await.expect("produce");
    assert_eq!(r.responses[0].topic_id, id);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    let unknown = Uuid::new_v4();
    let r = c.send(13, &by_id("i", unknown)).await.expect("produce");
    assert_eq!(r.responses[0].topic_id, unknown);
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, ResponseError::UnknownTopicId.code());

    // A session by id; an unknown id is answered UNKNOWN_TOPIC_ID beside it.
    let open = request(
        0,
        0,
        vec![
            topic("", id, vec![partition(0, 0)]),
            topic("", unknown, vec![partition(0, 0)]),
        ],
    );
    let r = fetch(&mut c, V_IDS, &open).await;
    let session = r.session_id;
    assert!(session > 0);
    assert_eq!(r.responses.len(), 2);
    assert_eq!(r.responses[0].topic_id, id);
    assert_eq!(
        r.responses[0].partitions[0].high_watermark, 3,
        "only the known id's batch"
    );
    assert_eq!(r.responses[1].topic_id, unknown);
    let p = &r.responses[1].partitions[0];
    assert_eq!(p.error_code, ResponseError::UnknownTopicId.code());

    // The topic is deleted and created again under its name: the session's partition
    // names the old id, and is answered UNKNOWN_TOPIC_ID, not the new topic's records.
    let mut del = DeleteTopicsRequest::default();
    del.topic_names = vec![name("i")];
    del.timeout_ms = 5_000;
    let r = c.send(5, &del).await.expect("delete");
    assert_eq!(r.responses[0].error_code, 0);
    assert_eq!(create(&mut c, "i", 1, &[]).await, 0);
    append(&mut c, "i", 0, simple_batch(1, 1_000)).await;
    let r = fetch(&mut c, V_IDS, &request(session, 1, vec![])).await;
    assert_eq!(r.error_code, 0);
    let p = &r.responses[0].partitions[0];
    assert_eq!(r.responses[0].topic_id, id);
    assert_eq!(p.error_code, ResponseError::UnknownTopicId.code());
    assert!(p.records.as_ref().is_none_or(|b| b.is_empty()));

    agent.stop().await;
}
