//! Damaged archived objects, through the agent: a fetch of offsets a damaged object
//! holds is answered KAFKA_STORAGE_ERROR, never with wrong records, and the offsets of
//! the objects around it read as produced. (Every column's damage is in
//! `tiering/tests/integrity.rs`; here a truncated and a garbage object.)
// These tests drive a real agent over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use strata_tests::cluster::eventually;
use strata_tests::{Client, TestAgent, batch, create, name, produce};

const TOPIC: &str = "archived";

fn fetch(offset: i64) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    t.topic = name(TOPIC);
    t.partitions = vec![p];
    let mut request = FetchRequest::default();
    request.replica_id = kafka_protocol::messages::BrokerId(-1);
    request.max_bytes = 1 << 20;
    request.topics = vec![t];
    request
}

/// The error code, and the `(offset, value)` of every record answered.
async fn read(client: &mut Client, offset: i64) -> (i16, Vec<(i64, String)>) {
    let r = client.send(12, &fetch(offset)).await.expect("fetch");
    let data = &r.responses[0].partitions[0];
    let mut records: Bytes = data.records.clone().unwrap_or_default();
    let mut out = Vec::new();
    if !records.is_empty() {
        for set in RecordBatchDecoder::decode_all(&mut records).expect("valid batches") {
            for r in set.records {
                let v = r.value.map(|v| String::from_utf8_lossy(&v).into_owned());
                out.push((r.offset, v.unwrap_or_default()));
            }
        }
    }
    (data.error_code, out)
}

/// `(first, last)` offsets of the archived objects, from their names, and their paths.
fn objects(agent: &TestAgent) -> Vec<(i64, i64, std::path::PathBuf)> {
    let dir = agent
        .settings
        .data_dir
        .join(format!("archive/topic={TOPIC}/partition=0"));
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_else(|_| Vec::new())
        .into_iter()
        .filter_map(|p: std::path::PathBuf| {
            let name = p.file_name()?.to_str()?.to_string();
            let first = name.get(..20)?.parse().ok()?;
            let last = name.get(21..41)?.parse().ok()?;
            Some((first, last, p))
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_archived_objects_answer_storage_errors_for_their_offsets_only() {
    let agent = TestAgent::start_with(|s| s.tiering_interval_ms = 50)
        .await
        .expect("start");
    let mut client = agent.client().await.expect("connect");
    let configs = [("segment.bytes", "1024"), ("local.retention.ms", "0")];
    assert_eq!(create(&mut client, TOPIC, 1, &configs).await, 0);
    let mut produced = Vec::new();
    for b in 0..120 {
        let values: Vec<String> = (0..3).map(|i| format!("value-{}", b * 3 + i)).collect();
        let records: Vec<_> = values
            .iter()
            .map(|v| (None, Some(v.as_bytes()), &[][..]))
            .collect();
        let request = produce(TOPIC, 0, batch(&records, 1_000 + b, Compression::None), -1);
        let r = client.send(9, &request).await.expect("produce");
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        produced.extend(values);
    }
    // Archived, and the local copies of the first objects deleted (local retention runs
    // every 5 s), so that the archive serves them.
    let broker = agent.broker().clone();
    eventually(
        Duration::from_secs(30),
        "archived and deleted locally",
        || {
            let broker = broker.clone();
            let found = objects(&agent);
            async move {
                let topic = broker.replicas().topic(TOPIC);
                let local_start = topic
                    .as_ref()
                    .and_then(|t| t.replica(0))
                    .map_or(0, |p| p.log_start_offset());
                Ok((found.len() >= 5 && local_start > found[4].1).then_some(()))
            }
        },
    )
    .await
    .expect("archived");
    let found = objects(&agent);
    std::fs::write(&found[1].2, {
        let bytes = std::fs::read(&found[1].2).expect("read");
        bytes[..bytes.len() / 2].to_vec()
    })
    .expect("truncate");
    let size = std::fs::metadata(&found[3].2).expect("stat").len() as usize;
    std::fs::write(&found[3].2, vec![0x5a; size]).expect("garbage");

    for (i, (first, last, _)) in found.iter().take(5).enumerate() {
        let (code, records) = read(&mut client, *first).await;
        if i == 1 || i == 3 {
            assert_eq!(
                code,
                ResponseError::KafkaStorageError.code(),
                "object {i} ({first}..={last}) is damaged"
            );
            assert!(records.is_empty(), "object {i}: {records:?}");
            continue;
        }
        assert_eq!(code, 0, "object {i} ({first}..={last}) is intact");
        assert!(!records.is_empty(), "object {i}: nothing read");
        for (offset, value) in &records {
            assert_eq!(value, &produced[*offset as usize], "offset {offset}");
        }
        // Each archive read answers from one object.
        assert!(
            records.iter().all(|(o, _)| *o <= *last),
            "object {i}: {records:?}"
        );
    }
    agent.stop().await;
}
