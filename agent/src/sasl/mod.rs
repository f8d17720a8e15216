//! SASL authentication on SASL listeners: the mechanisms (PLAIN, SCRAM-SHA-256,
//! SCRAM-SHA-512, OAUTHBEARER), their exchanges, and the growing delay after failures.
//!
//! The credentials are the SCRAM ones in the metastore (set with
//! AlterUserScramCredentials, as Kafka's `kafka-configs --entity-type users`); PLAIN
//! checks its password against them, so a user has one password for every mechanism
//! and no password is ever stored. OAUTHBEARER tokens are JWTs checked against the
//! keys of a JWKS file (`oauth.rs`). The connection's side (which requests may come
//! before authentication, re-authentication) is in `server.rs`.

pub mod oauth;
pub mod scram;
pub mod session;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_metastore::{Metastore, ScramCredential};

use crate::context::Principal;
use scram::{ScramError, ScramHash, ServerFirst};

/// The mechanisms strata has, by Kafka name.
pub const MECHANISMS: &[&str] = &["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"];

/// The longest a failed authentication's answer is held back.
const MAX_FAILURE_DELAY: Duration = Duration::from_secs(5);

/// How long an address's failures are remembered after its last one.
const FAILURES_REMEMBERED: Duration = Duration::from_secs(600);

/// Failed logins by client address, for the growing delay before a failure's answer:
/// SASL exchanges and HTTP credentials count together, so guessing over one protocol
/// does not start afresh on the other.
///
/// A success clears nothing. If it did, anyone with one account could log in between
/// guesses at another's password and guess at full speed; the delay only ever holds
/// back a failure's answer, so a client that logs in is not slowed by its address's
/// past failures. An address's count is forgotten ten minutes after its last failure.
#[derive(Debug)]
pub struct LoginFailures {
    base_delay: Duration,
    counts: moka::future::Cache<IpAddr, u32>,
}

impl LoginFailures {
    /// The first failure from an address waits `base_delay` (Kafka's
    /// `connection.failed.authentication.delay.ms`); each further one twice the last.
    pub fn new(base_delay: Duration) -> LoginFailures {
        LoginFailures {
            base_delay,
            counts: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(FAILURES_REMEMBERED)
                .build(),
        }
    }

    /// Counts a failure from `peer`; how long its answer is to be held back.
    pub async fn failed(&self, peer: IpAddr) -> Duration {
        let failures = self
            .counts
            .entry(peer)
            .and_upsert_with(|n| async move { n.map_or(1, |e| e.into_value() + 1) })
            .await
            .into_value();
        let doubling = failures.saturating_sub(1).min(16);
        (self.base_delay * 2u32.pow(doubling)).min(MAX_FAILURE_DELAY)
    }
}

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    Scram(ScramHash),
    OAuthBearer,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(h) => h.mechanism(),
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "OAUTHBEARER" => Some(Mechanism::OAuthBearer),
            n => ScramHash::from_mechanism(n).map(Mechanism::Scram),
        }
    }
}

/// Where one exchange stands.
#[derive(Debug)]
pub enum Exchange {
    /// Waiting for the client's first message.
    Started(Mechanism),
    /// SCRAM: the server's first message sent, waiting for the client's final one.
    ScramSent(Box<ServerFirst>),
}

impl Exchange {
    pub fn mechanism(&self) -> Mechanism {
        match self {
            Exchange::Started(m) => *m,
            Exchange::ScramSent(s) => Mechanism::Scram(s.hash()),
        }
    }
}

/// What one client message led to.
#[derive(Debug)]
pub enum Step {
    /// Answer with these bytes and wait for the next message.
    Continue(Exchange, Bytes),
    /// Authenticated: answer with these bytes. The credential expires at the time given
    /// (milliseconds since the epoch), if it does (an OAUTHBEARER token).
    Done(Principal, Bytes, Option<u64>),
    /// Failed: answer SASL_AUTHENTICATION_FAILED with this message, after `delay`, and
    /// close the connection.
    Failed { message: String, delay: Duration },
}

/// The agent's authenticator, shared by its connections.
pub struct Sasl {
    metastore: Metastore,
    enabled: Vec<Mechanism>,
    /// OAUTHBEARER's token validation, when it is enabled.
    oauth: Option<oauth::Validator>,
    /// Failures per client address, for the growing delay (shared with HTTP).
    failures: Arc<LoginFailures>,
    /// Keys the made-up salt of users without a credential, so that it is the same on
    /// every attempt and unknown users look like known ones.
    unknown_user_key: aws_lc_rs::hmac::Key,
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sasl")
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    aws_lc_rs::rand::fill(&mut out).expect("the system's random source works");
    out
}

impl Sasl {
    /// `mechanisms` are names from [`MECHANISMS`] (checked with the settings); `oauth`
    /// validates OAUTHBEARER's tokens, which is offered only with it; failures are
    /// counted in `failures`.
    pub fn new(
        metastore: Metastore,
        mechanisms: &[String],
        failures: Arc<LoginFailures>,
        oauth: Option<oauth::Validator>,
    ) -> Sasl {
        let oauth_enabled = oauth.is_some();
        Sasl {
            metastore,
            oauth,
            enabled: mechanisms
                .iter()
                .filter_map(|m| Mechanism::from_name(m))
                .filter(|m| *m != Mechanism::OAuthBearer || oauth_enabled)
                .collect(),
            failures,
            unknown_user_key: aws_lc_rs::hmac::Key::new(
                aws_lc_rs::hmac::HMAC_SHA256,
                &random_bytes::<32>(),
            ),
        }
    }

