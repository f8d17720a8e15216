//! The errors of strata's services, in domain terms. [`crate::error_map`] is the one
//! place they become Kafka error codes, and each code a [`Kind`]: what the caller
//! should do about it. The Kafka edge sends the code; the HTTP edge answers the status
//! of the kind (`http/problem.rs`) and never reasons in Kafka codes.

use crate::partition::PartitionError;

/// What kind of failure an error is, by what its caller should do about it. One Kafka
/// code has one kind, so the Kafka and HTTP answers to an error never disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request is malformed or asks for what cannot be: do not send it again.
    Invalid,
    /// The caller has not proved who it is.
    Unauthenticated,
    /// The caller is known but may not do this.
    Forbidden,
    /// What the request names does not exist.
    NotFound,
    /// The resource's state or generation does not allow it now (a stale member, a
    /// group with members, a topic that exists).
    Conflict,
    /// The request or a record in it is larger than allowed.
    TooLarge,
    /// Valid, but refused by a policy (writes disabled, a limit reached).
    Policy,
    /// Over its quota: slow down.
    Throttled,
    /// Not possible at the moment (no leader, a coordinator moving, a timeout): try
    /// again.
    Unavailable,
    /// The agent failed (storage, the metastore): not the caller's doing.
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller may not do this to the resource (Kafka's TOPIC_, GROUP_, CLUSTER_ or
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, by `resource`).
    #[error("{principal} may not {operation} {} {name}", .resource.name())]
    Denied {
        principal: String,
        operation: &'static str,
        resource: crate::authz::ResourceType,
        name: String,
    },
    #[error("topic-partition {topic}-{partition} does not exist")]
    UnknownTopicOrPartition { topic: String, partition: i32 },
    /// The partition exists, but another agent leads it.
    #[error("this agent does not lead {topic}-{partition}")]
    NotLeader { topic: String, partition: i32 },
    /// The partition has no leader now (Kafka's LEADER_NOT_AVAILABLE).
    #[error("{topic}-{partition} has no leader")]
    LeaderNotAvailable { topic: String, partition: i32 },
    /// Another agent could not be reached (Kafka's NETWORK_EXCEPTION).
    #[error("cannot reach agent {agent}: {why}")]
    Unreachable { agent: i32, why: String },
    /// The agent a request was sent on to refused it, with Kafka's error `code`;
    /// `retriable` when the request surely did not happen and may be sent again.
    #[error("agent {agent}: {message}")]
    Elsewhere {
        agent: i32,
        code: i16,
        message: String,
        retriable: bool,
    },
    /// This agent could not renew its cluster lease: another may be elected in its
    /// place, so it takes no writes until it renews.
    #[error("this agent could not renew its cluster lease and takes no writes until it does")]
    LeaseLapsed,
    #[error("acks must be -1, 0 or 1, not {0}")]
    InvalidAcks(String),
    /// The caller did not prove who it is (Kafka's SASL_AUTHENTICATION_FAILED).
    #[error("{0}")]
    Unauthenticated(String),
    /// The request asks for something that cannot be (Kafka's INVALID_REQUEST).
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Transaction(#[from] TxnError),
    #[error(transparent)]
    Group(#[from] crate::group::GroupError),
    /// Not tried, because another part of the same request was refused (Kafka's
    /// OPERATION_NOT_ATTEMPTED).
    #[error("not attempted: another part of the request was refused")]
    NotAttempted,
    #[error("the request holds no record batch")]
    NoRecords,
    /// An operator disabled writes to the partition; reads go on.
    #[error(
        "writes to {topic}-{partition} are disabled by an operator ({reason}); reads go on, and POST /v1/topics/{topic}/partitions/{partition}/enable restores writes"
    )]
    Disabled {
        topic: String,
        partition: i32,
        reason: String,
    },
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

impl Error {
    /// `who` may not do `operation` on the resource `name` of type `resource`.
    pub fn denied(
        who: &crate::caller::Caller,
        operation: crate::authz::Operation,
        resource: crate::authz::ResourceType,
        name: &str,
    ) -> Error {
        Error::Denied {
            principal: who.principal.to_string(),
            operation: operation.name(),
            resource,
            name: name.to_string(),
        }
    }

    /// The request surely did not happen, and a client tries it again after a pause,
    /// at the leader it learns then: no such partition (yet), a leader that moved or
    /// is not there, too few in-sync replicas to take it.
    pub fn retriable(&self) -> bool {
        use crate::partition::PartitionError as P;
        match self {
            Error::UnknownTopicOrPartition { .. }
            | Error::NotLeader { .. }
            | Error::LeaderNotAvailable { .. }
            | Error::LeaseLapsed
            | Error::Partition(P::NotLeader(_) | P::NotEnoughReplicas { .. }) => true,
            Error::Elsewhere { retriable, .. } => *retriable,
            _ => false,
        }
    }
}

impl Error {
    /// This agent does not lead the partition (any more): its leader must be asked.
    pub fn is_not_leader(&self) -> bool {
        matches!(
            self,
            Error::NotLeader { .. } | Error::Partition(PartitionError::NotLeader(_))
        )
    }
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

/// Why a transaction request is refused; [`crate::error_map`] maps each to its Kafka
/// code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("this agent does not coordinate the transactional id")]
    NotCoordinator,
    #[error("the transaction coordinator is not available: {0}")]
    CoordinatorNotAvailable(String),
    #[error("a previous transaction of this transactional id is still being completed")]
    ConcurrentTransactions,
    #[error("the producer id is not the one assigned to this transactional id")]
    InvalidProducerIdMapping,
    #[error("a newer producer with the same transactional id has fenced this one")]
    ProducerFenced,
    #[error("the transaction is {0}: {1}")]
    InvalidTxnState(&'static str, String),
    #[error("transaction.timeout.ms {requested} is above transaction.max.timeout.ms {max}")]
    InvalidTimeout { requested: i64, max: i64 },
    #[error("no transaction has this transactional id")]
    TransactionalIdNotFound,
}
