//! The one place where strata's errors become Kafka error codes, and each code a
//! [`Kind`]. Above the services (it names their errors), below the edges. The Kafka
//! edge sends [`ApiError::code`]; the HTTP edge reads only [`ApiError::kind`] and
//! [`ApiError::name`].

use kafka_protocol::error::ResponseError;

use crate::authz::ResourceType;
use crate::error::{Error, Kind};
use crate::group::GroupError;
use crate::partition::PartitionError;
use crate::service::admin::AdminError;
use crate::service::configs::ConfigError;
use crate::service::placement::PlacementError;
use crate::service::security::SecurityError;

/// A Kafka error code with the message sent to the client where the API has a field.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: ResponseError,
    pub message: String,
    /// Produce only: the records refused, by index in their batch, with why (Kafka's
    /// `record_errors`, Produce v8+).
    pub record_errors: Vec<(i32, String)>,
}

impl ApiError {
    pub fn new(code: ResponseError, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            record_errors: Vec::new(),
        }
    }

    pub fn code(&self) -> i16 {
        self.code.code()
    }

    /// What the caller should do about it.
    pub fn kind(&self) -> Kind {
        kind_of(self.code)
    }

    /// Kafka's name for the error (`UNKNOWN_TOPIC_OR_PARTITION`), which the HTTP API
    /// carries beside its status so that HTTP and Kafka clients are told the same.
    pub fn name(&self) -> String {
        crate::metrics::kafka_error_name(self.code.code())
    }

    /// The same error with its message replaced: `detail`, which says more.
    pub fn with_message(mut self, message: impl Into<String>) -> ApiError {
        self.message = message.into();
        self
    }
}

impl Error {
    /// The offset asked for is outside the partition's log, here or at the agent the
    /// request went on to.
    pub fn is_offset_out_of_range(&self) -> bool {
        ApiError::from(self).code == ResponseError::OffsetOutOfRange
    }

    /// Kafka's name for the error, as the HTTP API reports it beside other outcomes.
    pub fn kafka_name(&self) -> String {
        ApiError::from(self).name()
    }
}

/// The kind of a Kafka error: what does not exist, what conflicts with a resource's
/// state or generation, what is too large, what is refused, what clients retry, and
/// the rest of the client's mistakes.
pub fn kind_of(code: ResponseError) -> Kind {
    use ResponseError as E;
    match code {
        E::UnknownTopicOrPartition
        | E::UnknownTopicId
        | E::GroupIdNotFound
        | E::TransactionalIdNotFound
        | E::ResourceNotFound => Kind::NotFound,
        E::IllegalGeneration
        | E::UnknownMemberId
        | E::RebalanceInProgress
        | E::FencedInstanceId
        | E::NonEmptyGroup
        | E::GroupSubscribedToTopic
        | E::TopicAlreadyExists
        | E::DuplicateResource
        | E::OffsetOutOfRange
        | E::InvalidProducerEpoch
        | E::ProducerFenced
        | E::TransactionCoordinatorFenced
        | E::InvalidTxnState
        | E::SecurityDisabled => Kind::Conflict,
        E::MessageTooLarge | E::RecordListTooLarge | E::OffsetMetadataTooLarge => Kind::TooLarge,
        E::TopicAuthorizationFailed
        | E::GroupAuthorizationFailed
        | E::ClusterAuthorizationFailed
        | E::TransactionalIdAuthorizationFailed => Kind::Forbidden,
        E::SaslAuthenticationFailed => Kind::Unauthenticated,
        E::PolicyViolation => Kind::Policy,
        E::ThrottlingQuotaExceeded => Kind::Throttled,
        E::UnknownServerError | E::KafkaStorageError => Kind::Internal,
        c if c.is_retriable() => Kind::Unavailable,
        _ => Kind::Invalid,
    }
}

