//! The connection edge: Kafka's `max.connections` and `connections.max.idle.ms`.
// These tests drive a real agent over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
use strata_tests::{Client, TestAgent};

/// A connection that sends nothing for `connections_max_idle_ms` is closed; one that
/// keeps sending requests stays open past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed() {
    let agent = TestAgent::start_with(|s| s.connections_max_idle_ms = 300)
        .await
        .expect("start");
    let mut busy = agent.client().await.expect("connect");
    let mut idle = agent.client().await.expect("connect");
    let started = tokio::time::Instant::now();
    // `busy` asks every 100 ms for a second, well past the idle limit.
    while started.elapsed() < Duration::from_secs(1) {
        busy.send(12, &MetadataRequest::default())
            .await
            .expect("a busy connection stays open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        idle.closed_by_broker().await,
        "the idle connection is closed"
    );
    busy.send(12, &MetadataRequest::default())
        .await
        .expect("still open");
}

/// At `max_connections` the agent stops accepting: a further connection gets no answer
/// until one of the others closes, then it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_wait_for_a_slot() {
    let agent = TestAgent::start_with(|s| s.max_connections = 2)
        .await
        .expect("start");
    let mut first = agent.client().await.expect("connect");
    let mut second = agent.client().await.expect("connect");
    for c in [&mut first, &mut second] {
        c.send(3, &ApiVersionsRequest::default())
            .await
            .expect("served within the limit");
    }
    // The kernel completes the handshake (the listen backlog); the agent does not
    // accept it, so the request waits.
    let mut third = Client::connect(agent.kafka_addr()).await.expect("connect");
    let waiting = tokio::spawn(async move {
        let r = third.send(3, &ApiVersionsRequest::default()).await;
        (third, r.map(|r| r.error_code))
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "a third connection is not served at the limit"
    );
    drop(first);
    let (_third, answered) = waiting.await.expect("task");
    assert_eq!(answered.expect("served once a slot is free"), 0);
}

/// A frame whose 4-byte size prefix arrives only in part is dropped after the request
/// read timeout, like a frame whose body stalls (not after the much longer idle limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_size_prefix_is_dropped_in_time() {
    let agent = TestAgent::start_with(|s| s.request_read_timeout_ms = 300)
        .await
        .expect("start");
    let mut client = agent.client().await.expect("connect");
    client.send_raw(&[0, 0]).await.expect("half a size prefix");
    let started = tokio::time::Instant::now();
    assert!(
        client.closed_by_broker().await,
        "the stalled connection is closed"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "closed after {:?}, not at the read timeout",
        started.elapsed()
    );
}
