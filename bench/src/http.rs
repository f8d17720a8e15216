//! Producers over strata's HTTP API (`POST /v1/topics/{topic}/produce`): each sends
//! requests of `batch` base64 values one after another and times each from send to
//! answer; every record of a request counts that request's latency. What they write is
//! read back with librdkafka like any other run, so a lost or corrupted record fails
//! the run.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine;
use serde_json::Value;

use crate::payload::{self, Stamp, Writer};
use crate::produce::{Acks, ProduceSettings, Produced};
use crate::report::histogram;

/// Runs `settings.producers` HTTP producers against the API at `http` (host:port),
/// `batch` records per request, to the end (count or duration).
pub fn run(settings: &ProduceSettings, http: &str, batch: usize) -> anyhow::Result<Produced> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the HTTP producers' runtime")?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(settings.producers as usize)
        .timeout(Duration::from_secs(60))
        .build()
        .context("cannot build the HTTP client")?;
    let url = format!("http://{http}/v1/topics/{}/produce", settings.topic);
    let total = Mutex::new(Acks::new());
    let start = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..settings.producers)
            .map(|index| {
                let (client, url, settings) = (client.clone(), url.clone(), settings.clone());
                tokio::spawn(async move { send_all(&client, &url, index, &settings, batch).await })
            })
            .collect();
        for t in tasks {
            let mut acks = t.await.unwrap_or_else(|e| {
                let mut a = Acks::new();
                a.failed += 1;
                a.first_error = Some(format!("producer task: {e}"));
                a
            });
            total
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .merge(&mut acks);
        }
    });
    let elapsed = start.elapsed();
    Ok(Produced {
        acks: total.into_inner().unwrap_or_else(|p| p.into_inner()),
        elapsed,
        commits: 0,
        commit_latency: histogram(),
    })
}

async fn send_all(
    client: &reqwest::Client,
    url: &str,
    index: u32,
    settings: &ProduceSettings,
    batch: usize,
) -> Acks {
    let mut acks = Acks::new();
    let mut writer = Writer::new(
        settings.size,
        u64::from(settings.run) << 32 | u64::from(index),
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    let start = Instant::now();
    let mut seq = 0u64;
    loop {
        let left = settings.count.map_or(u64::MAX, |n| n.saturating_sub(seq));
        if left == 0 || settings.duration.is_some_and(|d| start.elapsed() >= d) {
            return acks;
        }
        let n = (batch as u64).min(left);
        let sent_ns = payload::now_ns();
        // The body is written as it is sent, base64 straight into it: the load
        // generator shares the machine with the broker, so it spends as little as it can.
        let mut body =
            String::with_capacity(n as usize * (settings.size.div_ceil(3) * 4 + 16) + 64);
        body.push_str(r#"{"messages":["#);
        let mut stamps = Vec::with_capacity(n as usize);
        for i in 0..n {
            let stamp = Stamp {
                run: settings.run,
                producer: index,
                seq: seq + i,
                sent_ns,
            };
            if i > 0 {
                body.push(',');
            }
            body.push_str(r#"{"value":""#);
            b64.encode_string(writer.value(stamp), &mut body);
            body.push_str(r#""}"#);
            stamps.push(stamp);
        }
        seq += n;
        body.push_str(r#"],"acks":"#);
        body.push_str(&Value::from(settings.acks.as_str()).to_string());
        body.push_str(r#","encoding":"base64"}"#);
        let answer = client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        let answer: Result<Value, String> = match answer {
            Ok(r) => r
                .bytes()
                .await
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string())),
            Err(e) => Err(e.to_string()),
        };
        let took = payload::now_ns().saturating_sub(sent_ns).max(1_000);
        let offsets = match &answer {
            Ok(v) => v["offsets"].as_array().cloned().unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        for (i, stamp) in stamps.iter().enumerate() {
            match offsets.get(i) {
                Some(o) if o["offset"].is_i64() && o.get("error").is_none_or(Value::is_null) => {
                    acks.acked.add(stamp.producer, stamp.seq);
                    acks.acked_bytes += settings.size as u64;
                    let _ = acks.latency.record(took);
                }
                other => {
                    acks.failed += 1;
                    acks.first_error
                        .get_or_insert_with(|| match (&answer, other) {
                            (Err(e), _) => format!("HTTP produce: {e}"),
                            (Ok(v), None) => format!("HTTP produce answered {v}"),
                            (Ok(_), Some(o)) => format!("HTTP produce refused a record: {o}"),
                        });
                }
            }
        }
    }
}
