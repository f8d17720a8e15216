//! Errors of tiering, by meaning.

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Object storage failed or timed out (after its retries).
    #[error("object store: {context}: {source}")]
    Store {
        context: String,
        #[source]
        source: object_store::Error,
    },
    #[error("object store: {0} timed out")]
    Timeout(String),
    /// Bad configuration (an unusable store URL).
    #[error("tiering settings: {0}")]
    Config(String),
    /// A segment or archive file that does not encode or decode.
    #[error("archive codec: {0}")]
    Codec(String),
    /// An archived object whose bytes do not match the manifest.
    #[error("archived object {path} is corrupt: {reason}")]
    Corrupt { path: String, reason: String },
    #[error(transparent)]
    Metastore(#[from] strata_metastore::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// An injected fault (tests only).
    #[error("injected fault: {0}")]
    Injected(&'static str),
}
