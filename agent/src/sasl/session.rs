//! One connection's authentication, as Kafka's SASL server sees it: on a SASL listener
//! nothing but ApiVersions, SaslHandshake and SaslAuthenticate until the exchange
//! succeeds; then every request, until the session's lifetime
//! (`connections_max_reauth_ms`) runs out, unless the client re-authenticates first
//! (KIP-368: SaslHandshake and SaslAuthenticate again, on the same connection, as the
//! same principal with the same mechanism).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::{Exchange, Mechanism, Sasl, Step};
use crate::context::Principal;

/// What to do with one request.
#[derive(Debug)]
pub enum Verdict {
    /// Handle it as usual.
    Pass,
    /// Answer it with this (after `delay`), then go on, or close the connection once
    /// the answer is written if `close`.
    Answer {
        response: Box<ResponseKind>,
        delay: Duration,
        close: bool,
    },
    /// Close the connection without answering, for this reason.
    Close(String),
}

impl Verdict {
    fn answer(response: impl Into<ResponseKind>) -> Verdict {
        Verdict::Answer {
            response: Box::new(response.into()),
            delay: Duration::ZERO,
            close: false,
        }
    }

    fn answer_and_close(response: impl Into<ResponseKind>, delay: Duration) -> Verdict {
        Verdict::Answer {
            response: Box::new(response.into()),
            delay,
            close: true,
        }
    }
}

#[derive(Debug)]
enum State {
    /// A listener that does not authenticate.
    Open,
    /// SASL: before SaslHandshake.
    AwaitingHandshake,
    /// SASL: SaslHandshake chose the mechanism; SaslAuthenticate carries the exchange.
    /// `before`: the session being re-authenticated, if this is a re-authentication.
    Exchanging {
        exchange: Exchange,
        before: Option<Authenticated>,
    },
    Authenticated(Authenticated),
    /// Between taking a state apart and putting the next one together.
    Moving,
}

#[derive(Debug, Clone)]
struct Authenticated {
    principal: Principal,
    mechanism: Mechanism,
    /// When the session ends unless re-authenticated; `None`: never.
    until: Option<Instant>,
    /// The SaslAuthenticate version the client used: re-authentication needs v1+.
    version: i16,
}

/// One connection's authentication.
#[derive(Debug)]
pub struct Session {
    sasl: Option<Arc<Sasl>>,
    reauth: Option<Duration>,
    state: State,
}

fn handshake_response(error: Option<ResponseError>, sasl: Option<&Sasl>) -> SaslHandshakeResponse {
    let mut r = SaslHandshakeResponse::default();
    r.error_code = error.map_or(0, |e| e.code());
    r.mechanisms = sasl
        .map(|s| {
            s.mechanism_names()
                .into_iter()
                .map(StrBytes::from_static_str)
                .collect()
        })
        .unwrap_or_default();
    r
}

fn authenticate_error(error: ResponseError, message: String) -> SaslAuthenticateResponse {
    let mut r = SaslAuthenticateResponse::default();
    r.error_code = error.code();
    r.error_message = Some(StrBytes::from_string(message));
    r
}

impl Session {
    /// A connection on a listener that authenticates with `sasl`, or (`None`) does not.
    pub fn new(sasl: Option<Arc<Sasl>>, reauth: Option<Duration>) -> Session {
        let state = if sasl.is_some() {
            State::AwaitingHandshake
        } else {
            State::Open
        };
        Session {
            sasl,
            reauth,
            state,
        }
    }

    /// Whether the connection has yet to authenticate: on a SASL listener, before its
    /// first exchange succeeds (a re-authentication is of a connection that has).
    pub fn unauthenticated(&self) -> bool {
        matches!(
            self.state,
            State::AwaitingHandshake | State::Exchanging { before: None, .. }
        )
    }

