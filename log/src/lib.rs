//! strata's on-disk partition log.
//!
//! Kafka RecordBatch v2 bytes are stored as received, after the broker assigns offsets in
//! the batch header, so fetches serve them without re-encoding. A partition's log is a
//! directory of segments named by base offset, each with a sparse offset index and a time
//! index. See `docs/log-format.md` for the on-disk format and the fsync policy.

pub mod batch;
pub mod compaction;
pub mod epochs;
pub mod error;
pub mod index;
pub mod partition_log;
pub mod producer_state;
mod reader;
pub mod segment;
pub mod txn;

pub use batch::{BatchHeader, TimestampType};
pub use epochs::{Cut, EpochHistory};
pub use error::{Error, Result};
pub use partition_log::{
    AppendOutcome, ClosedSegmentInfo, FlushTarget, LogConfig, PartitionLog, ReadPlan, Recovery,
    Sealed,
};