impl From<&PartitionError> for ApiError {
    fn from(e: &PartitionError) -> Self {
        use strata_log::Error as L;
        if let PartitionError::Log(L::RecordsWithoutKey { records }) = e {
            // Kafka's words, so that clients and operators recognise them.
            let why = "Compacted topic cannot accept message without key.";
            return ApiError {
                code: ResponseError::InvalidRecord,
                message: format!(
                    "One or more records have been rejected due to {} record errors in total: {why}",
                    records.len()
                ),
                record_errors: records.iter().map(|i| (*i, why.to_string())).collect(),
            };
        }
        let code = match e {
            PartitionError::Log(L::RecordsWithoutKey { .. }) => ResponseError::InvalidRecord,
            PartitionError::Log(L::CorruptBatch { .. }) => ResponseError::CorruptMessage,
            PartitionError::Log(L::InvalidRecord { .. }) => ResponseError::InvalidRecord,
            PartitionError::Log(L::BatchTooLarge { .. } | L::DecompressedTooLarge { .. }) => {
                ResponseError::MessageTooLarge
            }
            PartitionError::Log(L::OffsetOutOfRange { .. }) => ResponseError::OffsetOutOfRange,
            PartitionError::Log(L::OutOfOrderSequence { .. }) => {
                ResponseError::OutOfOrderSequenceNumber
            }
            PartitionError::Log(L::InvalidProducerEpoch { .. }) => {
                ResponseError::InvalidProducerEpoch
            }
            PartitionError::Log(L::InvalidTxnState { .. }) => ResponseError::InvalidTxnState,
            PartitionError::Log(L::CoordinatorFenced { .. }) => {
                ResponseError::TransactionCoordinatorFenced
            }
            PartitionError::NotLeader(_) => ResponseError::NotLeaderOrFollower,
            PartitionError::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
            PartitionError::UnknownLeaderEpoch { .. } => ResponseError::UnknownLeaderEpoch,
            PartitionError::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
            PartitionError::OffsetNotAvailable { .. } => ResponseError::OffsetNotAvailable,
            PartitionError::NotEnoughReplicasAfterAppend { .. } => {
                ResponseError::NotEnoughReplicasAfterAppend
            }
            PartitionError::Archive(_) | PartitionError::Compaction(_) => {
                tracing::warn!(error = %e, "archive read failed");
                ResponseError::KafkaStorageError
            }
            PartitionError::Log(L::CorruptSegment { .. } | L::Io { .. })
            | PartitionError::Offline(_)
            | PartitionError::Interrupted(_) => {
                tracing::error!(error = %e, "storage error");
                ResponseError::KafkaStorageError
            }
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<strata_metastore::Error> for ApiError {
    fn from(e: strata_metastore::Error) -> Self {
        ApiError::from(&e)
    }
}

impl From<&strata_metastore::Error> for ApiError {
    fn from(e: &strata_metastore::Error) -> Self {
        use strata_metastore::Error as M;
        let code = match e {
            M::TopicExists(_) => ResponseError::TopicAlreadyExists,
            M::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
            M::Invalid(_) => ResponseError::InvalidRequest,
            M::NotController { .. } => ResponseError::NotController,
            M::Conflict(_)
            | M::TransactionTooOld { .. }
            | M::MaybeCommitted
            | M::DeadlineExceeded { .. }
            | M::ShuttingDown => ResponseError::RequestTimedOut,
            M::LimitExceeded(_) => ResponseError::PolicyViolation,
            M::Corrupt { .. } | M::Backend { .. } | M::NodeIdInUse { .. } => {
                tracing::error!(error = %e, "metastore error");
                ResponseError::UnknownServerError
            }
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<PartitionError> for ApiError {
    fn from(e: PartitionError) -> Self {
        ApiError::from(&e)
    }
}

impl From<&Error> for ApiError {
    fn from(e: &Error) -> Self {
        match e {
            Error::Denied { resource, .. } => ApiError::new(denied(*resource), e.to_string()),
            Error::UnknownTopicOrPartition { .. } => ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                "This server does not host this topic-partition.",
            ),
            Error::NotLeader { .. } => ApiError::new(
                ResponseError::NotLeaderOrFollower,
                "This server does not lead this topic-partition.",
            ),
            Error::LeaseLapsed => ApiError::new(
                ResponseError::NotLeaderOrFollower,
                "This agent could not renew its cluster lease and takes no writes until it does.",
            ),
            Error::InvalidAcks(_) => {
                ApiError::new(ResponseError::InvalidRequiredAcks, e.to_string())
            }
            Error::InvalidRequest(_) => ApiError::new(ResponseError::InvalidRequest, e.to_string()),
            Error::Unauthenticated(_) => {
                ApiError::new(ResponseError::SaslAuthenticationFailed, e.to_string())
            }
            Error::LeaderNotAvailable { .. } => {
                ApiError::new(ResponseError::LeaderNotAvailable, e.to_string())
            }
            Error::Unreachable { .. } => {
                ApiError::new(ResponseError::NetworkException, e.to_string())
            }
            Error::Elsewhere { code, message, .. } => ApiError::new(
                ResponseError::try_from_code(*code).unwrap_or(ResponseError::UnknownServerError),
                message.clone(),
            ),
            Error::Transaction(e) => ApiError::from(e),
            Error::Group(e) => ApiError::from(*e),
            Error::NotAttempted => {
                ApiError::new(ResponseError::OperationNotAttempted, e.to_string())
            }
            Error::NoRecords => ApiError::new(
                ResponseError::InvalidRecord,
                "produce request holds no record batch",
            ),
            // Not retriable, so that a producer learns at once rather than after its
            // delivery timeout.
            Error::Disabled { .. } => ApiError::new(ResponseError::PolicyViolation, e.to_string()),
            Error::NotReplicatedInTime => {
                ApiError::new(ResponseError::RequestTimedOut, e.to_string())
            }
            Error::Partition(e) => ApiError::from(e),
            Error::Metastore(e) => ApiError::from(e),
            Error::Sync(e) => ApiError::from(e),
        }
    }
}

/// The code of a refusal by the ACLs of a resource of this kind.
pub fn denied(resource: ResourceType) -> ResponseError {
    match resource {
        ResourceType::Topic => ResponseError::TopicAuthorizationFailed,
        ResourceType::Group => ResponseError::GroupAuthorizationFailed,
        ResourceType::Cluster => ResponseError::ClusterAuthorizationFailed,
        ResourceType::TransactionalId => ResponseError::TransactionalIdAuthorizationFailed,
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::from(&e)
    }
}

impl From<&crate::replicas::SyncError> for ApiError {
    fn from(e: &crate::replicas::SyncError) -> Self {
        match e {
            crate::replicas::SyncError::Metastore(e) => ApiError::from(e),
            crate::replicas::SyncError::Partition(e) => ApiError::from(e),
            e @ crate::replicas::SyncError::FileBudget { .. } => {
                ApiError::new(ResponseError::InvalidPartitions, e.to_string())
            }
        }
    }
}

impl From<crate::replicas::SyncError> for ApiError {
    fn from(e: crate::replicas::SyncError) -> Self {
        ApiError::from(&e)
    }
}

impl From<GroupError> for ApiError {
    fn from(e: GroupError) -> Self {
        let code = match e {
            GroupError::NotCoordinator => ResponseError::NotCoordinator,
            GroupError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
            GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
            GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
            GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
            GroupError::MemberIdRequired => ResponseError::MemberIdRequired,
            GroupError::FencedInstanceId => ResponseError::FencedInstanceId,
            GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
            GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
            GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
            GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
            GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
            GroupError::InvalidGroupId => ResponseError::InvalidGroupId,
            GroupError::OffsetMetadataTooLarge => ResponseError::OffsetMetadataTooLarge,
            GroupError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
            GroupError::GroupAuthorizationFailed => ResponseError::GroupAuthorizationFailed,
            GroupError::TopicAuthorizationFailed => ResponseError::TopicAuthorizationFailed,
            GroupError::UnstableOffsetCommit => ResponseError::UnstableOffsetCommit,
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<&crate::txn::TxnError> for ApiError {
    fn from(e: &crate::txn::TxnError) -> Self {
        use crate::txn::TxnError as T;
        let code = match e {
            T::NotCoordinator => ResponseError::NotCoordinator,
            T::CoordinatorNotAvailable(_) => ResponseError::CoordinatorNotAvailable,
            T::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
            T::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
            T::ProducerFenced => ResponseError::ProducerFenced,
            T::InvalidTxnState(..) => ResponseError::InvalidTxnState,
            T::InvalidTimeout { .. } => ResponseError::InvalidTransactionTimeout,
            T::TransactionalIdNotFound => ResponseError::TransactionalIdNotFound,
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<crate::txn::TxnError> for ApiError {
    fn from(e: crate::txn::TxnError) -> Self {
        ApiError::from(&e)
    }
}

impl From<&AdminError> for ApiError {
    fn from(e: &AdminError) -> Self {
        let code = match e {
            AdminError::Denied { .. } => ResponseError::TopicAuthorizationFailed,
            AdminError::ClusterDenied { .. } => ResponseError::ClusterAuthorizationFailed,
            AdminError::InvalidTopic(_) => ResponseError::InvalidTopicException,
            AdminError::TopicExists(_) => ResponseError::TopicAlreadyExists,
            AdminError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
            AdminError::UnknownTopicId(_) => ResponseError::UnknownTopicId,
            AdminError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            AdminError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            AdminError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            AdminError::InvalidConfig(_) => ResponseError::InvalidConfig,
            AdminError::InvalidRequest(_) => ResponseError::InvalidRequest,
            AdminError::Metastore(e) => return ApiError::from(e),
            AdminError::Sync(e) => return ApiError::from(e),
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        ApiError::from(&e)
    }
}

impl From<&ConfigError> for ApiError {
    fn from(e: &ConfigError) -> Self {
        let code = match e {
            ConfigError::Denied { resource, .. } => denied(*resource),
            ConfigError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
            ConfigError::Invalid(_) => ResponseError::InvalidConfig,
            ConfigError::InvalidRequest(_) => ResponseError::InvalidRequest,
            ConfigError::NotApplied(_) => ResponseError::UnknownServerError,
            ConfigError::Metastore(m) => return ApiError::from(m),
            ConfigError::Sync(e) => return ApiError::from(e),
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<ConfigError> for ApiError {
    fn from(e: ConfigError) -> Self {
        ApiError::from(&e)
    }
}

impl From<&PlacementError> for ApiError {
    fn from(e: &PlacementError) -> Self {
        let code = match e {
            PlacementError::Denied { .. } => ResponseError::ClusterAuthorizationFailed,
            PlacementError::UnknownPartition(_) => ResponseError::UnknownTopicOrPartition,
            PlacementError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            PlacementError::NoReassignmentInProgress => ResponseError::NoReassignmentInProgress,
            PlacementError::ElectionNotNeeded(_) => ResponseError::ElectionNotNeeded,
            PlacementError::EligibleLeadersNotAvailable => {
                ResponseError::EligibleLeadersNotAvailable
            }
            PlacementError::PreferredLeaderNotAvailable => {
                ResponseError::PreferredLeaderNotAvailable
            }
            PlacementError::Metastore(m) => return ApiError::from(m),
            PlacementError::Sync(e) => return ApiError::from(e),
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<&SecurityError> for ApiError {
    fn from(e: &SecurityError) -> Self {
        let code = match e {
            SecurityError::Denied { .. } => ResponseError::ClusterAuthorizationFailed,
            SecurityError::Disabled => ResponseError::SecurityDisabled,
            SecurityError::Invalid(_) => ResponseError::InvalidRequest,
            SecurityError::NotFound(_) => ResponseError::ResourceNotFound,
            SecurityError::Duplicate(_) => ResponseError::DuplicateResource,
            SecurityError::UnacceptableCredential(_) => ResponseError::UnacceptableCredential,
            SecurityError::UnsupportedMechanism(_) => ResponseError::UnsupportedSaslMechanism,
            SecurityError::Metastore(m) => return ApiError::from(m.as_ref()),
        };
        ApiError::new(code, e.to_string())
    }
}
