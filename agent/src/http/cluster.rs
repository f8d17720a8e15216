//! Where the groups of an HTTP request live: a consumer instance lives on the
//! coordinator of its group; the other agents redirect to it (307, which keeps the
//! method and the body).

use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::service::agents::AgentRecord;

/// Where clients reach an agent's HTTP API: its HTTP listener, with the host of its
/// advertised Kafka address when the listener is on every interface.
pub fn http_address(agent: &AgentRecord) -> String {
    match agent.http.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => format!("{}:{}", agent.host, addr.port()),
        _ => agent.http.clone(),
    }
}

/// A 307 to the same path and query on `agent`'s HTTP API.
pub fn redirect(agent: &AgentRecord, uri: &Uri) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let location = format!("http://{}{path}", http_address(agent));
    (
        StatusCode::TEMPORARY_REDIRECT,
        [(header::LOCATION, location)],
    )
        .into_response()
}
