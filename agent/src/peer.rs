//! A connection to another agent's Kafka listener, for the requests agents send each
//! other: a follower's fetches (`fetcher.rs`) and the transaction coordinator's markers
//! (`txn/markers.rs`). Requests are ordinary Kafka requests, encoded and decoded by the
//! `kafka-protocol` crate.
//!
//! Agents reach each other on the inter-agent listener ([`PeerAccess`], Kafka's
//! `inter.broker.listener.name`). When that listener is SSL or SASL_SSL, each connection
//! is TLS first, the other agent's certificate verified (`tls/mod.rs`). When it is
//! SASL_PLAINTEXT or SASL_SSL, each connection authenticates first (SaslHandshake,
//! SaslAuthenticate with PLAIN or SCRAM, the server's SCRAM signature checked too), so
//! the agents act as their own principal: the one operators name in `super_users`, and
//! the only one an authorizer lets fetch as a replica (CLUSTER_ACTION). On SSL that
//! principal is the agent certificate's, mapped as a client's is.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::{
    ApiVersionsRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::tls::Tls;

/// Any single response; a fetch waits at most its own `max_wait_ms` at the leader.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes a response may hold besides the records (headers, topic and partition fields).
const RESPONSE_OVERHEAD_BYTES: usize = 1024 * 1024;

/// How agents reach each other: the listener, the credentials when it is a SASL one,
/// and the agent's TLS files when it is a TLS one.
#[derive(Debug, Clone)]
pub struct PeerAccess {
    /// The listener's name (`PLAINTEXT`, the one at `kafka_listen`, by default).
    pub listener: String,
    pub sasl: Option<PeerCredentials>,
    pub tls: Option<Arc<Tls>>,
}

impl Default for PeerAccess {
    fn default() -> PeerAccess {
        PeerAccess {
            listener: "PLAINTEXT".to_string(),
            sasl: None,
            tls: None,
        }
    }
}

impl PeerAccess {
    /// Stores the agents' own SCRAM credential in the metastore if their user has none
    /// for the mechanism yet (for PLAIN, a SCRAM-SHA-512 one, which PLAIN is checked
    /// against), so a cluster on a SASL inter-agent listener starts with nothing set
    /// up by hand, as Kafka's `kafka-storage format --add-scram` does. An existing
    /// credential is never replaced: an agent configured with a wrong password cannot
    /// reset the right one, and fails to authenticate instead.
    pub async fn seed_credential(
        &self,
        metastore: &strata_metastore::Metastore,
    ) -> anyhow::Result<()> {
        use crate::sasl::Mechanism;
        use crate::sasl::scram::{MIN_ITERATIONS, ScramHash};
        let Some(credentials) = &self.sasl else {
            return Ok(());
        };
        let hash = match credentials.mechanism {
            Mechanism::Scram(h) => h,
            Mechanism::Plain => ScramHash::Sha512,
            Mechanism::OAuthBearer => return Ok(()),
        };
        let mut salt = [0u8; 32];
        aws_lc_rs::rand::fill(&mut salt).context("no random salt")?;
        let salted = hash.salted_password(credentials.password.as_bytes(), &salt, MIN_ITERATIONS);
        let credential = hash.credential_from_salted(&salted, &salt, MIN_ITERATIONS);
        let user = credentials.username.clone();
        let mechanism = hash.mechanism().to_string();
        metastore
            .alter_user_credentials(vec![user.clone()], move |users| {
                if let Some(u) = users.get_mut(&user) {
                    u.mechanisms
                        .entry(mechanism.clone())
                        .or_insert_with(|| credential.clone());
                }
                Ok(())
            })
            .await
            .context("cannot store the agents' own SCRAM credential")
    }
}

/// Another agent refused this one's credentials (or could not be authenticated to):
/// worth an operator's attention, unlike a peer that is merely unreachable.
#[derive(Debug, thiserror::Error)]
#[error("cannot authenticate to {address} on listener {listener} as {user}: {reason}")]
pub struct AuthenticationFailed {
    pub address: String,
    pub listener: String,
    pub user: String,
    pub reason: String,
}

