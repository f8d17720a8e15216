//! Who is asking, and how: the context every request is handled in.
//!
//! A connection knows the listener it came in on, the peer's address and the principal
//! it authenticated as (`User:ANONYMOUS` until a listener authenticates); it learns the
//! client's software name and version from ApiVersions (KIP-511). Each request then gets
//! a [`RequestContext`] with those, its client id, API key and version, and its
//! deadline: the moment the client stops waiting for it, after which no work is done on
//! its behalf.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use tokio::time::Instant;

/// How a listener's connections are secured (Kafka's `security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    /// SASL authentication (SaslHandshake, SaslAuthenticate) on a plain connection.
    SaslPlaintext,
    /// TLS; the principal is the client certificate's, if it presents one.
    Ssl,
    /// SASL authentication inside TLS.
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Kafka's protocol names.
    pub fn from_name(name: &str) -> Result<SecurityProtocol, String> {
        match name.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            _ => Err(format!(
                "{name:?} is not a security protocol (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL)"
            )),
        }
    }

    pub fn is_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    pub fn is_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

/// One of the agent's Kafka listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Kafka's listener name (`PLAINTEXT` for the default listener).
    pub name: String,
    pub security_protocol: SecurityProtocol,
}

impl Listener {
    pub fn new(name: &str, security_protocol: SecurityProtocol) -> Listener {
        Listener {
            name: name.to_string(),
            security_protocol,
        }
    }

    pub fn plaintext() -> Listener {
        Listener {
            name: "PLAINTEXT".to_string(),
            security_protocol: SecurityProtocol::Plaintext,
        }
    }
}

/// Who a connection acts as, in Kafka's `type:name` form (`User:alice`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Principal {
    pub kind: String,
    pub name: String,
}

impl Principal {
    /// A user, as SASL authenticates one.
    pub fn user(name: &str) -> Principal {
        Principal {
            kind: "User".to_string(),
            name: name.to_string(),
        }
    }

    /// Kafka's principal for connections that did not authenticate.
    pub fn anonymous() -> Principal {
        Principal {
            kind: "User".to_string(),
            name: "ANONYMOUS".to_string(),
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)
    }
}

/// The client library a connection says it runs (ApiVersions v3+, KIP-511).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSoftware {
    pub name: String,
    pub version: String,
}

/// What a connection knows of itself; shared by its requests.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub listener: Arc<Listener>,
    pub peer: SocketAddr,
    pub principal: Principal,
    pub client_software: Option<ClientSoftware>,
    /// Produce refusals a pipelined request must not be judged past (one set per
    /// connection, shared by the copies a connection makes as it learns).
    pub produce_refusals: Arc<ProduceRefusals>,
}

/// The partitions whose last produce on a connection was refused with an error a
/// client retries, nothing appended (`NOT_LEADER_OR_FOLLOWER` from an agent not
/// leading yet, say), and that error. The client resends the refused batch, but the
/// batches after it may already be on their way in the same pipeline: judged by a
/// leader elected in between, they would be OUT_OF_ORDER_SEQUENCE_NUMBER, and
/// librdkafka answers that by bumping its producer epoch, which resends its in-flight
/// batches of every partition under the new epoch, writing twice those that were
/// written. So such a batch is refused as its predecessor was (`crate::api::produce`).
#[derive(Debug, Default)]
pub struct ProduceRefusals(std::sync::Mutex<Vec<Refusal>>);

#[derive(Debug)]
struct Refusal {
    topic: String,
    partition: i32,
    error: kafka_protocol::error::ResponseError,
    at: Instant,
}

/// How long a refusal is held against the batches after it: a pipeline's requests
/// arrive within a request timeout of each other.
const REFUSAL_HELD: Duration = Duration::from_secs(30);
/// A bound on the refusals remembered per connection (the oldest go first).
const REFUSALS_KEPT: usize = 1024;

impl ProduceRefusals {
    fn refusals(&self) -> std::sync::MutexGuard<'_, Vec<Refusal>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A produce to `topic`-`partition` was refused with `error`, nothing appended.
    pub fn refused(
        &self,
        topic: &str,
        partition: i32,
        error: kafka_protocol::error::ResponseError,
    ) {
        let mut refusals = self.refusals();
        refusals.retain(|r| !(r.partition == partition && r.topic == topic));
        if refusals.len() >= REFUSALS_KEPT {
            refusals.remove(0);
        }
        refusals.push(Refusal {
            topic: topic.to_string(),
            partition,
            error,
            at: crate::clock::instant(),
        });
    }