    /// Decides what becomes of `request` (of `version`) from `peer` at `now`; returns
    /// the principal too when this request completed an authentication.
    pub async fn check(
        &mut self,
        api: ApiKey,
        request: &RequestKind,
        version: i16,
        peer: IpAddr,
        now: Instant,
    ) -> (Verdict, Option<Principal>) {
        let Some(sasl) = self.sasl.clone() else {
            return (self.open(request), None);
        };
        match (std::mem::replace(&mut self.state, State::Moving), request) {
            (state, RequestKind::ApiVersions(_)) => {
                self.state = state;
                (Verdict::Pass, None)
            }
            (State::AwaitingHandshake, RequestKind::SaslHandshake(r)) => {
                (self.handshake(&sasl, r.mechanism.as_str(), None), None)
            }
            (State::Authenticated(before), RequestKind::SaslHandshake(r)) => {
                if self.reauth.is_none() || before.version < 1 {
                    self.state = State::Authenticated(before);
                    let r = handshake_response(Some(ResponseError::IllegalSaslState), Some(&sasl));
                    return (Verdict::answer(r), None);
                }
                if sasl.mechanism(r.mechanism.as_str()) != Some(before.mechanism) {
                    let r = handshake_response(
                        Some(ResponseError::UnsupportedSaslMechanism),
                        Some(&sasl),
                    );
                    return (Verdict::answer_and_close(r, Duration::ZERO), None);
                }
                (
                    self.handshake(&sasl, r.mechanism.as_str(), Some(before)),
                    None,
                )
            }
            (State::Exchanging { exchange, before }, RequestKind::SaslAuthenticate(r)) => {
                self.authenticate(
                    &sasl,
                    exchange,
                    before,
                    r.auth_bytes.as_ref(),
                    version,
                    peer,
                    now,
                )
                .await
            }
            (State::Authenticated(a), RequestKind::SaslAuthenticate(_)) => {
                self.state = State::Authenticated(a);
                let r = authenticate_error(
                    ResponseError::IllegalSaslState,
                    "SaslAuthenticate after the connection authenticated, without SaslHandshake"
                        .to_string(),
                );
                (Verdict::answer(r), None)
            }
            (State::Authenticated(a), _) => {
                let expired = a.until.is_some_and(|until| now >= until);
                self.state = State::Authenticated(a);
                if expired {
                    let why = "the SASL session expired (connections_max_reauth_ms) and the client did not re-authenticate";
                    return (Verdict::Close(why.to_string()), None);
                }
                (Verdict::Pass, None)
            }
            // Re-authenticating: the old session goes on serving until it expires.
            (
                State::Exchanging {
                    exchange,
                    before: Some(a),
                },
                _,
            ) if a.until.is_none_or(|until| now < until) => {
                self.state = State::Exchanging {
                    exchange,
                    before: Some(a),
                };
                (Verdict::Pass, None)
            }
            (state, _) => {
                let why = format!(
                    "{api:?} before SASL authentication completed ({})",
                    match state {
                        State::AwaitingHandshake => "no SaslHandshake yet",
                        State::Exchanging { .. } => "in the middle of the exchange",
                        _ => "the session expired",
                    }
                );
                (Verdict::Close(why), None)
            }
        }
    }

    /// A listener without SASL answers SASL requests as Kafka's does.
    fn open(&mut self, request: &RequestKind) -> Verdict {
        match request {
            RequestKind::SaslHandshake(_) => {
                Verdict::answer(handshake_response(Some(ResponseError::IllegalSaslState), None))
            }
            RequestKind::SaslAuthenticate(_) => Verdict::answer(authenticate_error(
                ResponseError::IllegalSaslState,
                "this listener does not authenticate (its security protocol is PLAINTEXT); connect to a SASL listener".to_string(),
            )),
            _ => Verdict::Pass,
        }
    }

