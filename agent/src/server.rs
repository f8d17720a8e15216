//! The Kafka listener: one task per connection, size-limited framing, and responses
//! written in request order.
//!
//! A connection reads a frame, decodes it with the `kafka-protocol` crate and hands it
//! to [`api::dispatch`], which returns a future for the reply. Replies are queued in a
//! bounded, ordered queue, so a connection may have several requests in flight (their
//! waits overlap) while the client still sees responses in the order it asked.
//!
//! What closes a connection (and only that connection): a frame over the size limit or
//! under the header size, a frame that does not arrive within `request_read_timeout_ms`
//! of its size, an unknown API key, an unsupported version of any API but ApiVersions
//! (which answers per KIP-511), or a body that does not decode.
//!
//! On an SSL or SASL_SSL listener the TLS handshake (see [`crate::tls`]) comes first,
//! within `request_read_timeout_ms`; a connection that does not finish it is closed
//! without a Kafka answer, as Kafka's is.
//!
//! Memory: a frame's declared size is reserved from the agent's request budget
//! (`queued_max_request_bytes`) before its body is read into a buffer of that size,
//! whose pages are touched only as the bytes arrive: connections that declare large
//! frames and send nothing cost no memory beyond their reservation, and wait (then time
//! out) once the budget is taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::buffers::BufferPool;
use crate::frame::Frame;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError, mpsc};

use crate::api::{self, Reply, versions};
use crate::broker::Broker;
use crate::context::{ConnectionInfo, Listener, RequestContext};
use crate::sasl::Sasl;
use crate::sasl::session::{Session, Verdict};
use crate::tasks::{Stopped, Tasks};
use crate::tls::Tls;

/// Requests one connection may have in flight before it stops reading.
const MAX_IN_FLIGHT: usize = 64;

/// The first pause after a failed accept; it doubles up to [`ACCEPT_BACKOFF_MAX`].
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The request bytes all connections of an agent hold in memory at once
/// (`queued_max_request_bytes`): a frame's declared size, times [`FRAME_COPIES`], is
/// reserved before its body is read, and released once the request has been handed to
/// its handler.
///
/// Not first-come-first-served: a frame that does not fit waits without holding up
/// smaller ones that do (a fair queue would let one huge declared frame stall every
/// connection behind it); each waiter tries again whenever bytes are released.
#[derive(Debug, Clone)]
pub struct RequestMemory {
    permits: Arc<Semaphore>,
    released: Arc<Notify>,
    capacity: usize,
    frames: Arc<BufferPool>,
}

/// What one frame occupies while its request is handled, in frames: the frame itself
/// (read into a buffer of exactly its size), and room for the records of one batch
/// when a compressed batch is decompressed to be validated. An uncompressed produce
/// copies nothing: its batches are validated and written from the frame, only their
/// headers stamped in a copy. Measured by `bench/flood_bench.py` (docs/BENCHMARKS.md):
/// reserving the frame alone, with two copies of every batch made, let a flood of large
/// produce requests hold several times the bound.
pub const FRAME_COPIES: usize = 2;

/// Bytes reserved for one frame; released, and waiters woken, when dropped.
#[derive(Debug)]
pub struct Reserved {
    permit: Option<OwnedSemaphorePermit>,
    released: Arc<Notify>,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.released.notify_waiters();
    }
}

impl RequestMemory {
    pub fn new(bytes: usize) -> RequestMemory {
        let capacity = bytes.min(Semaphore::MAX_PERMITS);
        RequestMemory {
            permits: Arc::new(Semaphore::new(capacity)),
            released: Arc::new(Notify::new()),
            capacity,
            // Idle frame buffers hold at most a quarter of the request budget.
            frames: Arc::new(BufferPool::new((capacity / 4).min(64 << 20))),
        }
    }

    /// Bytes not reserved by any frame now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    async fn reserve(&self, bytes: usize) -> Option<Reserved> {
        let n = u32::try_from(bytes).ok()?;
        loop {
            // Registered before trying, so a release between the try and the wait
            // still wakes this one.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            match Arc::clone(&self.permits).try_acquire_many_owned(n) {
                Ok(permit) => {
                    return Some(Reserved {
                        permit: Some(permit),
                        released: Arc::clone(&self.released),
                    });
                }
                Err(TryAcquireError::NoPermits) => released.await,
                Err(TryAcquireError::Closed) => return None,
            }
        }
    }
}