/// The agents' own SASL credentials.
#[derive(Clone)]
pub struct PeerCredentials {
    pub mechanism: crate::sasl::Mechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for PeerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCredentials")
            .field("mechanism", &self.mechanism.name())
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// A connection's bytes, in the clear or over TLS.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// One connection to another agent's Kafka listener.
pub(crate) struct Peer {
    stream: Box<dyn Stream>,
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
        access: &PeerAccess,
    ) -> anyhow::Result<Peer> {
        let stream = tokio::time::timeout(RESPONSE_TIMEOUT, TcpStream::connect(address))
            .await
            .context("connect timed out")??;
        stream.set_nodelay(true)?;
        let refused = |reason: String| {
            anyhow::Error::new(AuthenticationFailed {
                address: address.to_string(),
                listener: access.listener.clone(),
                user: access
                    .sasl
                    .as_ref()
                    .map_or("the agent's certificate".to_string(), |c| {
                        c.username.clone()
                    }),
                reason,
            })
        };
        let stream: Box<dyn Stream> = match &access.tls {
            None => Box::new(stream),
            Some(tls) => {
                let host = host_of(address);
                let handshake = tokio::time::timeout(RESPONSE_TIMEOUT, tls.connect(stream, host))
                    .await
                    .context("TLS handshake timed out")?;
                Box::new(handshake.map_err(|e| refused(format!("TLS: {e:#}")))?)
            }
        };
        let mut peer = Peer {
            stream,
            correlation_id: 0,
            client_id: StrBytes::from_string(format!("strata-replica-{node_id}")),
            max_frame_bytes: max_record_bytes + RESPONSE_OVERHEAD_BYTES,
        };
        match &access.sasl {
            Some(credentials) => {
                if let Err(e) = peer.authenticate(credentials).await {
                    return Err(refused(format!("{e:#}")));
                }
            }
            // In TLS 1.3 the server checks the client's certificate after the client
            // has finished its handshake: a refusal arrives as an alert on the first
            // read. One ApiVersions exchange (which Kafka's clients start with too)
            // brings it out here, as the authentication failure it is.
            None if access.tls.is_some() => {
                if let Err(e) = peer.send(0, &ApiVersionsRequest::default()).await {
                    if tls_refusal(&e) {
                        return Err(refused(format!("TLS: {e:#}")));
                    }
                    return Err(e);
                }
            }
            None => {}
        }
        Ok(peer)
    }

    /// The SASL exchange, as a Kafka client runs it: SaslHandshake v1, then
    /// SaslAuthenticate v2 with the mechanism's messages.
    async fn authenticate(&mut self, credentials: &PeerCredentials) -> anyhow::Result<()> {
        use crate::sasl::Mechanism;
        let mechanism = credentials.mechanism;
        let mut handshake = SaslHandshakeRequest::default();
        handshake.mechanism = StrBytes::from_static_str(mechanism.name());
        let r = self.send(1, &handshake).await?;
        if r.error_code != 0 {
            let offered: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
            bail!(
                "the listener does not offer {} (it offers {})",
                mechanism.name(),
                offered.join(", ")
            );
        }
        match mechanism {
            Mechanism::Plain => {
                let message = format!("\0{}\0{}", credentials.username, credentials.password);
                self.sasl_step(message.into_bytes()).await?;
            }
            Mechanism::Scram(hash) => {
                let mut nonce = [0u8; 24];
                aws_lc_rs::rand::fill(&mut nonce).context("no random nonce")?;
                let mut client = crate::sasl::scram::ScramClient::new(
                    hash,
                    &credentials.username,
                    &credentials.password,
                    &nonce,
                );
                let server_first = self.sasl_step(client.first_message()).await?;
                let last = client.final_message(&server_first)?;
                let server_final = self.sasl_step(last).await?;
                client.verify_server(&server_final)?;
            }
            Mechanism::OAuthBearer => {
                bail!("agents do not authenticate to each other with OAUTHBEARER")
            }
        }
        Ok(())
    }

    async fn sasl_step(&mut self, message: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        let mut request = SaslAuthenticateRequest::default();
        request.auth_bytes = bytes::Bytes::from(message);
        let r = self.send(2, &request).await?;
        if r.error_code != 0 {
            bail!(
                "authentication failed: {}",
                r.error_message.as_deref().unwrap_or("no reason given")
            );
        }
        Ok(r.auth_bytes.to_vec())
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

/// Whether `e` came from TLS itself (an alert the other side sent, a certificate it
/// sent that this agent does not trust), not from the connection or the request.
fn tls_refusal(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| inner.is::<rustls::Error>())
    })
}

/// The host of a `host:port` address (an IPv6 one in brackets), as its certificate names it.
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
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