    fn handshake(&mut self, sasl: &Sasl, name: &str, before: Option<Authenticated>) -> Verdict {
        match sasl.mechanism(name) {
            Some(m) => {
                self.state = State::Exchanging {
                    exchange: Exchange::Started(m),
                    before,
                };
                Verdict::answer(handshake_response(None, Some(sasl)))
            }
            None => {
                self.state = State::AwaitingHandshake;
                let r =
                    handshake_response(Some(ResponseError::UnsupportedSaslMechanism), Some(sasl));
                Verdict::answer_and_close(r, Duration::ZERO)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn authenticate(
        &mut self,
        sasl: &Sasl,
        exchange: Exchange,
        before: Option<Authenticated>,
        input: &[u8],
        version: i16,
        peer: IpAddr,
        now: Instant,
    ) -> (Verdict, Option<Principal>) {
        let mechanism = exchange.mechanism();
        let reauth = before.is_some();
        let fail = |message: String, delay: Duration| {
            crate::metrics::sasl_authentication(mechanism.name(), "failed", reauth);
            tracing::info!(%peer, mechanism = mechanism.name(), reauthentication = reauth, reason = %message, "SASL authentication failed");
            let r = authenticate_error(ResponseError::SaslAuthenticationFailed, message);
            (Verdict::answer_and_close(r, delay), None)
        };
        match sasl.step(exchange, input, peer).await {
            Step::Continue(next, bytes) => {
                self.state = State::Exchanging {
                    exchange: next,
                    before,
                };
                let mut r = SaslAuthenticateResponse::default();
                r.auth_bytes = bytes;
                (Verdict::answer(r), None)
            }
            Step::Failed { message, delay } => fail(message, delay),
            Step::Done(principal, bytes, expires_ms) => {
                if let Some(b) = &before
                    && b.principal != principal
                {
                    return fail(
                        format!(
                            "re-authentication as {principal} on a connection authenticated as {}",
                            b.principal
                        ),
                        Duration::ZERO,
                    );
                }
                crate::metrics::sasl_authentication(mechanism.name(), "ok", reauth);
                tracing::debug!(%peer, %principal, mechanism = mechanism.name(), reauthentication = reauth, "SASL authenticated");
                // As Kafka: with re-authentication on, a session ends when its
                // credential does (an OAUTHBEARER token's exp), if that is sooner.
                let lifetime = match (self.reauth, expires_ms) {
                    (Some(l), Some(expires)) => {
                        let left = expires.saturating_sub(crate::clock::now_ms().max(0) as u64);
                        // Never 0, which would mean "no expiry" to the client.
                        Some(l.min(Duration::from_millis(left.max(1))))
                    }
                    (l, _) => l,
                };
                self.state = State::Authenticated(Authenticated {
                    principal: principal.clone(),
                    mechanism,
                    until: lifetime.map(|l| now + l),
                    version,
                });
                let mut r = SaslAuthenticateResponse::default();
                r.auth_bytes = bytes;
                r.session_lifetime_ms = lifetime.map_or(0, |l| l.as_millis() as i64);
                (Verdict::answer(r), Some(principal))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kafka_protocol::messages::{
        MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
    };
    use strata_metastore::SqliteStore;
    use strata_metastore::{Metastore, UserCredentials};

    use super::*;
    use crate::sasl::scram::ScramHash;

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    async fn sasl(dir: &tempfile::TempDir) -> Arc<Sasl> {
        let kv = SqliteStore::open(&dir.path().join("m.sqlite")).expect("open");
        let metastore = Metastore::new(Arc::new(kv), b"s");
        for (user, password) in [("alice", "alice-pw"), ("bob", "bob-pw")] {
            let salt = format!("salt-{user}").into_bytes();
            let h = ScramHash::Sha512;
            let c = h.credential_from_salted(
                &h.salted_password(password.as_bytes(), &salt, 4096),
                &salt,
                4096,
            );
            metastore
                .alter_user_credentials(vec![user.to_string()], move |users| {
                    let mut mechanisms = BTreeMap::new();
                    mechanisms.insert(h.mechanism().to_string(), c.clone());
                    users.insert(
                        user.to_string(),
                        UserCredentials {
                            user: user.to_string(),
                            mechanisms,
                        },
                    );
                    Ok(())
                })
                .await
                .expect("add user");
        }
        Arc::new(Sasl::new(
            metastore,
            &["PLAIN".to_string()],
            Arc::new(crate::sasl::LoginFailures::new(Duration::from_millis(100))),
            None,
        ))
    }

    fn metadata() -> RequestKind {
        RequestKind::Metadata(MetadataRequest::default())
    }

    fn handshake() -> RequestKind {
        let mut r = SaslHandshakeRequest::default();
        r.mechanism = StrBytes::from_static_str("PLAIN");
        RequestKind::SaslHandshake(r)
    }

    fn plain(user: &str, password: &str) -> RequestKind {
        let mut r = SaslAuthenticateRequest::default();
        r.auth_bytes = format!("\0{user}\0{password}").into_bytes().into();
        RequestKind::SaslAuthenticate(r)
    }

    fn api(r: &RequestKind) -> ApiKey {
        match r {
            RequestKind::Metadata(_) => ApiKey::Metadata,
            RequestKind::SaslHandshake(_) => ApiKey::SaslHandshake,
            _ => ApiKey::SaslAuthenticate,
        }
    }

    async fn check(s: &mut Session, r: RequestKind, now: Instant) -> (Verdict, Option<Principal>) {
        s.check(api(&r), &r, 2, PEER, now).await
    }

    fn error_code(v: &Verdict) -> Option<i16> {
        match v {
            Verdict::Answer { response, .. } => match response.as_ref() {
                ResponseKind::SaslHandshake(r) => Some(r.error_code),
                ResponseKind::SaslAuthenticate(r) => Some(r.error_code),
                _ => None,
            },
            _ => None,
        }
    }

    #[tokio::test]
    async fn nothing_but_authentication_before_it_and_nothing_after_the_session_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Session::new(Some(sasl(&dir).await), Some(Duration::from_secs(10)));
        let t0 = crate::clock::instant();
        let mut early = Session::new(s.sasl.clone(), None);
        assert!(matches!(
            check(&mut early, metadata(), t0).await.0,
            Verdict::Close(_)
        ));

        assert_eq!(error_code(&check(&mut s, handshake(), t0).await.0), Some(0));
        let (verdict, principal) = check(&mut s, plain("alice", "alice-pw"), t0).await;
        assert_eq!(error_code(&verdict), Some(0));
        assert_eq!(principal, Some(Principal::user("alice")));
        assert!(matches!(
            check(&mut s, metadata(), t0 + Duration::from_secs(9))
                .await
                .0,
            Verdict::Pass
        ));

        // Re-authenticating: the old session serves in between; as another user, refused.
        let t1 = t0 + Duration::from_secs(9);
        assert_eq!(error_code(&check(&mut s, handshake(), t1).await.0), Some(0));
        assert!(matches!(
            check(&mut s, metadata(), t1).await.0,
            Verdict::Pass
        ));
        let (verdict, principal) = check(&mut s, plain("bob", "bob-pw"), t1).await;
        assert_eq!(
            error_code(&verdict),
            Some(ResponseError::SaslAuthenticationFailed.code())
        );
        assert!(matches!(verdict, Verdict::Answer { close: true, .. }));
        assert_eq!(principal, None);

        // The same user renews the session; past its end, the connection is closed.
        let mut s = Session::new(s.sasl.clone(), Some(Duration::from_secs(10)));
        check(&mut s, handshake(), t0).await;
        check(&mut s, plain("alice", "alice-pw"), t0).await;
        check(&mut s, handshake(), t1).await;
        let (verdict, principal) = check(&mut s, plain("alice", "alice-pw"), t1).await;
        assert_eq!(
            (error_code(&verdict), principal),
            (Some(0), Some(Principal::user("alice")))
        );
        let t2 = t1 + Duration::from_secs(9);
        assert!(matches!(
            check(&mut s, metadata(), t2).await.0,
            Verdict::Pass
        ));
        let t3 = t1 + Duration::from_secs(10);
        assert!(matches!(
            check(&mut s, metadata(), t3).await.0,
            Verdict::Close(_)
        ));
    }

    /// A PLAIN login on a new connection that must fail: its answer's delay, in ms (the
    /// answer is SASL_AUTHENTICATION_FAILED and closes the connection).
    async fn failed_login(sasl: &Arc<Sasl>, user: &str, password: &str) -> u128 {
        let now = crate::clock::instant();
        let mut s = Session::new(Some(Arc::clone(sasl)), None);
        check(&mut s, handshake(), now).await;
        let (verdict, principal) = check(&mut s, plain(user, password), now).await;
        assert_eq!(principal, None);
        assert_eq!(
            error_code(&verdict),
            Some(ResponseError::SaslAuthenticationFailed.code())
        );
        match verdict {
            Verdict::Answer { delay, close, .. } => {
                assert!(close);
                delay.as_millis()
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_wrong_password_is_answered_late_and_closes_the_connection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sasl = sasl(&dir).await;
        let now = crate::clock::instant();
        let mut delays = Vec::new();
        for _ in 0..3 {
            delays.push(failed_login(&sasl, "alice", "wrong").await);
        }
        assert_eq!(
            delays,
            [100, 200, 400],
            "the delay doubles per failure from one address"
        );
        // An unknown user fails the same way.
        let mut s = Session::new(Some(sasl), None);
        check(&mut s, handshake(), now).await;
        let (verdict, _) = check(&mut s, plain("mallory", "pw"), now).await;
        assert_eq!(
            error_code(&verdict),
            Some(ResponseError::SaslAuthenticationFailed.code())
        );
    }

    /// One account's login between guesses at another's password does not reset the
    /// delay: the guesser would otherwise guess at full speed.
    #[tokio::test]
    async fn a_success_does_not_reset_the_delay_of_failures_from_its_address() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sasl = sasl(&dir).await;
        let now = crate::clock::instant();
        let mut delays = Vec::new();
        for _ in 0..3 {
            delays.push(failed_login(&sasl, "alice", "guess").await);
            let mut s = Session::new(Some(Arc::clone(&sasl)), None);
            check(&mut s, handshake(), now).await;
            let (verdict, principal) = check(&mut s, plain("bob", "bob-pw"), now).await;
            assert_eq!(principal, Some(Principal::user("bob")), "{verdict:?}");
        }
        assert_eq!(delays, [100, 200, 400]);
    }
}
