//! Who calls the HTTP API, and whether they may: the same users and the same ACLs as the
//! Kafka listeners.
//!
//! With `http_authentication` set, every endpoint but `/healthz`, `/readyz`, `/metrics`
//! and `/v1/openapi.json` needs credentials: HTTP Basic with a user's SCRAM password (the
//! credentials AlterUserScramCredentials stores, checked as SASL/PLAIN checks them) or a
//! Bearer JWT validated as OAUTHBEARER's (the same JWKS, issuer, audience and claim). A
//! request without valid ones is 401 with `WWW-Authenticate`. The principal then goes
//! into the request (for the audit log and the handlers) and, with an authorizer, each
//! route is checked before its handler with the operation its Kafka counterpart needs
//! (the [`super::Needs`] its entry in the route table names); a refusal is 403 with the
//! Kafka error name.

use std::time::Duration;

use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

use super::problem::Problem;
use super::{Needs, Shared};
use crate::authz::{CLUSTER_NAME, Caller, Operation, ResourceType};
use crate::broker::Broker;
use crate::context::Principal;
use crate::error::Error;
use crate::sasl::oauth::Validator;

/// The principal of an HTTP request, put in its extensions by [`guard`].
#[derive(Debug, Clone)]
pub struct Authenticated(pub Principal);

/// How HTTP callers authenticate (`http_authentication`).
#[derive(Default)]
pub struct HttpAuth {
    basic: bool,
    bearer: Option<Validator>,
    /// Basic credentials checked lately: checking one costs a PBKDF2 of thousands of
    /// rounds, which a client calling many times a second must not pay each time.
    verified: Option<moka::sync::Cache<(String, [u8; 32]), ()>>,
}

/// How long a verified Basic credential is trusted without checking it again.
const VERIFIED_FOR: Duration = Duration::from_secs(60);

impl HttpAuth {
    /// From the settings: `methods` is `basic`, `bearer` or both, comma-separated; empty
    /// for none (every caller is `User:ANONYMOUS`).
    pub fn new(methods: &[String], bearer: Option<Validator>) -> HttpAuth {
        let basic = methods.iter().any(|m| m == "basic");
        HttpAuth {
            basic,
            bearer: if methods.iter().any(|m| m == "bearer") {
                bearer
            } else {
                None
            },
            verified: basic.then(|| {
                moka::sync::Cache::builder()
                    .max_capacity(10_000)
                    .time_to_live(VERIFIED_FOR)
                    .build()
            }),
        }
    }

    fn required(&self) -> bool {
        self.basic || self.bearer.is_some()
    }

    fn challenge(&self) -> HeaderValue {
        let mut schemes = Vec::new();
        if self.basic {
            schemes.push("Basic realm=\"strata\"");
        }
        if self.bearer.is_some() {
            schemes.push("Bearer realm=\"strata\"");
        }
        HeaderValue::from_str(&schemes.join(", ")).unwrap_or(HeaderValue::from_static("Basic"))
    }

    /// The principal the `Authorization` header proves, or why not.
    async fn principal(
        &self,
        broker: &Broker,
        authorization: Option<&str>,
    ) -> Result<Principal, String> {
        let Some(value) = authorization else {
            return Err("credentials are required (an Authorization header)".into());
        };
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        match scheme.to_ascii_lowercase().as_str() {
            "basic" if self.basic => self.basic(broker, rest.trim()).await,
            "bearer" => match &self.bearer {
                Some(v) => v
                    .validate(rest.trim(), crate::clock::now_ms().max(0) as u64)
                    .map(|t| Principal::user(&t.principal)),
                None => Err("Bearer tokens are not accepted here".into()),
            },
            other => Err(format!("the {other} scheme is not accepted here")),
        }
    }

