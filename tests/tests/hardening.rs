//! Protocol-level tests of the hardening issue: limits checked before anything is
//! allocated, keys on compacted topics, and topics looked up by id.
// These tests drive a real agent over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    CreatePartitionsRequest, MetadataRequest, TopicName, create_partitions_request,
    metadata_request,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use strata_tests::{TestAgent, batch, create, create_topic, name, produce};

/// A partition count up to `i32::MAX` is refused with INVALID_PARTITIONS before any
/// replica list is placed or allocated, with and without `validate_only`, by
/// CreateTopics and CreatePartitions alike; nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_partition_counts_are_refused_before_allocating() {
    let agent = TestAgent::start().await.expect("start");
    let mut client = agent.client().await.expect("connect");
    for validate_only in [true, false] {
        for count in [i32::MAX, 10_001] {
            let mut request = create_topic("huge", count, &[]);
            request.validate_only = validate_only;
            let r = client.send(7, &request).await.expect("create topics");
            assert_eq!(
                r.topics[0].error_code,
                ResponseError::InvalidPartitions.code(),
                "{count} partitions, validate_only {validate_only}: {:?}",
                r.topics[0].error_message
            );
        }
    }
    assert!(agent.broker().replicas().topic("huge").is_none());
    assert_eq!(create(&mut client, "grows", 1, &[]).await, 0);
    let mut t = create_partitions_request::CreatePartitionsTopic::default();
    t.name = name("grows");
    t.count = i32::MAX;
    let mut request = CreatePartitionsRequest::default();
    request.topics = vec![t];
    request.timeout_ms = 5000;
    let r = client.send(3, &request).await.expect("create partitions");
    assert_eq!(
        r.results[0].error_code,
        ResponseError::InvalidPartitions.code()
    );
    let topic = agent.broker().replicas().topic("grows").expect("topic");
    assert_eq!(topic.record.partitions.len(), 1);
    agent.stop().await;
}

/// A compacted topic refuses records without a key with INVALID_RECORD and an error per
/// keyless record (Produce v8+), and keeps nothing of the batch; keyed records go in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacted_topics_refuse_records_without_a_key() {
    let agent = TestAgent::start().await.expect("start");
    let mut client = agent.client().await.expect("connect");
    assert_eq!(
        create(
            &mut client,
            "compacted",
            1,
            &[("cleanup.policy", "compact")]
        )
        .await,
        0
    );
    let keyless = batch(
        &[
            (Some(b"k0"), Some(b"v"), &[]),
            (None, Some(b"v"), &[]),
            (None, None, &[]),
        ],
        1_700_000_000_000,
        Compression::Gzip,
    );
    let r = client
        .send(9, &produce("compacted", 0, keyless, -1))
        .await
        .expect("produce");
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, ResponseError::InvalidRecord.code());
    let refused: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(refused, vec![1, 2]);
    assert!(
        p.record_errors[0]
            .batch_index_error_message
            .as_ref()
            .is_some_and(|m| m.contains("without key")),
        "{:?}",
        p.record_errors
    );
    let keyed = batch(
        &[(Some(b"k"), None, &[])],
        1_700_000_000_000,
        Compression::None,
    );
    let r = client
        .send(9, &produce("compacted", 0, keyed, -1))
        .await
        .expect("produce");
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.base_offset, 0, "the refused batch took no offsets");
    agent.stop().await;
}

/// Metadata v10+ looks a topic up by its id whenever the id is not zero, as Kafka does:
/// the Java client's `describeTopics(TopicCollection.ofTopicIds(..))` sends the empty
/// string as the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_finds_a_topic_by_id_whatever_its_name_field() {
    let agent = TestAgent::start().await.expect("start");
    let mut client = agent.client().await.expect("connect");
    let created = client
        .send(7, &create_topic("by-id", 2, &[]))
        .await
        .expect("create");
    let id = created.topics[0].topic_id;
    assert!(!id.is_nil());
    for name in [None, Some(""), Some("some-other-name")] {
        let mut t = metadata_request::MetadataRequestTopic::default();
        t.topic_id = id;
        t.name = name.map(|n| TopicName(StrBytes::from_string(n.to_string())));
        let mut request = MetadataRequest::default();
        request.topics = Some(vec![t]);
        let r = client.send(12, &request).await.expect("metadata");
        assert_eq!(r.topics[0].error_code, 0, "name {name:?}");
        assert_eq!(
            r.topics[0].name.as_ref().map(|n| n.0.as_str()),
            Some("by-id"),
            "name {name:?}"
        );
        assert_eq!(r.topics[0].partitions.len(), 2);
    }
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.topic_id = uuid::Uuid::from_u128(42);
    t.name = Some(TopicName(StrBytes::from_static_str("")));
    let mut request = MetadataRequest::default();
    request.topics = Some(vec![t]);
    let r = client.send(12, &request).await.expect("metadata");
    assert_eq!(r.topics[0].error_code, ResponseError::UnknownTopicId.code());
    agent.stop().await;
}

/// A produce's answer, pending until the write is acknowledged (acks=all), keeps no
/// part of the request's frame: the frame's memory goes when its reservation in the
/// request-memory bound does (`queued_max_request_bytes`), not when the answer is sent.
/// (Once, the pending answer held the topic name, a slice of the frame, and with it
/// every record sent: a flood of large produce requests held several times the bound.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_produce_answer_holds_nothing_of_its_frame() {
    use bytes::BytesMut;
    use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader};
    use kafka_protocol::protocol::{Encodable, HeaderVersion};
    use std::sync::Arc;
    use strata_agent::context::{ConnectionInfo, Listener, RequestContext};
    use strata_agent::server::{Parsed, parse_request};

    let agent = TestAgent::start().await.expect("start");
    let mut client = agent.client().await.expect("connect");
    assert_eq!(create(&mut client, "held", 1, &[]).await, 0);
    let version = 9;
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Produce as i16;
    header.request_api_version = version;
    header.client_id = Some(StrBytes::from_static_str("frame-holder"));
    let request = produce(
        "held",
        0,
        batch(
            &[(None, Some(&[7u8; 64 * 1024][..]), &[][..])],
            0,
            Compression::None,
        ),
        -1,
    );
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, ProduceRequest::header_version(version))
        .expect("header");
    request.encode(&mut buf, version).expect("body");
    let frame = buf.freeze();
    let Ok(Parsed::Request { header, request }) = parse_request(frame.clone()) else {
        panic!("a valid produce request");
    };
    let connection = ConnectionInfo::new(
        Arc::new(Listener::plaintext()),
        "127.0.0.1:1".parse().expect("address"),
    );
    let ctx = RequestContext::new(
        Arc::new(connection),
        &header,
        ApiKey::Produce,
        &request,
        std::time::Duration::from_secs(10),
    );
    drop(header);
    let reply = strata_agent::api::dispatch(agent.broker(), &ctx, *request)
        .await
        .expect("produce has a handler");
    assert!(
        frame.is_unique(),
        "the pending answer of a produce keeps a part of its frame"
    );
    let response = reply.await.expect("acks=all has an answer");
    let kafka_protocol::messages::ResponseKind::Produce(response) = response else {
        panic!("a produce response: {response:?}");
    };
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!((partition.error_code, partition.base_offset), (0, 0));
}
