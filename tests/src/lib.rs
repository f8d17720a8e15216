//! Test harness: an in-process agent on ephemeral ports with its own data directory, and
//! a protocol-level client built on the `kafka-protocol` crate, for tests that need to
//! send exactly the bytes (or the versions) a real client library would not.
// These tests drive a real agent over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

pub mod cluster;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{
    CreateTopicsRequest, ProduceRequest, RequestHeader, TopicName, produce_request,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strata_agent::{Agent, Settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An agent running in this process.
pub struct TestAgent {
    agent: Option<Agent>,
    pub settings: Settings,
    pub dir: tempfile::TempDir,
}

impl TestAgent {
    pub async fn start() -> anyhow::Result<TestAgent> {
        Self::start_with(|_| {}).await
    }

    /// Starts an agent after `adjust` has changed its settings.
    pub async fn start_with(adjust: impl FnOnce(&mut Settings)) -> anyhow::Result<TestAgent> {
        let dir = tempfile::tempdir()?;
        let mut settings = Settings {
            kafka_listen: Some("127.0.0.1:0".parse()?),
            http_listen: "127.0.0.1:0".parse()?,
            data_dir: dir.path().join("data"),
            ..Settings::default()
        };
        adjust(&mut settings);
        let agent = strata_agent::start(settings.clone()).await?;
        Ok(TestAgent {
            agent: Some(agent),
            settings,
            dir,
        })
    }

    pub fn broker(&self) -> &std::sync::Arc<strata_agent::broker::Broker> {
        &self.agent.as_ref().expect("running").broker
    }

    pub fn kafka_addr(&self) -> SocketAddr {
        self.agent.as_ref().expect("running").kafka_addr
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        Client::connect(self.kafka_addr()).await
    }

    /// Shuts the agent down cleanly and starts it again on the same data directory.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(agent) = self.agent.take() {
            agent.shutdown().await;
        }
        self.agent = Some(strata_agent::start(self.settings.clone()).await?);
        Ok(())
    }

    pub async fn stop(mut self) {
        if let Some(agent) = self.agent.take() {
            agent.shutdown().await;
        }
    }
}

/// A raw Kafka protocol client on one connection.
pub struct Client {
    stream: TcpStream,
    correlation_id: i32,
}

/// How long a test waits for any single response.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(20);

impl Client {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            correlation_id: 0,
        })
    }

    /// [`Client::send`], panicking with `ctx` (what is being checked) if there is no
    /// decodable response.
    pub async fn answer<R: Request>(
        &mut self,
        version: i16,
        request: &R,
        ctx: &str,
    ) -> R::Response {
        self.send(version, request)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {e:#}"))
    }

    /// Sends `request` at `version` and decodes its response.
    pub async fn send<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> anyhow::Result<R::Response> {
        self.correlation_id += 1;
        let correlation_id = self.correlation_id;
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = Some(StrBytes::from_static_str("strata-tests"));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version))?;
        request.encode(&mut buf, version)?;
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).await?;
        let mut frame = self
            .read_frame()
            .await?
            .context("connection closed before the response")?;
        let response_header = kafka_protocol::messages::ResponseHeader::decode(
            &mut frame,
            R::Response::header_version(version),
        )?;
        if response_header.correlation_id != correlation_id {
            bail!(
                "correlation id {} != {correlation_id}",
                response_header.correlation_id
            );
        }
        let response = R::Response::decode(&mut frame, version)?;
        if frame.has_remaining() {
            bail!("{} bytes left after the response", frame.remaining());
        }
        Ok(response)
    }

    /// Writes bytes as they are.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Reads one response frame; `None` when the broker closed the connection.
    pub async fn read_frame(&mut self) -> anyhow::Result<Option<Bytes>> {
        let read = async {
            let mut size = [0u8; 4];
            match self.stream.read_exact(&mut size).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
                Err(e) => return Err(e.into()),
            }
            let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
            self.stream.read_exact(&mut body).await?;
            Ok(Some(Bytes::from(body)))
        };
        tokio::time::timeout(RESPONSE_TIMEOUT, read)
            .await
            .context("no response in time")?
    }

    /// Whether the broker closed the connection (waiting at most the response timeout).
    pub async fn closed_by_broker(&mut self) -> bool {
        matches!(self.read_frame().await, Ok(None))
    }
}

/// A record for [`batch`]: key, value, headers.
pub type TestRecord<'a> = (
    Option<&'a [u8]>,
    Option<&'a [u8]>,
    &'a [(&'a str, Option<&'a [u8]>)],
);

/// Encodes one record batch (offsets from 0) with the given timestamps.
pub fn batch(
    records: &[TestRecord<'_>],
    first_timestamp_ms: i64,
    compression: Compression,
) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value, headers))| {
            let mut h = Vec::new();
            for (k, v) in headers.iter() {
                h.push((
                    StrBytes::from_string(k.to_string()),
                    v.map(Bytes::copy_from_slice),
                ));
            }
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32 - 1,
                timestamp: first_timestamp_ms + i as i64,
                key: key.map(Bytes::copy_from_slice),
                value: value.map(Bytes::copy_from_slice),
                headers: h,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("test batches encode");
    buf.freeze()
}

/// `n` small records with values `v0..v{n-1}`.
pub fn simple_batch(n: usize, first_timestamp_ms: i64) -> Bytes {
    let values: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    let records: Vec<TestRecord<'_>> = values
        .iter()
        .map(|v| (None, Some(v.as_bytes()), &[][..]))
        .collect();
    batch(&records, first_timestamp_ms, Compression::None)
}

/// A topic name for requests.
pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// CreateTopics for one topic with the broker's replication factor.
pub fn create_topic(topic: &str, partitions: i32, configs: &[(&str, &str)]) -> CreateTopicsRequest {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = partitions;
    t.replication_factor = -1;
    t.configs = configs
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = StrBytes::from_string(k.to_string());
            c.value = Some(StrBytes::from_string(v.to_string()));
            c
        })
        .collect();
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 5000;
    r
}

/// Creates a topic over `client`; returns the error code.
pub async fn create(
    client: &mut Client,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> i16 {
    let r = client
        .send(7, &create_topic(topic, partitions, configs))
        .await
        .expect("create topics");
    r.topics[0].error_code
}

/// The id of `topic`, from Metadata (nil if there is no such topic).
pub async fn topic_id(client: &mut Client, topic: &str) -> uuid::Uuid {
    let mut t = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut req = kafka_protocol::messages::MetadataRequest::default();
    req.topics = Some(vec![t]);
    let r = client.send(12, &req).await.expect("metadata");
    r.topics[0].topic_id
}

/// Produce of one record set to one partition.
pub fn produce(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = partition;
    p.records = Some(records);
    let mut t = produce_request::TopicProduceData::default();
    t.name = name(topic);
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.acks = acks;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    r
}
