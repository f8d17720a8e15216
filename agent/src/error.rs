//! The errors of strata's services, in domain terms. The protocol edges translate them:
//! `api/errors.rs` to Kafka error codes (and later the HTTP API to statuses); nothing
//! below the edges knows either.

use crate::partition::PartitionError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("topic-partition {topic}-{partition} does not exist")]
    UnknownTopicOrPartition { topic: String, partition: i32 },
    /// The partition exists, but another agent leads it.
    #[error("this agent does not lead {topic}-{partition}")]
    NotLeader { topic: String, partition: i32 },
    /// This agent could not renew its cluster lease: another may be elected in its
    /// place, so it takes no writes until it renews.
    #[error("this agent could not renew its cluster lease and takes no writes until it does")]
    LeaseLapsed,
    #[error("acks must be -1, 0 or 1, not {0}")]
    InvalidAcks(i16),
    #[error(transparent)]
    Transaction(#[from] crate::txn::TxnError),
    #[error("the request holds no record batch")]
    NoRecords,
    /// A write was appended but not replicated to the in-sync replicas in time.
    #[error("the write did not reach every in-sync replica within the request timeout")]
    NotReplicatedInTime,
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error(transparent)]
    Metastore(#[from] strata_metastore::Error),
    #[error(transparent)]
    Sync(#[from] SyncError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a topic could not be brought in line with the metastore.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Metastore(#[from] strata_metastore::Error),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// Opening the topic's replicas here would exceed the open-file budget.
    #[error("cannot open the replicas of topic {topic} here: {why}")]
    FileBudget { topic: String, why: String },
}
