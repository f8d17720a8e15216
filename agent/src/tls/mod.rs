//! TLS on SSL and SASL_SSL listeners, with rustls.
//!
//! The agent's certificate chain and key, and the certificate authorities client
//! certificates must chain to, are PEM files. They are read again every
//! `ssl_reload_interval_ms`, and a change is taken up for the connections accepted from
//! then on, so a renewed certificate needs no restart; a change that does not load
//! (half-written, a key that does not fit) keeps the previous one and is logged.
//!
//! As in Kafka (KIP-684), `ssl_client_auth` applies to SSL listeners: `required`
//! refuses a client without a certificate from a trusted authority, `requested` takes
//! one if offered. A certificate's subject, mapped by `ssl_principal_mapping_rules`, is
//! the principal of an SSL connection; a SASL_SSL connection's principal comes from
//! SASL, and it is asked for no certificate.
//!
//! When the inter-agent listener is SSL or SASL_SSL, an agent connecting to another is a
//! TLS client ([`Tls::connect`]) with the same files, as a Kafka broker uses its key and
//! trust stores: the other's certificate must chain to `ssl_truststore_location` and
//! name the address it advertises, and the agent presents its own certificate (which
//! must then allow client authentication too) when asked.

pub mod principal;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use rustls::ClientConfig;
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::context::Principal;
pub use principal::PrincipalRules;

/// Whether SSL listeners ask for client certificates (Kafka's `ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

impl ClientAuth {
    pub fn from_name(name: &str) -> Result<ClientAuth, String> {
        match name.to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(format!("{name:?} is not none, requested or required")),
        }
    }
}

/// Where the PEM files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The agent's certificate chain, its own certificate first.
    pub certificate: PathBuf,
    /// Its private key (PKCS #8, PKCS #1 or SEC1).
    pub key: PathBuf,
    /// The authorities client certificates must chain to.
    pub truststore: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

/// What the files held when last read, and the configurations built from them.
#[derive(Debug)]
struct Loaded {
    contents: Vec<Vec<u8>>,
    /// For SSL listeners: asks for client certificates as `client_auth` says.
    ssl: Arc<ServerConfig>,
    /// For SASL_SSL listeners: asks for none.
    sasl_ssl: Arc<ServerConfig>,
    /// For connections to the other agents on a TLS inter-agent listener: their
    /// certificates checked against the trust store, the agent's own presented when
    /// asked. `None` without a trust store.
    client: Option<Arc<ClientConfig>>,
}

/// The agent's TLS configuration, reloaded when its files change.
#[derive(Debug)]
pub struct Tls {
    files: TlsFiles,
    rules: PrincipalRules,
    loaded: RwLock<Arc<Loaded>>,
}

/// How a TLS connection came out.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error("TLS handshake did not finish within {0} ms")]
    Timeout(u64),
    #[error("client certificate subject {0:?} matches no ssl_principal_mapping_rules rule")]
    NoPrincipal(String),
    #[error("client certificate cannot be read: {0}")]
    BadCertificate(String),
}

impl Tls {
    /// Reads the files; an error names the file and what is wrong with it.
    pub fn load(files: TlsFiles, rules: PrincipalRules) -> anyhow::Result<Tls> {
        let loaded = build(&files, read_all(&files)?)?;
        Ok(Tls {
            files,
            rules,
            loaded: RwLock::new(Arc::new(loaded)),
        })
    }

    fn current(&self) -> Arc<Loaded> {
        Arc::clone(&self.loaded.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads the files again and, when they changed and load, takes them up. `Ok(true)`
    /// when it took a change up.
    pub fn reload(&self) -> anyhow::Result<bool> {
        let contents = read_all(&self.files)?;
        if contents == self.current().contents {
            return Ok(false);
        }
        let loaded = build(&self.files, contents)?;
        *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
        Ok(true)
    }

    /// Reloads every `every` until `shutdown`.
    pub async fn watch(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut failing = false;
        loop {
            tokio::select! {
                _ = crate::clock::pause(every) => {}
                _ = shutdown.cancelled() => return,
            }
            let tls = Arc::clone(&self);
            let outcome = tokio::task::spawn_blocking(move || tls.reload()).await;
            match outcome {
                Ok(Ok(true)) => {
                    failing = false;
                    tracing::info!(certificate = %self.files.certificate.display(), "TLS files changed: new connections use them");
                }
                Ok(Ok(false)) => failing = false,
                Ok(Err(e)) => {
                    if !failing {
                        tracing::warn!(error = %format!("{e:#}"), "TLS files changed but do not load; connections keep the previous ones");
                    }
                    failing = true;
                }
                Err(e) => tracing::warn!(error = %e, "TLS reload task failed"),
            }
        }
    }

    /// Runs the handshake on `stream` within `timeout`. On an SSL listener (`sasl` false)
    /// the principal is the client certificate's, mapped by the rules, or
    /// `User:ANONYMOUS` without one; on SASL_SSL it is left to SASL (`None`).
    pub async fn accept<S>(
        &self,
        stream: S,
        sasl: bool,
        timeout: Duration,
    ) -> Result<(TlsStream<S>, Option<Principal>), TlsError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let loaded = self.current();
        let config = if sasl { &loaded.sasl_ssl } else { &loaded.ssl };
        let acceptor = TlsAcceptor::from(Arc::clone(config));
        let stream = tokio::time::timeout(timeout, acceptor.accept(stream))
            .await
            .map_err(|_| TlsError::Timeout(timeout.as_millis() as u64))?
            .map_err(TlsError::Handshake)?;
        if sasl {
            return Ok((stream, None));
        }
        let principal = match stream.get_ref().1.peer_certificates() {
            Some([leaf, ..]) => Principal::user(&self.principal_name(leaf)?),
            _ => Principal::anonymous(),
        };
        Ok((stream, Some(principal)))
    }

    /// Runs the client side of the handshake on `stream`, to another agent at `host`:
    /// its certificate must chain to the trust store and name `host` (Kafka's
    /// `ssl.endpoint.identification.algorithm=https`); this agent presents its own.
    pub async fn connect<S>(
        &self,
        stream: S,
        host: &str,
    ) -> anyhow::Result<tokio_rustls::client::TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let loaded = self.current();
        let config = loaded.client.as_ref().context(
            "ssl_truststore_location is not set, so other agents' certificates cannot be verified",
        )?;
        let name = ServerName::try_from(host.to_string())
            .with_context(|| format!("{host:?} is not a host name or address"))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
        Ok(connector.connect(name, stream).await?)
    }

