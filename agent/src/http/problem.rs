//! Errors of the HTTP API as RFC 9457 problem details (`application/problem+json`),
//! carrying the Kafka error name where a Kafka error is the cause, so that an HTTP
//! client and a Kafka client are told the same thing.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use kafka_protocol::error::ResponseError;

use crate::api::errors::ApiError;

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
        Problem::kafka(ResponseError::UnknownTopicOrPartition, detail)
    }

    /// A Kafka error, with the status an HTTP client should act on.
    pub fn kafka(code: ResponseError, detail: impl Into<String>) -> Problem {
        Problem {
            status: status_of(code),
            detail: detail.into(),
            kafka_error: Some(crate::metrics::kafka_error_name(code.code())),
        }
    }

    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Some(name) = &self.kafka_error {
            body["kafka_error"] = name.as_str().into();
        }
        body
    }
}

impl From<ApiError> for Problem {
    fn from(e: ApiError) -> Problem {
        Problem::kafka(e.code, e.message)
    }
}

/// A service's refusal, with the status its kind maps to.
impl From<&crate::error::Error> for Problem {
    fn from(e: &crate::error::Error) -> Problem {
        Problem::from(ApiError::from(e))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            self.body().to_string(),
        )
            .into_response()
    }
}

/// The HTTP status for a Kafka error: 404 for what does not exist, 409 for a stale
/// generation or a conflicting state, 413 for what is too large, 503 (retry) for what
/// Kafka clients retry, 403 for refusals, 400 for the rest of the client's mistakes.
pub fn status_of(code: ResponseError) -> StatusCode {
    use ResponseError as E;
    match code {
        E::UnknownTopicOrPartition | E::GroupIdNotFound | E::TransactionalIdNotFound => {
            StatusCode::NOT_FOUND
        }
        E::IllegalGeneration
        | E::UnknownMemberId
        | E::RebalanceInProgress
        | E::FencedInstanceId
        | E::NonEmptyGroup
        | E::GroupSubscribedToTopic
        | E::TopicAlreadyExists
        | E::OffsetOutOfRange
        | E::InvalidProducerEpoch => StatusCode::CONFLICT,
        E::MessageTooLarge | E::RecordListTooLarge | E::OffsetMetadataTooLarge => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        E::TopicAuthorizationFailed
        | E::GroupAuthorizationFailed
        | E::ClusterAuthorizationFailed
        | E::TransactionalIdAuthorizationFailed => StatusCode::FORBIDDEN,
        E::PolicyViolation => StatusCode::UNPROCESSABLE_ENTITY,
        E::UnknownServerError | E::KafkaStorageError => StatusCode::INTERNAL_SERVER_ERROR,
        c if c.is_retriable() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
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