    async fn basic(&self, broker: &Broker, encoded: &str) -> Result<Principal, String> {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or("the Basic credentials are not base64 of user:password")?;
        let (user, password) = decoded
            .split_once(':')
            .ok_or("the Basic credentials are not user:password")?;
        let key = (
            user.to_string(),
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, password.as_bytes())
                .as_ref()
                .try_into()
                .unwrap_or([0; 32]),
        );
        if let Some(verified) = &self.verified
            && verified.contains_key(&key)
        {
            return Ok(Principal::user(user));
        }
        let matches = crate::service::security::password_matches(broker.security(), user, password)
            .await
            .map_err(|e| format!("the metastore failed: {e}"))?;
        if !matches {
            // Never says whether the user exists.
            return Err("invalid user name or password".into());
        }
        if let Some(verified) = &self.verified {
            verified.insert(key, ());
        }
        Ok(Principal::user(user))
    }
}

/// Authenticates every request (where `http_authentication` asks for it), then checks
/// the route's operation with the authorizer.
pub async fn guard(
    State(shared): State<Shared>,
    params: RawPathParams,
    mut request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    // HEAD is answered by the GET handler.
    let method = match request.method().as_str() {
        "HEAD" => "GET",
        m => m,
    };
    let routes = &shared.api.routes;
    let Some(&needs) = routes.get(&(route.as_str(), method)) else {
        let mut served: Vec<&str> = routes
            .keys()
            .filter(|(path, _)| *path == route)
            .map(|(_, m)| *m)
            .collect();
        if !served.is_empty() {
            // A method the path does not serve: no handler runs; 405, saying which do.
            if served.contains(&"GET") {
                served.push("HEAD");
            }
            served.sort_unstable();
            let allow = served.join(", ");
            let mut response = Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{} is not served at {route}: {allow} is", request.method()),
            )
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&allow) {
                response.headers_mut().insert(header::ALLOW, v);
            }
            return response;
        }
        // Only the route table adds routes, so this is a route without its entry:
        // refused rather than let through.
        return Problem::new(
            StatusCode::FORBIDDEN,
            format!("{method} {route} names no authorization; it is refused"),
        )
        .into_response();
    };
    let auth = &shared.api.auth;
    let principal = if auth.required() && needs != Needs::Nothing {
        let header = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match auth.principal(&shared.broker, header).await {
            Ok(p) => p,
            Err(why) => {
                // Delayed and logged as a failed SASL exchange is, and counted with
                // them: guessing over HTTP is as slow as over Kafka.
                crate::metrics::http_authentication_failed();
                let peer = peer_ip(&request);
                tracing::info!(%peer, route = %route, reason = %why, "HTTP authentication failed");
                let delay = shared.broker.login_failures().failed(peer).await;
                crate::clock::pause(delay).await;
                let mut response = Problem::from(Error::Unauthenticated(why)).into_response();
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, auth.challenge());
                return response;
            }
        }
    } else {
        Principal::anonymous()
    };
    if let Needs::On(operation, kind, param) = needs {
        let name = if kind == ResourceType::Cluster {
            CLUSTER_NAME.to_string()
        } else {
            params
                .iter()
                .find(|(k, _)| *k == param)
                .map(|(_, v)| v.to_string())
                .unwrap_or_default()
        };
        let host = peer_ip(&request);
        if let Err(denied) = allowed(&shared.broker, &principal, host, operation, kind, &name) {
            return denied.into_response();
        }
    }
    request.extensions_mut().insert(Authenticated(principal));
    next.run(request).await
}

/// The client's address, from a request's extensions.
pub fn peer_of(extensions: &axum::http::Extensions) -> std::net::IpAddr {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0.ip())
}

fn peer_ip(request: &Request) -> std::net::IpAddr {
    peer_of(request.extensions())
}

/// Whether `principal` may do `operation` on the resource: a 403 problem with Kafka's
/// error name if not.
pub fn allowed(
    broker: &Broker,
    principal: &Principal,
    host: std::net::IpAddr,
    operation: Operation,
    kind: ResourceType,
    name: &str,
) -> Result<(), Problem> {
    let who = Caller { principal, host };
    if broker.authorizer().allows(who, operation, kind, name) {
        return Ok(());
    }
    Err(Problem::from(Error::Denied {
        principal: principal.to_string(),
        operation: operation.name(),
        resource: kind,
        name: name.to_string(),
    }))
}

/// The caller of a request [`guard`] let through.
pub fn authenticated(extensions: &axum::http::Extensions) -> Principal {
    extensions
        .get::<Authenticated>()
        .map_or_else(Principal::anonymous, |a| a.0.clone())
}