    fn principal_name(&self, leaf: &CertificateDer<'_>) -> Result<String, TlsError> {
        let (_, cert) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
        let subject = principal::rfc2253(cert.subject());
        self.rules
            .map(&subject)
            .ok_or(TlsError::NoPrincipal(subject))
    }
}

fn read_all(files: &TlsFiles) -> anyhow::Result<Vec<Vec<u8>>> {
    let read = |path: &Path, setting: &str| {
        std::fs::read(path).with_context(|| format!("cannot read {setting} {}", path.display()))
    };
    let mut contents = vec![
        read(&files.certificate, "ssl_certificate_location")?,
        read(&files.key, "ssl_key_location")?,
    ];
    if let Some(path) = &files.truststore {
        contents.push(read(path, "ssl_truststore_location")?);
    }
    Ok(contents)
}

fn build(files: &TlsFiles, contents: Vec<Vec<u8>>) -> anyhow::Result<Loaded> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain = CertificateDer::pem_slice_iter(&contents[0])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            anyhow::anyhow!(
                "ssl_certificate_location {} is not PEM certificates: {e}",
                files.certificate.display()
            )
        })?;
    if chain.is_empty() {
        anyhow::bail!(
            "ssl_certificate_location {} holds no certificate",
            files.certificate.display()
        );
    }
    let key = PrivateKeyDer::from_pem_slice(&contents[1]).map_err(|e| {
        anyhow::anyhow!(
            "ssl_key_location {} holds no PEM private key: {e}",
            files.key.display()
        )
    })?;
    let sasl_ssl =
        server_config(&provider, chain.clone(), key.clone_key(), None).with_context(|| {
            format!(
                "the key in {} does not fit the certificate in {}",
                files.key.display(),
                files.certificate.display()
            )
        })?;
    let roots = contents.get(2).map(|pem| trusted(pem)).transpose()?;
    let client = match &roots {
        None => None,
        Some(roots) => Some(Arc::new(
            ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()?
                .with_root_certificates(Arc::clone(roots))
                .with_client_auth_cert(chain.clone(), key.clone_key())?,
        )),
    };
    let verifier = match (files.client_auth, roots) {
        (ClientAuth::None, _) => None,
        (_, None) => anyhow::bail!(
            "ssl_client_auth {:?} needs ssl_truststore_location, the authorities client certificates chain to",
            files.client_auth
        ),
        (auth, Some(roots)) => {
            let builder = WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(&provider));
            let builder = match auth {
                ClientAuth::Requested => builder.allow_unauthenticated(),
                _ => builder,
            };
            Some(
                builder
                    .build()
                    .map_err(|e| anyhow::anyhow!("ssl_truststore_location: {e}"))?,
            )
        }
    };
    let ssl = match verifier {
        None => Arc::clone(&sasl_ssl),
        Some(v) => server_config(&provider, chain, key, Some(v))?,
    };
    Ok(Loaded {
        contents,
        ssl,
        sasl_ssl,
        client,
    })
}

/// The authorities in the trust store's PEM.
fn trusted(pem: &[u8]) -> anyhow::Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert
            .map_err(|e| anyhow::anyhow!("ssl_truststore_location is not PEM certificates: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| anyhow::anyhow!("ssl_truststore_location: {e}"))?;
    }
    if roots.is_empty() {
        anyhow::bail!("ssl_truststore_location holds no certificate");
    }
    Ok(Arc::new(roots))
}

fn server_config(
    provider: &Arc<CryptoProvider>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let builder = ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_safe_default_protocol_versions()?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(builder.with_single_cert(chain, key)?))
}
