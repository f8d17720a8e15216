//! Client quotas at the protocol level: AlterClientQuotas and DescribeClientQuotas as
//! Kafka answers them (filters, defaults, strict matching, validation per entry,
//! validate_only), and the throttling of request time and fetch bytes (the answer's
//! throttle_time_ms; a throttled fetch carries no records). The real-client tests of
//! the byte rates are `tests/clients/test_quotas.py`.
// These tests drive a real agent over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strata_tests::{Client, TestAgent, create, name, produce, simple_batch};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

type Entity<'a> = &'a [(&'a str, Option<&'a str>)];

fn entry(
    entity: Entity<'_>,
    ops: &[(&str, Option<f64>)],
) -> alter_client_quotas_request::EntryData {
    let mut e = alter_client_quotas_request::EntryData::default();
    e.entity = entity
        .iter()
        .map(|(t, n)| {
            let mut d = alter_client_quotas_request::EntityData::default();
            d.entity_type = s(t);
            d.entity_name = n.map(s);
            d
        })
        .collect();
    e.ops = ops
        .iter()
        .map(|(k, v)| {
            let mut o = alter_client_quotas_request::OpData::default();
            o.key = s(k);
            o.value = v.unwrap_or(0.0);
            o.remove = v.is_none();
            o
        })
        .collect();
    e
}

async fn alter(
    c: &mut Client,
    entries: Vec<alter_client_quotas_request::EntryData>,
    validate_only: bool,
) -> Vec<i16> {
    let mut req = AlterClientQuotasRequest::default();
    req.entries = entries;
    req.validate_only = validate_only;
    let r = c.send(1, &req).await.expect("alter client quotas");
    r.entries.iter().map(|e| e.error_code).collect()
}

/// A DescribeClientQuotas filter: (match type, match) per entity type, 0 this name, 1
/// the default, 2 any.
fn components(
    filter: &[(&str, i8, Option<&str>)],
) -> Vec<describe_client_quotas_request::ComponentData> {
    filter
        .iter()
        .map(|(t, m, n)| {
            let mut d = describe_client_quotas_request::ComponentData::default();
            d.entity_type = s(t);
            d.match_type = *m;
            d._match = n.map(s);
            d
        })
        .collect()
}

