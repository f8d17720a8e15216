//! Errors of the log, by meaning. The agent maps them to Kafka error codes in one place.

use std::io;
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A produced batch failed its structural checks or CRC (Kafka: CORRUPT_MESSAGE).
    #[error("corrupt record batch: {reason}")]
    CorruptBatch { reason: String },
    /// A produced batch is well formed but breaks a rule (Kafka: INVALID_RECORD).
    #[error("invalid record batch: {reason}")]
    InvalidRecord { reason: String },
    /// A compacted topic was sent records without a key (Kafka: INVALID_RECORD, with
    /// an error per record); `records` are their indexes in the batch.
    #[error("compacted topic cannot accept records without a key (records {records:?})")]
    RecordsWithoutKey { records: Vec<i32> },
    /// A produced batch is larger than the topic's `max.message.bytes` (MESSAGE_TOO_LARGE).
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    BatchTooLarge { size: usize, max: usize },
    /// A produced compressed batch whose records take more than `max` bytes once
    /// decompressed, the agent's `max_request_bytes` (MESSAGE_TOO_LARGE): found, and
    /// refused, before it is all in memory.
    #[error(
        "record batch decompresses to more than {max} bytes, the largest request this agent reads (max_request_bytes)"
    )]
    DecompressedTooLarge { max: usize },
    /// An idempotent producer's batch does not continue its sequence
    /// (OUT_OF_ORDER_SEQUENCE_NUMBER).
    #[error("producer {producer_id}: expected sequence {expected}, got {got}")]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    /// An idempotent producer's batch carries an epoch older than the partition has seen
    /// (INVALID_PRODUCER_EPOCH).
    #[error("producer {producer_id}: epoch {got} is older than the current {current}")]
    InvalidProducerEpoch {
        producer_id: i64,
        current: i16,
        got: i16,
    },
    /// A transaction marker from a coordinator older than the last one that wrote a
    /// marker for the producer (TRANSACTION_COORDINATOR_FENCED).
    #[error("producer {producer_id}: coordinator epoch {got} is older than the current {current}")]
    CoordinatorFenced {
        producer_id: i64,
        current: i32,
        got: i32,
    },
    /// A transactional write the partition cannot take in the transaction's state
    /// (INVALID_TXN_STATE).
    #[error("invalid transaction state: {reason}")]
    InvalidTxnState { reason: String },
    /// A read below the log start or above the log end (OFFSET_OUT_OF_RANGE).
    #[error("offset {offset} is outside the log [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    /// A closed segment whose contents contradict its neighbours or its index.
    #[error("segment {} is corrupt: {reason}", path.display())]
    CorruptSegment { path: PathBuf, reason: String },
    #[error("{context} {}: {source}", path.display())]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn corrupt(reason: String) -> Error {
        Error::CorruptBatch { reason }
    }
}

impl Error {
    /// A read that would have waited for the disk ([`crate::ReadPlan::cached_only`]).
    pub fn would_block(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Attaches a verb phrase and the file to an I/O error.
pub(crate) trait IoContext<T> {
    fn context(self, context: &'static str, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, context: &'static str, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| Error::Io {
            context,
            path: path.to_path_buf(),
            source,
        })
    }
}