    /// The refusal still held against `topic`-`partition`, if any.
    pub fn held(
        &self,
        topic: &str,
        partition: i32,
    ) -> Option<kafka_protocol::error::ResponseError> {
        let refusals = self.refusals();
        refusals
            .iter()
            .find(|r| r.partition == partition && r.topic == topic)
            .filter(|r| r.at.elapsed() < REFUSAL_HELD)
            .map(|r| r.error)
    }

    /// A produce to `topic`-`partition` was appended: nothing is held against it.
    pub fn appended(&self, topic: &str, partition: i32) {
        let mut refusals = self.refusals();
        if !refusals.is_empty() {
            refusals.retain(|r| !(r.partition == partition && r.topic == topic));
        }
    }
}

impl ConnectionInfo {
    pub fn new(listener: Arc<Listener>, peer: SocketAddr) -> ConnectionInfo {
        ConnectionInfo {
            listener,
            peer,
            principal: Principal::anonymous(),
            client_software: None,
            produce_refusals: Arc::default(),
        }
    }

    /// Remembers the client software an ApiVersions request names.
    pub fn learn(&mut self, request: &RequestKind) {
        if let RequestKind::ApiVersions(r) = request {
            let name = r.client_software_name.as_str();
            if !name.is_empty() {
                self.client_software = Some(ClientSoftware {
                    name: name.to_string(),
                    version: r.client_software_version.as_str().to_string(),
                });
            }
        }
    }
}

/// One request, and everything known about who sent it.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub connection: Arc<ConnectionInfo>,
    pub client_id: String,
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub received_at: Instant,
    /// When the client stops waiting: Produce's `timeout_ms`, Fetch's `max_wait_ms`,
    /// else the agent's `request_timeout_ms` (the default `request.timeout.ms` of
    /// Kafka's clients).
    pub deadline: Instant,
}

impl RequestContext {
    pub fn new(
        connection: Arc<ConnectionInfo>,
        header: &RequestHeader,
        api_key: ApiKey,
        request: &RequestKind,
        request_timeout: Duration,
    ) -> RequestContext {
        let received_at = crate::clock::instant();
        let wait = match request {
            RequestKind::Produce(r) => Duration::from_millis(r.timeout_ms.max(0) as u64),
            RequestKind::Fetch(r) => Duration::from_millis(r.max_wait_ms.max(0) as u64),
            _ => request_timeout,
        };
        RequestContext {
            connection,
            client_id: header
                .client_id
                .as_ref()
                .map(|c| c.to_string())
                .unwrap_or_default(),
            api_key,
            api_version: header.request_api_version,
            correlation_id: header.correlation_id,
            received_at,
            deadline: received_at + wait,
        }
    }

    pub fn principal(&self) -> &Principal {
        &self.connection.principal
    }

    pub fn listener(&self) -> &Listener {
        &self.connection.listener
    }

    pub fn peer(&self) -> SocketAddr {
        self.connection.peer
    }

    /// The peer's host as Kafka reports it for group members (`/10.0.0.1`).
    pub fn client_host(&self) -> String {
        format!("/{}", self.connection.peer.ip())
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    /// A connection learns its client software from ApiVersions v3+, keeps it across
    /// other requests, and each request's context carries it with its deadline.
    #[test]
    fn the_connection_learns_the_client_software() {
        let peer: SocketAddr = "10.1.2.3:4567".parse().expect("address");
        let mut info = ConnectionInfo::new(Arc::new(Listener::plaintext()), peer);
        info.learn(&RequestKind::Metadata(MetadataRequest::default()));
        assert_eq!(info.client_software, None);
        let mut versions = ApiVersionsRequest::default();
        versions.client_software_name = StrBytes::from_static_str("apache-kafka-java");
        versions.client_software_version = StrBytes::from_static_str("4.1.1");
        info.learn(&RequestKind::ApiVersions(versions));
        info.learn(&RequestKind::ApiVersions(ApiVersionsRequest::default()));
        let software = info.client_software.clone().expect("learned");
        assert_eq!(
            (software.name.as_str(), software.version.as_str()),
            ("apache-kafka-java", "4.1.1")
        );

        let mut header = RequestHeader::default();
        header.request_api_version = 12;
        header.correlation_id = 7;
        header.client_id = Some(StrBytes::from_static_str("app"));
        let ctx = RequestContext::new(
            Arc::new(info),
            &header,
            ApiKey::Metadata,
            &RequestKind::Metadata(MetadataRequest::default()),
            Duration::from_secs(30),
        );
        assert_eq!(ctx.principal().to_string(), "User:ANONYMOUS");
        assert_eq!(ctx.listener().name, "PLAINTEXT");
        assert_eq!(ctx.client_host(), "/10.1.2.3");
        assert_eq!(ctx.client_id, "app");
        assert_eq!(ctx.deadline - ctx.received_at, Duration::from_secs(30));
        assert!(ctx.connection.client_software.is_some());
    }
}