/// Connections per client address, for `max_connections_per_ip`.
#[derive(Debug)]
struct PerAddress {
    limit: usize,
    overrides: std::collections::BTreeMap<std::net::IpAddr, usize>,
    open: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

/// One connection counted against its address while it lives.
struct AddressSlot {
    per_address: Arc<PerAddress>,
    ip: std::net::IpAddr,
}

impl PerAddress {
    /// Counts a new connection from `ip`, or refuses it with the limit it is at.
    fn admit(self: &Arc<Self>, ip: std::net::IpAddr) -> Result<AddressSlot, usize> {
        let limit = self.overrides.get(&ip).copied().unwrap_or(self.limit);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= limit {
            return Err(limit);
        }
        *count += 1;
        Ok(AddressSlot {
            per_address: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self
            .per_address
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Connections refused for their address are logged at most once a second.
static REFUSED_BY_ADDRESS: crate::throttle::Throttle = crate::throttle::Throttle::per_second();

/// Bad connections are logged at most once a second: a broken or hostile client can
/// open them at any rate.
static BAD_CONNECTIONS: crate::throttle::Throttle = crate::throttle::Throttle::per_second();

/// Failed TLS handshakes are logged at most once a second, however many there are.
static FAILED_HANDSHAKES: crate::throttle::Throttle = crate::throttle::Throttle::per_second();

/// The connection limits and request memory every listener of an agent shares.
#[derive(Debug, Clone)]
pub struct Shared {
    memory: RequestMemory,
    slots: Arc<Semaphore>,
    per_address: Arc<PerAddress>,
}

impl Shared {
    pub fn new(settings: &crate::config::Settings) -> Shared {
        Shared {
            memory: RequestMemory::new(settings.queued_max_request_bytes),
            slots: Arc::new(Semaphore::new(settings.max_connections)),
            per_address: Arc::new(PerAddress {
                limit: settings.max_connections_per_ip,
                overrides: settings.max_connections_per_ip_overrides.clone(),
                open: Default::default(),
            }),
        }
    }
}

/// One Kafka listener's socket, and how its connections authenticate.
#[derive(Debug)]
pub struct Endpoint {
    pub socket: TcpListener,
    pub listener: Arc<Listener>,
    /// The authenticator, on a SASL listener.
    pub sasl: Option<Arc<Sasl>>,
    /// How long a SASL session lasts before re-authentication (KIP-368).
    pub reauth: Option<Duration>,
    /// The TLS configuration, on an SSL or SASL_SSL listener.
    pub tls: Option<Arc<Tls>>,
}

/// Accepts connections on `endpoint` until shutdown; each connection is a task of
/// `tasks`. A failed accept (out of file descriptors, most often) is retried after a
/// pause that doubles while it keeps failing, and logged once per run of failures.
pub async fn serve(
    endpoint: Endpoint,
    shared: Shared,
    broker: Arc<Broker>,
    tasks: Tasks,
) -> Stopped {
    let settings = broker.settings();
    let Shared {
        memory,
        slots,
        per_address,
    } = shared;
    let Endpoint {
        socket: listener,
        listener: kafka,
        sasl,
        reauth,
        tls,
    } = endpoint;
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut failures = 0u64;
    let mut full_since: Option<tokio::time::Instant> = None;
    loop {
        // At `max_connections`, stop accepting (as Kafka's acceptor does) until one
        // closes: new connections wait in the listen backlog.
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if full_since.is_none() {
                    tracing::warn!(
                        max_connections = settings.max_connections,
                        "connection limit reached; new connections wait until one closes"
                    );
                    full_since = Some(crate::clock::instant());
                }
                tokio::select! {
                    s = Arc::clone(&slots).acquire_owned() => match s {
                        Ok(slot) => slot,
                        Err(_) => return Stopped::Failed("connection slots closed".to_string()),
                    },
                    _ = broker.shutdown().cancelled() => return Stopped::Shutdown,
                }
            }
        };
        if let Some(since) = full_since.take() {
            tracing::info!(
                waited_ms = since.elapsed().as_millis() as u64,
                "accepting connections again: below the connection limit"
            );
        }
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = broker.shutdown().cancelled() => return Stopped::Shutdown,
        };
        match accepted {
            Ok((stream, peer)) => {
                if failures > 0 {
                    tracing::info!(failures, "accepting connections again");
                    failures = 0;
                    backoff = ACCEPT_BACKOFF_MIN;
                }
                // Past the address's limit, closed at once (as Kafka's acceptor does);
                // the connection slot goes back with it.
                let address_slot = match per_address.admit(peer.ip()) {
                    Ok(s) => s,
                    Err(limit) => {
                        crate::metrics::connection_refused("max_connections_per_ip");
                        if let Some(left_out) = REFUSED_BY_ADDRESS.allow() {
                            tracing::warn!(%peer, limit, left_out, "connection refused: its address holds max_connections_per_ip connections");
                        }
                        drop(stream);
                        continue;
                    }
                };
                // Past its address's connection_creation_rate quota (KIP-612): closed.
                if !broker.quotas().admit_connection(peer.ip()) {
                    crate::metrics::connection_refused("connection_creation_rate");
                    if let Some(left_out) = REFUSED_BY_ADDRESS.allow() {
                        tracing::warn!(%peer, left_out, "connection refused: its address is over its connection_creation_rate quota");
                    }
                    drop(stream);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let broker = Arc::clone(&broker);
                let memory = memory.clone();
                let info = ConnectionInfo::new(Arc::clone(&kafka), peer);
                let session = Session::new(sasl.clone(), reauth);
                tracing::debug!(%peer, "connection accepted");
                let counted = crate::metrics::connection_opened();
                let tls = tls.clone();
                tasks.spawn("kafka connection", async move {
                    let _slot = slot;
                    let _address_slot = address_slot;
                    let _counted = counted;
                    let outcome = match tls {
                        None => {
                            let (reader, writer) = stream.into_split();
                            connection(reader, writer, broker, info, session, memory).await
                        }
                        Some(tls) => secured(&tls, stream, broker, info, session, memory).await,
                    };
                    match outcome {
                        Ok(()) => {}
                        Err(e @ (ConnectionError::Io(_) | ConnectionError::Idle { .. })) => tracing::debug!(%peer, error = %e, "connection closed"),
                        Err(ConnectionError::Unauthenticated(why)) => tracing::info!(%peer, reason = %why, "closed an unauthenticated connection"),
                        Err(e @ ConnectionError::Http) => tracing::debug!(%peer, error = %e, "answered with the HTTP API's address, closed"),
                        Err(ConnectionError::Tls(e)) => {
                            if let Some(left_out) = FAILED_HANDSHAKES.allow() {
                                tracing::info!(%peer, error = %e, left_out, "closed a connection whose TLS handshake failed");
                            }
                        }
                        Err(e @ ConnectionError::Encode(_)) => tracing::error!(%peer, error = %e, "connection closed"),
                        Err(e) => {
                            if let Some(left_out) = BAD_CONNECTIONS.allow() {
                                tracing::warn!(%peer, error = %e, left_out, "closed connection after a bad request");
                            }
                        }
                    }
                    Stopped::Done("the connection closed")
                });
            }
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(error = %e, "accept failed; retrying with backoff until it works");
                }
                failures += 1;
                tokio::select! {
                    _ = crate::clock::pause(backoff) => {}
                    _ = broker.shutdown().cancelled() => return Stopped::Shutdown,
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

/// The first bytes of an HTTP request, as they arrive where a Kafka frame's size is
/// expected.
const HTTP_METHODS: [&[u8; 4]; 7] = [
    b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"PATC", b"OPTI",
];

/// What a client speaking HTTP to the Kafka listener is told, before it is closed.
fn http_hint(http: std::net::SocketAddr) -> Bytes {
    let at = if http.ip().is_unspecified() {
        format!("on port {} of this host", http.port())
    } else {
        format!("at http://{http}/")
    };
    let text = format!(
        "This is strata's Kafka listener, for Kafka clients. Its HTTP API is {at} \
         (docs/http.md).\n"
    );
    Bytes::from(format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{text}",
        text.len()
    ))
}

/// A reply on its way, with what is needed to frame it.
struct Pending {
    correlation_id: i32,
    api_key: ApiKey,
    version: i16,
    reply: Reply,
}

/// What the writer sends, in order: replies, or bytes as they are.
enum Outgoing {
    Reply(Pending),
    Raw(Bytes),
}

/// Why a connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("frame of {0} bytes is outside the allowed size")]
    FrameSize(i64),
    #[error("no request for {idle_ms} ms (connections_max_idle_ms)")]
    Idle { idle_ms: u64 },
    #[error("a frame of {size} bytes did not arrive within {timeout_ms} ms")]
    FrameTimeout { size: usize, timeout_ms: u64 },
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    #[error("unsupported version {version} of {api:?}")]
    UnsupportedVersion { api: ApiKey, version: i16 },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("{0}")]
    Unauthenticated(String),
    /// An HTTP request (curl pointed at the Kafka port): answered with a hint.
    #[error("an HTTP request on the Kafka listener")]
    Http,
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("cannot encode response: {0}")]
    Encode(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Runs the TLS handshake, then the connection inside it. On an SSL listener the
/// principal is the client certificate's.
async fn secured(
    tls: &Tls,
    stream: TcpStream,
    broker: Arc<Broker>,
    mut info: ConnectionInfo,
    session: Session,
    memory: RequestMemory,
) -> Result<(), ConnectionError> {
    let timeout = Duration::from_millis(broker.settings().request_read_timeout_ms);
    let sasl = info.listener.security_protocol.is_sasl();
    let accepted = tls.accept(stream, sasl, timeout).await;
    crate::metrics::tls_handshake(if accepted.is_ok() { "ok" } else { "failed" });
    let (stream, principal) = accepted?;
    if let Some(principal) = principal {
        info.principal = principal;
    }
    let (reader, writer) = tokio::io::split(stream);
    connection(reader, writer, broker, info, session, memory).await
}

async fn connection<R, W>(
    mut reader: R,
    writer: W,
    broker: Arc<Broker>,
    mut info: ConnectionInfo,
    mut session: Session,
    memory: RequestMemory,
) -> Result<(), ConnectionError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Outgoing>(MAX_IN_FLIGHT);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let writing = tokio::spawn(write_replies(
        rx,
        writer,
        Arc::clone(&in_flight),
        Arc::clone(&memory.frames),
    ));
    let settings = broker.settings();
    let limits = FrameLimits {
        max_bytes: settings.max_request_bytes,
        timeout: Duration::from_millis(settings.request_read_timeout_ms),
    };
    let idle = Duration::from_millis(settings.connections_max_idle_ms);
    let request_timeout = Duration::from_millis(settings.request_timeout_ms);
    let mut shared = Arc::new(info.clone());
    // Not read from while its client is throttled by a quota (KIP-219).
    let mute = crate::quota::edge::Mute::default();
    let read_outcome = loop {
        // Idle: no byte of a new request for `idle`, and no reply still on its way.
        // The size is read with a cancel-safe read, so giving up on it loses nothing.
        if let Some(until) = mute.muted_until() {
            tokio::select! {
                _ = crate::clock::pause_until(until) => {}
                _ = broker.shutdown().cancelled() => break Ok(()),
            }
        }
        // Until a SASL connection has authenticated, its frames are capped far lower
        // (Kafka's `sasl.server.max.receive.size`).
        let unauthenticated = session.unauthenticated();
        let limits = if unauthenticated {
            FrameLimits {
                max_bytes: limits
                    .max_bytes
                    .min(settings.sasl_server_max_receive_size as usize),
                ..limits
            }
        } else {
            limits
        };
        let next = async {
            let mut size = BytesMut::with_capacity(4);
            while size.len() < 4 {
                let want = 4 - size.len() as u64;
                // Once a frame has begun, the rest of its size is due within the read
                // timeout, as its body is.
                let wait = if size.is_empty() {
                    idle
                } else {
                    limits.timeout
                };
                match tokio::time::timeout(wait, (&mut reader).take(want).read_buf(&mut size)).await
                {
                    Ok(Ok(0)) if size.is_empty() => return Ok(None),
                    Ok(Ok(0)) => {
                        return Err(ConnectionError::Io(
                            std::io::ErrorKind::UnexpectedEof.into(),
                        ));
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(e.into()),
                    Err(_) if !size.is_empty() => {
                        return Err(ConnectionError::FrameTimeout {
                            size: 4,
                            timeout_ms: wait.as_millis() as u64,
                        });
                    }
                    Err(_) if in_flight.load(Ordering::Acquire) == 0 => {
                        return Err(ConnectionError::Idle {
                            idle_ms: idle.as_millis() as u64,
                        });
                    }
                    // Replies are still on their way: not idle.
                    Err(_) => {}
                }
            }
            if HTTP_METHODS.iter().any(|m| size[..] == m[..]) {
                return Err(ConnectionError::Http);
            }
            let size = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
            read_body(&mut reader, size, limits, &memory)
                .await
                .map(Some)
        };
        let frame = tokio::select! {
            f = next => f,
            _ = broker.shutdown().cancelled() => break Ok(()),
        };
        let (frame, reserved) = match frame {
            Ok(Some(f)) => f,
            Ok(None) => break Ok(()),
            Err(ConnectionError::FrameSize(size))
                if unauthenticated && size > limits.max_bytes as i64 =>
            {
                break Err(ConnectionError::Unauthenticated(format!(
                    "a request of {size} bytes before authentication, above \
                     sasl_server_max_receive_size ({})",
                    limits.max_bytes
                )));
            }
            Err(ConnectionError::Http) => {
                let hint = http_hint(settings.http_listen);
                // Said, then closed (as Kafka closes a bad frame, silently).
                tx.send(Outgoing::Raw(hint)).await.ok();
                break Err(ConnectionError::Http);
            }
            Err(e) => break Err(e),
        };
        let mut close_after = false;
        let frame_bytes = frame.len();
        let pending = match parse_request(frame) {
            Ok(Parsed::Request { header, request }) => {
                if matches!(*request, RequestKind::ApiVersions(_)) {
                    info.learn(&request);
                    shared = Arc::new(info.clone());
                }
                let api = ApiKey::try_from(header.request_api_key).unwrap_or(ApiKey::ApiVersions);
                let (verdict, authenticated) = session
                    .check(
                        api,
                        &request,
                        header.request_api_version,
                        info.peer.ip(),
                        crate::clock::instant(),
                    )
                    .await;
                if let Some(principal) = authenticated {
                    info.principal = principal;
                    shared = Arc::new(info.clone());
                }
                match verdict {
                    Verdict::Pass => {
                        let arrived = Arrived {
                            header,
                            request: *request,
                            frame_bytes,
                        };
                        handle(&broker, &shared, arrived, request_timeout, &mute).await
                    }
                    Verdict::Answer {
                        response,
                        delay,
                        close,
                    } => {
                        close_after = close;
                        Ok(answer_now(&header, api, response, delay))
                    }
                    Verdict::Close(why) => Err(ConnectionError::Unauthenticated(why)),
                }
            }
            Ok(Parsed::UnknownApiVersions { correlation_id }) => {
                Ok(unknown_api_versions(correlation_id))
            }
            Err(e) => Err(e),
        };
        // The handler has taken what it needs of the frame (produce appended it).
        drop(reserved);
        let pending = match pending {
            Ok(p) => p,
            Err(e) => break Err(e),
        };
        in_flight.fetch_add(1, Ordering::AcqRel);
        if tx.send(Outgoing::Reply(pending)).await.is_err() || close_after {
            break Ok(());
        }
    };
    // Let the replies already in flight finish, then close.
    drop(tx);
    let write_outcome = writing.await.unwrap_or(Ok(()));
    read_outcome.and(write_outcome)
}

/// How large a request frame may be, and how long its body may take to arrive.
#[derive(Debug, Clone, Copy)]
pub struct FrameLimits {
    pub max_bytes: usize,
    pub timeout: Duration,
}

/// Reads one size-prefixed frame; `None` at a clean end of stream. The declared size is
/// reserved in `memory` first (waiting while other connections hold the budget), and
/// the frame must then arrive within `limits.timeout`; the reservation comes back with
/// the frame, to be dropped once the request is handled.
pub async fn read_frame(
    reader: &mut (impl AsyncReadExt + Unpin),
    limits: FrameLimits,
    memory: &RequestMemory,
) -> Result<Option<(Bytes, Reserved)>, ConnectionError> {
    let mut size = [0u8; 4];
    match reader.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    read_body(reader, i32::from_be_bytes(size), limits, memory)
        .await
        .map(Some)
}

/// Reads the body of a frame whose size prefix declared `size`, as [`read_frame`].
async fn read_body(
    reader: &mut (impl AsyncReadExt + Unpin),
    size: i32,
    limits: FrameLimits,
    memory: &RequestMemory,
) -> Result<(Bytes, Reserved), ConnectionError> {
    // api key, api version and correlation id at the least.
    if size < 8 || size as usize > limits.max_bytes {
        return Err(ConnectionError::FrameSize(i64::from(size)));
    }
    let size = size as usize;
    let timed_out = || ConnectionError::FrameTimeout {
        size,
        timeout_ms: limits.timeout.as_millis() as u64,
    };
    let deadline = crate::clock::instant() + limits.timeout;
    // One reservation for the frame and its copies (never more than the whole budget,
    // so the largest frame allowed always fits): a second one taken while holding the
    // first could wait for ever on other connections doing the same.
    let footprint = size.saturating_mul(FRAME_COPIES).min(memory.capacity);
    let reserved = tokio::time::timeout_at(deadline, memory.reserve(footprint))
        .await
        .map_err(|_| timed_out())?
        .ok_or(ConnectionError::FrameSize(size as i64))?;
    // The whole frame is reserved: its buffer is allocated once, at its size (grown by
    // doubling it would hold up to twice that, and copy itself as it grew), or taken
    // from the pool. Memory is only touched as the bytes arrive.
    let mut buf = memory.frames.take(size);
    let body = async {
        while buf.len() < size {
            let want = (size - buf.len()) as u64;
            let n = (&mut *reader).take(want).read_buf(&mut buf).await?;
            if n == 0 {
                return Err(ConnectionError::Io(
                    std::io::ErrorKind::UnexpectedEof.into(),
                ));
            }
        }
        Ok(())
    };
    tokio::time::timeout_at(deadline, body)
        .await
        .map_err(|_| timed_out())??;
    Ok((memory.frames.bytes(buf), reserved))
}

/// A request frame, decoded.
#[derive(Debug)]
pub enum Parsed {
    Request {
        header: RequestHeader,
        request: Box<RequestKind>,
    },
    /// An ApiVersions request of a version we do not know (KIP-511).
    UnknownApiVersions { correlation_id: i32 },
}

/// Decodes one request frame (without its size prefix). Total: any bytes give either a
/// request or the reason to close the connection, never a panic.
pub fn parse_request(mut frame: Bytes) -> Result<Parsed, ConnectionError> {
    if frame.len() < 8 {
        return Err(ConnectionError::FrameSize(frame.len() as i64));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api = ApiKey::try_from(raw_key).map_err(|_| ConnectionError::UnknownApi(raw_key))?;
    if !versions::is_supported(api, version) {
        if api == ApiKey::ApiVersions {
            return Ok(Parsed::UnknownApiVersions { correlation_id });
        }
        return Err(ConnectionError::UnsupportedVersion { api, version });
    }
    let malformed = |reason: String| ConnectionError::Malformed {
        api,
        version,
        reason,
    };
    let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
        .map_err(|e| malformed(format!("header: {e:#}")))?;
    let request =
        RequestKind::decode(api, &mut frame, version).map_err(|e| malformed(format!("{e:#}")))?;
    if frame.has_remaining() {
        // Kafka ignores what follows a complete body, and librdkafka 2.16 sends Metadata
        // v12 with three such bytes; so do we.
        tracing::debug!(
            ?api,
            version,
            extra_bytes = frame.remaining(),
            "ignoring bytes after the request body"
        );
    }
    Ok(Parsed::Request {
        header,
        request: Box::new(request),
    })
}

/// KIP-511: an ApiVersions request of a version we do not know is answered in v0 with
/// the versions we support, so the client can retry.
fn unknown_api_versions(correlation_id: i32) -> Pending {
    let response = versions::api_versions(ResponseError::UnsupportedVersion.code());
    Pending {
        correlation_id,
        api_key: ApiKey::ApiVersions,
        version: 0,
        reply: Box::pin(async move { Some(response.into()) }),
    }
}

/// An answer the connection gives itself (the SASL exchange), after `delay`.
fn answer_now(
    header: &RequestHeader,
    api: ApiKey,
    response: Box<ResponseKind>,
    delay: Duration,
) -> Pending {
    Pending {
        correlation_id: header.correlation_id,
        api_key: api,
        version: header.request_api_version,
        reply: Box::pin(async move {
            if !delay.is_zero() {
                crate::clock::pause(delay).await;
            }
            Some(*response)
        }),
    }
}

/// A decoded request, as it arrived.
struct Arrived {
    header: RequestHeader,
    request: RequestKind,
    frame_bytes: usize,
}

/// Starts handling a decoded request, in its context; its client's quotas are metered
/// from its arrival to its answer (`quota::edge`), which may mute the connection.
async fn handle(
    broker: &Arc<Broker>,
    connection: &Arc<ConnectionInfo>,
    arrived: Arrived,
    request_timeout: Duration,
    mute: &crate::quota::edge::Mute,
) -> Result<Pending, ConnectionError> {
    let Arrived {
        header,
        request,
        frame_bytes,
    } = arrived;
    let api = ApiKey::try_from(header.request_api_key)
        .map_err(|_| ConnectionError::UnknownApi(header.request_api_key))?;
    let ctx = RequestContext::new(
        Arc::clone(connection),
        &header,
        api,
        &request,
        request_timeout,
    );
    let metered = crate::quota::edge::meter(broker.quotas(), &ctx, &request, frame_bytes, mute);
    let arrived = crate::clock::instant();
    let reply = api::dispatch(broker, &ctx, request)
        .await
        .ok_or(ConnectionError::UnknownApi(api as i16))?;
    let dispatched = arrived.elapsed();
    let (correlation_id, version) = (header.correlation_id, header.request_api_version);
    let client_id = tracing::enabled!(tracing::Level::DEBUG).then(|| ctx.client_id.clone());
    let reply = async move {
        let (mut response, busy) = crate::quota::edge::Timed::new(reply, dispatched).await;
        if let Some(metered) = metered {
            metered.answer(response.as_mut(), busy);
        }
        let took = arrived.elapsed();
        crate::metrics::request_done(api, took, response.as_ref());
        tracing::debug!(
            api = ?api,
            version,
            correlation_id,
            client_id = client_id.as_deref().unwrap_or(""),
            took_us = took.as_micros() as u64,
            "request"
        );
        response
    }
    .boxed();
    Ok(Pending {
        correlation_id: header.correlation_id,
        api_key: api,
        version: header.request_api_version,
        reply,
    })
}

/// One item of the writer's queue, once ready. (A reply is as large as it was before
/// there were raw bytes; boxing it would cost an allocation per reply.)
#[allow(clippy::large_enum_variant)]
enum Written {
    Reply((i32, ApiKey, i16), Option<ResponseKind>),
    Raw(Bytes),
}

/// Awaits replies in request order and writes them.
async fn write_replies<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<Outgoing>,
    mut writer: W,
    unanswered: Arc<AtomicUsize>,
    buffers: Arc<BufferPool>,
) -> Result<(), ConnectionError> {
    let mut in_flight = FuturesOrdered::new();
    let mut open = true;
    while open || !in_flight.is_empty() {
        tokio::select! {
            biased;
            Some(out) = in_flight.next(), if !in_flight.is_empty() => {
                match out {
                    Written::Reply(p, reply) => {
                        let p: (i32, ApiKey, i16) = p;
                        if let Some(response) = reply {
                            let records = spliceable(&response);
                            let spliced: usize = records.iter().map(Bytes::len).sum();
                            let size = 64 + known_size(&response, p.2).saturating_sub(spliced);
                            let frame = encode_into(buffers.take(size), records, p.0, p.1, p.2, &response)?;
                            crate::frame::write(&mut writer, &frame).await?;
                            buffers.give_back(Vec::from(frame.into_inline()));
                        }
                        unanswered.fetch_sub(1, Ordering::AcqRel);
                    }
                    Written::Raw(bytes) => writer.write_all(&bytes).await?,
                }
            }
            next = rx.recv(), if open => match next {
                Some(Outgoing::Reply(pending)) => {
                    let Pending { correlation_id, api_key, version, reply } = pending;
                    // (No box: a reply is the hot path; the raw bytes are not.)
                    in_flight.push_back(futures::future::Either::Left(async move {
                        Written::Reply((correlation_id, api_key, version), reply.await)
                    }));
                }
                Some(Outgoing::Raw(bytes)) => {
                    in_flight.push_back(futures::future::Either::Right(
                        futures::future::ready(Written::Raw(bytes)),
                    ));
                }
                None => open = false,
            },
        }
    }
    writer.shutdown().await.ok();
    Ok(())
}

/// The encoded size of a fetch answer (the large ones), computed before encoding so
/// that its buffer is taken or allocated once at that size, not grown by doubling and
/// copied as it grows; 0 for other answers.
fn known_size(response: &ResponseKind, version: i16) -> usize {
    match response {
        ResponseKind::Fetch(f) => f.compute_size(version).unwrap_or(0),
        _ => 0,
    }
}

/// The records of a fetch answer large enough to be sent from their read buffers
/// rather than copied into the frame ([`crate::frame`]).
fn spliceable(response: &ResponseKind) -> Vec<Bytes> {
    let ResponseKind::Fetch(f) = response else {
        return Vec::new();
    };
    (f.responses.iter())
        .flat_map(|t| t.partitions.iter())
        .filter_map(|p| p.records.clone())
        .filter(|r| r.len() >= crate::frame::SPLICED_MIN)
        .collect()
}

/// Encodes a response frame into `buf` (emptied; a pooled buffer, for large answers),
/// with `records` (some of the answer's) spliced in by reference.
fn encode_into(
    buf: Vec<u8>,
    records: Vec<Bytes>,
    correlation_id: i32,
    api: ApiKey,
    version: i16,
    response: &ResponseKind,
) -> Result<Frame, ConnectionError> {
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let spliced: usize = records.iter().map(Bytes::len).sum();
    let body = known_size(response, version).saturating_sub(spliced);
    // Through `Bytes`: a unique buffer becomes a `BytesMut` without a copy.
    let mut inline = BytesMut::from(Bytes::from(buf));
    inline.clear();
    inline.reserve(64 + body);
    let mut buf = Frame::new(inline, records);
    buf.put_i32(0);
    header
        .encode(&mut buf, api.response_header_version(version))
        .map_err(|e| ConnectionError::Encode(format!("{e:#}")))?;
    // Only a fetch answer's encoder sees the frame itself (its records are spliced);
    // the others write into its buffer.
    match response {
        ResponseKind::Fetch(f) => f.encode(&mut buf, version),
        other => other.encode(buf.inline_buf(), version),
    }
    .map_err(|e| ConnectionError::Encode(format!("{api:?} v{version}: {e:#}")))?;
    let size = (buf.len() - 4) as i32;
    buf.inline_mut()[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{MetadataRequest, ProduceRequest, produce_request};
    use kafka_protocol::protocol::Request;
    use proptest::prelude::*;

    fn frame<R: Request>(version: i16, request: &R) -> Vec<u8> {
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = 1;
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, R::header_version(version))
            .expect("header");
        request.encode(&mut buf, version).expect("body");
        buf.to_vec()
    }

    fn produce_frame(version: i16) -> Vec<u8> {
        let mut p = produce_request::PartitionProduceData::default();
        p.records = Some(Bytes::from_static(&[0u8; 70]));
        let mut t = produce_request::TopicProduceData::default();
        t.name = kafka_protocol::messages::TopicName(
            kafka_protocol::protocol::StrBytes::from_static_str("t"),
        );
        t.partition_data = vec![p];
        let mut r = ProduceRequest::default();
        r.acks = -1;
        r.topic_data = vec![t];
        frame(version, &r)
    }

    #[test]
    fn valid_frames_parse() {
        for v in 3..=9 {
            assert!(
                matches!(
                    parse_request(Bytes::from(produce_frame(v))),
                    Ok(Parsed::Request { .. })
                ),
                "v{v}"
            );
        }
        for v in 0..=12 {
            let mut m = MetadataRequest::default();
            m.topics = Some(vec![]);
            assert!(
                matches!(
                    parse_request(Bytes::from(frame(v, &m))),
                    Ok(Parsed::Request { .. })
                ),
                "v{v}"
            );
        }
    }

    proptest! {
        /// Any bytes at all: a request or a reason to close, never a panic.
        #[test]
        fn arbitrary_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_request(Bytes::from(bytes));
        }

        /// Frames that start as valid requests and are then damaged.
        #[test]
        fn damaged_requests_never_panic(
            version in 3i16..=9,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
        ) {
            let mut f = produce_frame(version);
            for (at, byte) in edits {
                let i = at % f.len();
                f[i] = byte;
            }
            let keep = 8 + cut % (f.len() - 7);
            f.truncate(keep);
            let _ = parse_request(Bytes::from(f));
        }
    }

    fn limits(timeout_ms: u64) -> FrameLimits {
        FrameLimits {
            max_bytes: 1 << 20,
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    /// A large frame's buffer is reused for the next large frame once every `Bytes`
    /// pointing into it is gone, and only then; small frames are not pooled.
    #[tokio::test]
    async fn large_frames_reuse_the_buffers_of_finished_ones() {
        let memory = RequestMemory::new(64 << 20);
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        let size = 200_000usize;
        let mut read = async |fill: u8| {
            let mut frame = (size as i32).to_be_bytes().to_vec();
            frame.extend(std::iter::repeat_n(fill, size));
            client.write_all(&frame).await.expect("frame");
            let (bytes, _reserved) = read_frame(&mut server, limits(5000), &memory)
                .await
                .expect("read")
                .expect("a frame");
            assert_eq!(bytes.len(), size);
            assert!(bytes.iter().all(|&b| b == fill), "the frame's own bytes");
            bytes
        };
        let first = read(1).await;
        let at = first.as_ptr();
        let slice = first.slice(10..20);
        drop(first);
        let second = read(2).await;
        assert_ne!(
            second.as_ptr(),
            at,
            "a slice still points into the first buffer"
        );
        assert_eq!(slice, vec![1u8; 10]);
        drop(slice);
        let second_at = second.as_ptr();
        drop(second);
        let third = read(3).await;
        assert!(
            third.as_ptr() == at || third.as_ptr() == second_at,
            "the third frame is read into a buffer given back"
        );
    }

    /// A response is encoded into the buffer it is given (a pooled one), and a fetch
    /// answer's buffer is sized once.
    #[test]
    fn responses_are_encoded_into_the_buffer_given() {
        let mut fetch = kafka_protocol::messages::FetchResponse::default();
        let mut partition = kafka_protocol::messages::fetch_response::PartitionData::default();
        partition.records = Some(Bytes::from(vec![7u8; 300_000]));
        let mut topic = kafka_protocol::messages::fetch_response::FetchableTopicResponse::default();
        topic.partitions = vec![partition];
        fetch.responses = vec![topic];
        let response = ResponseKind::Fetch(fetch);
        let given = Vec::with_capacity(1 << 20);
        let at = given.as_ptr();
        let copied = encode_into(given, Vec::new(), 9, ApiKey::Fetch, 12, &response);
        let frame = copied.expect("encode");
        assert_eq!(frame.into_inline().as_ptr(), at, "encoded in place");
        let copied = encode_into(Vec::new(), Vec::new(), 9, ApiKey::Fetch, 12, &response);
        let fresh = copied.expect("encode").into_inline();
        assert!(
            fresh.capacity() < fresh.len() + 4096,
            "sized once: {}",
            fresh.capacity()
        );

        // The records spliced in by reference: the same bytes, and a small buffer.
        let records = spliceable(&response);
        assert_eq!(records.len(), 1);
        let spliced = encode_into(Vec::new(), records, 9, ApiKey::Fetch, 12, &response);
        let spliced = spliced.expect("encode");
        assert_eq!(spliced.to_vec(), fresh.to_vec(), "the frame reads the same");
        let inline = spliced.into_inline();
        assert!(inline.len() < 100, "records not copied: {}", inline.len());
    }

    /// A frame whose size arrives but whose body stalls is dropped once the read
    /// timeout passes, and gives its reservation back.
    #[tokio::test]
    async fn a_stalled_frame_is_dropped_in_time() {
        let memory = RequestMemory::new(10_000);
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        client
            .write_all(&1000i32.to_be_bytes())
            .await
            .expect("size");
        client
            .write_all(&[0u8; 10])
            .await
            .expect("part of the body");
        let started = crate::clock::instant();
        let outcome = read_frame(&mut server, limits(200), &memory).await;
        assert!(
            matches!(
                outcome,
                Err(ConnectionError::FrameTimeout { size: 1000, .. })
            ),
            "{outcome:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(memory.available(), 10_000);
    }

    /// Frames reserve their declared size (times [`FRAME_COPIES`]) from the agent's
    /// budget before their body is read: while one holds it, another that does not fit
    /// waits (and times out), and goes through once the first is handled.
    #[tokio::test]
    async fn frames_wait_for_the_request_budget() {
        let budget = 1000 * FRAME_COPIES;
        let memory = RequestMemory::new(budget);
        let frame = |n: usize| {
            let mut f = (n as i32).to_be_bytes().to_vec();
            f.extend(std::iter::repeat_n(7u8, n));
            f
        };
        let (mut c1, mut s1) = tokio::io::duplex(1 << 16);
        c1.write_all(&frame(800)).await.expect("write");
        let (body, held) = read_frame(&mut s1, limits(200), &memory)
            .await
            .expect("read")
            .expect("a frame");
        assert_eq!(body.len(), 800);
        assert_eq!(memory.available(), 200 * FRAME_COPIES);

        let (mut c2, mut s2) = tokio::io::duplex(1 << 16);
        c2.write_all(&frame(500)).await.expect("write");
        let waited = read_frame(&mut s2, limits(200), &memory).await;
        assert!(
            matches!(waited, Err(ConnectionError::FrameTimeout { size: 500, .. })),
            "{waited:?}"
        );
        // One waiting for room does not hold up a smaller one that fits.
        let (mut c3, mut s3) = tokio::io::duplex(1 << 16);
        c3.write_all(&frame(500)).await.expect("write");
        let waiting = tokio::spawn({
            let memory = memory.clone();
            async move {
                read_frame(&mut s3, limits(5_000), &memory)
                    .await
                    .map(|f| f.map(|(body, _)| body.len()))
            }
        });
        let (mut c4, mut s4) = tokio::io::duplex(1 << 16);
        c4.write_all(&frame(100)).await.expect("write");
        let (small, small_held) = read_frame(&mut s4, limits(200), &memory)
            .await
            .expect("a small frame goes past a waiting large one")
            .expect("a frame");
        assert_eq!(small.len(), 100);
        drop(small_held);
        assert!(!waiting.is_finished());
        drop(held);
        let got = waiting.await.expect("task").expect("read");
        assert_eq!(got, Some(500));
        assert_eq!(memory.available(), budget);
    }

    /// A tiny frame declaring an enormous array is refused before anything is
    /// allocated (the vendored kafka-protocol fix; upstream would abort the process).
    #[test]
    fn huge_declared_array_is_refused() {
        for len in [0x033c_0c00u32, 0x7fff_ffff] {
            let mut f = vec![0, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
            f.extend_from_slice(&len.to_be_bytes());
            assert!(matches!(
                parse_request(Bytes::from(f)),
                Err(ConnectionError::Malformed { .. })
            ));
        }
    }
}
