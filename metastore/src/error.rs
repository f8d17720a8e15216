//! Errors of the metastore, by meaning.

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another transaction got in the way; running the transaction again may succeed.
    #[error("transaction conflict: {0}")]
    Conflict(String),
    /// The commit may or may not have applied (FoundationDB's `commit_unknown_result`).
    /// Retrying is safe because every typed operation is idempotent.
    #[error("transaction outcome unknown: it may have committed")]
    MaybeCommitted,
    /// A limit that FoundationDB enforces (and so every backend enforces).
    #[error("metastore limit exceeded: {0}")]
    LimitExceeded(String),
    /// The transaction ran longer than the 5 s every backend allows.
    #[error("transaction too old: it ran for more than {limit_ms} ms")]
    TransactionTooOld { limit_ms: u64 },
    /// A call (every attempt of its transaction together) did not finish within the
    /// metastore's deadline: the backend is slow, unreachable or hung.
    #[error("the metastore did not answer within {after_ms} ms")]
    DeadlineExceeded { after_ms: u64 },
    /// The agent is stopping and gave up on the call; it may have committed.
    #[error("metastore call abandoned: shutting down")]
    ShuttingDown,
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error(
        "node id {node_id} is in use by a live agent at {holder} (its lease runs {lease_left_ms} ms more)"
    )]
    NodeIdInUse {
        node_id: i32,
        holder: String,
        lease_left_ms: i64,
    },
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A controller's decision was refused: the caller does not hold the controller
    /// lease (another agent does, or nobody) at the time of the transaction.
    #[error("agent {node_id} does not hold the controller lease (held by {holder:?})")]
    NotController { node_id: i32, holder: Option<i32> },
    /// A value in the store does not decode: a bug or a newer writer.
    #[error("corrupt metastore value at {key}: {reason}")]
    Corrupt { key: String, reason: String },
    /// The backend itself failed (I/O, a locked file, a lost connection).
    #[error("metastore backend failed: {context}: {source}")]
    Backend {
        context: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl Error {
    /// Whether running the whole transaction again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Conflict(_) | Error::TransactionTooOld { .. } | Error::MaybeCommitted
        )
    }

    pub(crate) fn backend(
        context: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Backend {
            context,
            source: Box::new(source),
        }
    }
}
