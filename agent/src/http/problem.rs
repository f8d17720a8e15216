//! Errors of the HTTP API as RFC 9457 problem details (`application/problem+json`),
//! carrying the Kafka error name where a Kafka error is the cause, so that an HTTP
//! client and a Kafka client are told the same thing.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::model::ProblemBody;
use crate::error::Kind;
use crate::error_map::ApiError;

/// A problem-details response.
#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    pub detail: String,
    /// Kafka's name for the error (`UNKNOWN_TOPIC_OR_PARTITION`), where there is one.
    pub kafka_error: Option<String>,
}

impl Problem {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            detail: detail.into(),
            kafka_error: None,
        }
    }

    pub fn bad_request(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, detail)
    }

    /// A topic or partition that does not exist (404, UNKNOWN_TOPIC_OR_PARTITION).
    pub fn unknown_topic_or_partition(detail: impl Into<String>) -> Problem {
        let unknown = crate::error::Error::UnknownTopicOrPartition {
            topic: String::new(),
            partition: -1,
        };
        Problem::from(&unknown).detail(detail)
    }

    /// The same problem, with `detail` saying more than the error's own message.
    pub fn detail(mut self, detail: impl Into<String>) -> Problem {
        self.detail = detail.into();
        self
    }

    pub fn body(&self) -> ProblemBody<'_> {
        ProblemBody {
            kind: "about:blank".into(),
            title: self.status.canonical_reason().unwrap_or("Error").into(),
            status: self.status.as_u16(),
            detail: self.detail.as_str().into(),
            kafka_error: self.kafka_error.as_deref().map(Into::into),
            offsets: None,
        }
    }
}

/// An error as the Kafka edge would answer it, with the status of its kind.
impl From<ApiError> for Problem {
    fn from(e: ApiError) -> Problem {
        Problem {
            status: status_of(e.kind()),
            kafka_error: Some(e.name()),
            detail: e.message,
        }
    }
}

/// A service's refusal, with the status its kind maps to.
macro_rules! problems_from {
    ($($error:ty),* $(,)?) => {
        $(impl From<$error> for Problem {
            fn from(e: $error) -> Problem {
                Problem::from(ApiError::from(e))
            }
        })*
    };
}

problems_from!(
    &crate::error::Error,
    crate::error::Error,
    crate::group::GroupError,
    &crate::service::admin::AdminError,
    crate::service::admin::AdminError,
    &crate::service::configs::ConfigError,
    crate::service::configs::ConfigError,
    &crate::service::placement::PlacementError,
    &crate::service::security::SecurityError,
);

impl From<crate::service::security::SecurityError> for Problem {
    fn from(e: crate::service::security::SecurityError) -> Problem {
        Problem::from(&e)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            super::json::text(&self.body()),
        )
            .into_response()
    }
}

/// The HTTP status of each kind of error: the one place an error's status is decided
/// (routes answer a few of their own for what is not an error: a redirect, a consumer
/// instance gone from this agent, an operator's abort sent to an agent that does not
/// lead the partition).
pub fn status_of(kind: Kind) -> StatusCode {
    match kind {
        Kind::Invalid => StatusCode::BAD_REQUEST,
        Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
        Kind::Forbidden => StatusCode::FORBIDDEN,
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::Conflict => StatusCode::CONFLICT,
        Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::Policy => StatusCode::UNPROCESSABLE_ENTITY,
        Kind::Throttled => StatusCode::TOO_MANY_REQUESTS,
        Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<axum::extract::rejection::BytesRejection> for Problem {
    fn from(e: axum::extract::rejection::BytesRejection) -> Problem {
        Problem::new(e.status(), e.body_text())
    }
}

impl From<axum::extract::rejection::PathRejection> for Problem {
    fn from(e: axum::extract::rejection::PathRejection) -> Problem {
        Problem::new(e.status(), e.body_text())
    }
}

/// The path parameter and the body of a request, or the problem with them.
pub type Extracted<T> = Result<axum::extract::Path<T>, axum::extract::rejection::PathRejection>;
pub type Body = Result<bytes::Bytes, axum::extract::rejection::BytesRejection>;

/// The path parameter and the body, or the problem with the first that is wrong.
pub fn extract<T>(path: Extracted<T>, body: Body) -> Result<(T, bytes::Bytes), Problem> {
    Ok((path?.0, body?))
}