/// (match type, match) per entity type: 0 this name, 1 the default, 2 any name.
async fn describe(
    c: &mut Client,
    filter: &[(&str, i8, Option<&str>)],
    strict: bool,
) -> Vec<String> {
    let mut req = DescribeClientQuotasRequest::default();
    req.components = components(filter);
    req.strict = strict;
    let r = c.send(1, &req).await.expect("describe client quotas");
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.entries
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let entity: Vec<String> = e
                .entity
                .iter()
                .map(|d| {
                    format!(
                        "{}={}",
                        d.entity_type,
                        d.entity_name.as_deref().unwrap_or("<default>")
                    )
                })
                .collect();
            let values: Vec<String> = e
                .values
                .iter()
                .map(|v| format!("{}:{}", v.key, v.value))
                .collect();
            format!("{} {}", entity.join(","), values.join(","))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_quotas_are_altered_and_described_as_kafka_does() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    let codes = alter(
        &mut c,
        vec![
            entry(
                &[("user", Some("alice"))],
                &[("producer_byte_rate", Some(1024.0))],
            ),
            entry(&[("user", None)], &[("consumer_byte_rate", Some(2048.0))]),
            entry(
                &[("user", Some("alice")), ("client-id", Some("app"))],
                &[("request_percentage", Some(50.0))],
            ),
            entry(
                &[("client-id", None)],
                &[("producer_byte_rate", Some(10.0))],
            ),
            entry(
                &[("ip", Some("10.0.0.1"))],
                &[("connection_creation_rate", Some(3.0))],
            ),
            // Refused, each on its own: a key an ip does not have, a bad value, an
            // entity Kafka has no quotas for.
            entry(
                &[("ip", Some("10.0.0.1"))],
                &[("producer_byte_rate", Some(3.0))],
            ),
            entry(
                &[("user", Some("bob"))],
                &[("producer_byte_rate", Some(-1.0))],
            ),
            entry(
                &[("group", Some("g"))],
                &[("producer_byte_rate", Some(1.0))],
            ),
        ],
        false,
    )
    .await;
    assert_eq!(codes, [0, 0, 0, 0, 0, 42, 42, 42]);
    // validate_only stores nothing.
    let codes = alter(
        &mut c,
        vec![entry(
            &[("user", Some("carol"))],
            &[("producer_byte_rate", Some(1.0))],
        )],
        true,
    )
    .await;
    assert_eq!(codes, [0]);

    assert_eq!(
        describe(&mut c, &[("user", 0, Some("alice"))], false).await,
        [
            "client-id=app,user=alice request_percentage:50",
            "user=alice producer_byte_rate:1024",
        ]
    );
    assert_eq!(
        describe(&mut c, &[("user", 0, Some("alice"))], true).await,
        ["user=alice producer_byte_rate:1024"]
    );
    assert_eq!(
        describe(&mut c, &[("user", 1, None)], false).await,
        ["user=<default> consumer_byte_rate:2048"]
    );
    // Any entity of the type, the default included.
    assert_eq!(
        describe(&mut c, &[("client-id", 2, None)], false).await,
        [
            "client-id=<default> producer_byte_rate:10",
            "client-id=app,user=alice request_percentage:50",
        ]
    );
    assert_eq!(
        describe(&mut c, &[("user", 2, None)], true).await,
        [
            "user=<default> consumer_byte_rate:2048",
            "user=alice producer_byte_rate:1024"
        ]
    );
    assert_eq!(describe(&mut c, &[], false).await.len(), 5);
    assert_eq!(
        describe(&mut c, &[("ip", 2, None)], true).await,
        ["ip=10.0.0.1 connection_creation_rate:3"]
    );

    // Removing a key; an entity left without any is gone.
    let codes = alter(
        &mut c,
        vec![entry(
            &[("user", Some("alice"))],
            &[("producer_byte_rate", None)],
        )],
        false,
    )
    .await;
    assert_eq!(codes, [0]);
    assert_eq!(
        describe(&mut c, &[("user", 0, Some("alice"))], false).await,
        ["client-id=app,user=alice request_percentage:50"]
    );
    // Filters Kafka refuses: a type twice, an address with a user or client id.
    for filter in [
        &[("user", 0, Some("alice")), ("user", 1, None)][..],
        &[("ip", 0, Some("10.0.0.1")), ("user", 0, Some("alice"))][..],
    ] {
        let mut req = DescribeClientQuotasRequest::default();
        req.components = components(filter);
        let r = c.send(1, &req).await.expect("describe");
        assert_eq!(r.error_code, 42, "{filter:?}");
    }
    // An unknown entity type in a filter is INVALID_REQUEST.
    let mut req = DescribeClientQuotasRequest::default();
    req.components = components(&[("group", 2, None)]);
    let r = c.send(1, &req).await.expect("describe");
    assert_eq!(r.error_code, 42);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_quota_answers_carry_a_throttle_time_and_a_throttled_fetch_no_records() {
    let agent = TestAgent::start_with(|s| s.quota_window_num = 3)
        .await
        .expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "t", 1, &[]).await, 0);
    let r = c
        .send(9, &produce("t", 0, simple_batch(20, 1_000), -1))
        .await
        .expect("produce");
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    assert_eq!(r.throttle_time_ms, 0, "no quota, no throttle");

    // Every client of this test is `strata-tests`: one byte a second for its fetches.
    let codes = alter(
        &mut c,
        vec![entry(
            &[("client-id", Some("strata-tests"))],
            &[("consumer_byte_rate", Some(1.0))],
        )],
        false,
    )
    .await;
    assert_eq!(codes, [0]);
    let mut p = fetch_request::FetchPartition::default();
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = name("t");
    t.partitions = vec![p];
    let mut fetch = FetchRequest::default();
    fetch.replica_id = BrokerId(-1);
    fetch.max_bytes = 1 << 20;
    fetch.session_epoch = -1;
    fetch.topics = vec![t];
    let r = c.send(12, &fetch).await.expect("fetch");
    assert!(r.throttle_time_ms > 0, "a throttled fetch");
    let data = &r.responses[0].partitions[0];
    assert_eq!(data.error_code, 0);
    assert!(
        data.records.as_ref().is_none_or(|b| b.is_empty()),
        "records sent while throttled"
    );
    assert!(data.high_watermark > 0, "the rest of the answer is there");

    // A hundredth of a percent of a thread: any request is over it.
    let mut c2 = agent.client().await.expect("connect");
    let codes = alter(
        &mut c2,
        vec![entry(
            &[("user", None)],
            &[("request_percentage", Some(0.0001))],
        )],
        false,
    )
    .await;
    assert_eq!(codes, [0]);
    let mut throttled = 0;
    for _ in 0..5 {
        let r = c2
            .send(12, &MetadataRequest::default())
            .await
            .expect("metadata");
        if r.throttle_time_ms > 0 {
            throttled += 1;
        }
    }
    assert!(throttled > 0, "no Metadata answer was throttled");
    agent.stop().await;
}