    /// The enabled mechanisms' names, as SaslHandshake lists them.
    pub fn mechanism_names(&self) -> Vec<&'static str> {
        self.enabled.iter().map(|m| m.name()).collect()
    }

    /// The enabled mechanism of that name.
    pub fn mechanism(&self, name: &str) -> Option<Mechanism> {
        Mechanism::from_name(name).filter(|m| self.enabled.contains(m))
    }

    /// Takes one client message of `exchange`, from `peer`.
    pub async fn step(&self, exchange: Exchange, input: &[u8], peer: IpAddr) -> Step {
        let mechanism = exchange.mechanism();
        let refused = |e: ScramError| match e {
            ScramError::BadProof => format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                mechanism.name()
            ),
            other => format!("Authentication failed: {other}"),
        };
        let outcome = match exchange {
            Exchange::Started(Mechanism::Plain) => self.plain(input).await.map_err(refused),
            Exchange::Started(Mechanism::Scram(h)) => {
                self.scram_first(h, input).await.map_err(refused)
            }
            Exchange::Started(Mechanism::OAuthBearer) => self.oauthbearer(input),
            Exchange::ScramSent(server) => match server.finish(input) {
                Ok(last) => Ok(Step::Done(
                    Principal::user(server.user()),
                    Bytes::from(last),
                    None,
                )),
                Err(e) => Err(refused(e)),
            },
        };
        match outcome {
            Ok(step) => step,
            Err(message) => Step::Failed {
                message,
                delay: self.failures.failed(peer).await,
            },
        }
    }

    /// OAUTHBEARER: one client message carrying the token; the principal is its
    /// subject, and an authorization id, if given, must be that subject.
    fn oauthbearer(&self, input: &[u8]) -> Result<Step, String> {
        let Some(validator) = &self.oauth else {
            return Err("Authentication failed: OAUTHBEARER is not configured".to_string());
        };
        let (authzid, token) = oauth::parse_client_response(input).map_err(|why| {
            format!("Authentication failed: malformed OAUTHBEARER message: {why}")
        })?;
        let valid = validator
            .validate(&token, crate::clock::now_ms().max(0) as u64)
            .map_err(|why| format!("Authentication failed: invalid OAUTHBEARER token: {why}"))?;
        if authzid.as_ref().is_some_and(|a| *a != valid.principal) {
            return Err(format!(
                "Authentication failed: the authorization id is not the token's subject {}",
                valid.principal
            ));
        }
        Ok(Step::Done(
            Principal::user(&valid.principal),
            Bytes::new(),
            Some(valid.expires_ms),
        ))
    }

    async fn credential(
        &self,
        user: &str,
        hash: ScramHash,
    ) -> Result<Option<ScramCredential>, ScramError> {
        match self.metastore.user_credentials(user).await {
            Ok(c) => Ok(c.and_then(|mut c| c.mechanisms.remove(hash.mechanism()))),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read SCRAM credentials; refusing the authentication");
                Err(ScramError::Refused("the credential store is unavailable"))
            }
        }
    }

    /// A credential for a user without one: the exchange then fails at the proof,
    /// exactly as with a wrong password.
    fn unknown_user(&self, user: &str, hash: ScramHash) -> ScramCredential {
        let tag = aws_lc_rs::hmac::sign(
            &self.unknown_user_key,
            format!("{}\0{user}", hash.mechanism()).as_bytes(),
        );
        ScramCredential {
            salt: tag.as_ref()[..16].to_vec(),
            iterations: scram::MIN_ITERATIONS,
            stored_key: random_bytes::<64>().to_vec(),
            server_key: random_bytes::<64>().to_vec(),
        }
    }

    async fn scram_first(&self, hash: ScramHash, input: &[u8]) -> Result<Step, ScramError> {
        let client = scram::parse_client_first(input)?;
        let credential = match self.credential(&client.user, hash).await? {
            Some(c) => c,
            None => self.unknown_user(&client.user, hash),
        };
        let server = ServerFirst::new(hash, client, credential, &random_bytes::<24>());
        let first = Bytes::copy_from_slice(server.message());
        Ok(Step::Continue(Exchange::ScramSent(Box::new(server)), first))
    }

    /// PLAIN (RFC 4616): `authzid NUL authcid NUL password`, the password checked
    /// against the user's SCRAM credential (SCRAM-SHA-512's if it has one).
    async fn plain(&self, input: &[u8]) -> Result<Step, ScramError> {
        let mut parts = input.split(|&b| b == 0);
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ScramError::Malformed(
                "PLAIN is authzid NUL user NUL password",
            ));
        };
        let user = std::str::from_utf8(user).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        if user.is_empty() || password.is_empty() {
            return Err(ScramError::Malformed("empty user name or password"));
        }
        if !authzid.is_empty() && authzid != user.as_bytes() {
            return Err(ScramError::Refused(
                "the authorization id must be the user name",
            ));
        }
        let mut found = None;
        for hash in [ScramHash::Sha512, ScramHash::Sha256] {
            if let Some(c) = self.credential(user, hash).await? {
                found = Some((hash, c));
                break;
            }
        }
        // Without a credential, the same work against a made-up one: the answer takes as
        // long as a wrong password's.
        let known = found.is_some();
        let (hash, credential) = found.unwrap_or_else(|| {
            (
                ScramHash::Sha512,
                self.unknown_user(user, ScramHash::Sha512),
            )
        });
        let password = password.to_vec();
        let matches =
            tokio::task::spawn_blocking(move || hash.password_matches(&credential, &password))
                .await
                .unwrap_or(false);
        if known && matches {
            Ok(Step::Done(Principal::user(user), Bytes::new(), None))
        } else {
            Err(ScramError::BadProof)
        }
    }
}
