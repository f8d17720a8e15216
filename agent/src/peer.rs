//! A connection to another agent's Kafka listener, for the requests agents send each
//! other: a follower's fetches (`fetcher.rs`) and the transaction coordinator's markers
//! (`txn/markers.rs`). Requests are ordinary Kafka requests, encoded and decoded by the
//! `kafka-protocol` crate.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Any single response; a fetch waits at most its own `max_wait_ms` at the leader.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes a response may hold besides the records (headers, topic and partition fields).
const RESPONSE_OVERHEAD_BYTES: usize = 1024 * 1024;

/// One connection to another agent's Kafka listener.
pub(crate) struct Peer {
    stream: TcpStream,
    correlation_id: i32,
    client_id: StrBytes,
    /// The largest response frame accepted: a peer that declares more is refused before
    /// anything is allocated for it.
    max_frame_bytes: usize,
}

impl Peer {
    /// `max_record_bytes`: the most record bytes one response may carry (a fetch returns
    /// at least one whole batch, which may exceed the fetch's byte limit).
    pub(crate) async fn connect(
        address: &str,
        node_id: i32,
        max_record_bytes: usize,
    ) -> anyhow::Result<Peer> {
        let stream = tokio::time::timeout(RESPONSE_TIMEOUT, TcpStream::connect(address))
            .await
            .context("connect timed out")??;
        stream.set_nodelay(true)?;
        Ok(Peer {
            stream,
            correlation_id: 0,
            client_id: StrBytes::from_string(format!("strata-replica-{node_id}")),
            max_frame_bytes: max_record_bytes + RESPONSE_OVERHEAD_BYTES,
        })
    }

    pub(crate) async fn send<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> anyhow::Result<R::Response> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = self.correlation_id;
        header.client_id = Some(self.client_id.clone());
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version))?;
        request.encode(&mut buf, version)?;
        let size = i32::try_from(buf.len() - 4)?;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        let max = self.max_frame_bytes;
        let exchange = async {
            self.stream.write_all(&buf).await?;
            read_frame(&mut self.stream, max).await
        };
        let mut frame = tokio::time::timeout(RESPONSE_TIMEOUT, exchange)
            .await
            .context("no response in time")??;
        let response_header =
            ResponseHeader::decode(&mut frame, R::Response::header_version(version))?;
        if response_header.correlation_id != self.correlation_id {
            bail!(
                "response to request {} where {} was expected",
                response_header.correlation_id,
                self.correlation_id
            );
        }
        let response = R::Response::decode(&mut frame, version)?;
        if frame.has_remaining() {
            bail!("{} bytes after the response", frame.remaining());
        }
        Ok(response)
    }
}

/// Reads one size-prefixed response frame of at most `max` bytes.
pub(crate) async fn read_frame(
    reader: &mut (impl AsyncReadExt + Unpin),
    max: usize,
) -> anyhow::Result<bytes::Bytes> {
    let mut size = [0u8; 4];
    reader.read_exact(&mut size).await?;
    let size = i32::from_be_bytes(size);
    let size = usize::try_from(size)
        .ok()
        .filter(|s| *s <= max)
        .with_context(|| format!("response frame of {size} bytes exceeds the limit of {max}"))?;
    let mut body = BytesMut::zeroed(size);
    reader.read_exact(&mut body).await?;
    Ok(body.freeze())
}
