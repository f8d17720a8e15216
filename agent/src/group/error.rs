//! What the group coordinator refuses, in its own terms; `error_map.rs` gives each its
//! Kafka code (the names are Kafka's, so the mapping is one to one).

/// Why a group request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("this agent does not coordinate the group")]
    NotCoordinator,
    #[error("the group coordinator is not available")]
    CoordinatorNotAvailable,
    #[error("the group does not know this member")]
    UnknownMemberId,
    #[error("the member's generation is not the group's")]
    IllegalGeneration,
    #[error("the group is rebalancing: join again")]
    RebalanceInProgress,
    #[error("join again with the member id given (KIP-394)")]
    MemberIdRequired,
    #[error("another member holds this group instance id")]
    FencedInstanceId,
    #[error("the member's protocols share none with the group's")]
    InconsistentGroupProtocol,
    #[error(
        "the session timeout is outside group.min.session.timeout.ms and group.max.session.timeout.ms"
    )]
    InvalidSessionTimeout,
    #[error("no such group")]
    GroupIdNotFound,
    #[error("the group still has members")]
    NonEmptyGroup,
    #[error("the group is subscribed to the topic")]
    GroupSubscribedToTopic,
    #[error("a group id may not be empty")]
    InvalidGroupId,
    #[error("the commit's metadata is longer than offset.metadata.max.bytes (4096)")]
    OffsetMetadataTooLarge,
    #[error("no such topic or partition")]
    UnknownTopicOrPartition,
    /// The caller may not do this to the group (its ACLs).
    #[error(
        "not authorized for this group: it needs READ on it (DESCRIBE to read offsets, DELETE to delete)"
    )]
    GroupAuthorizationFailed,
    /// The caller may not do this to the topic (its ACLs).
    #[error("not authorized for this topic: a commit needs READ on it, reading offsets DESCRIBE")]
    TopicAuthorizationFailed,
    /// An open transaction has staged an offset for the partition (KIP-447): ask again.
    #[error("an open transaction has staged an offset for this partition")]
    UnstableOffsetCommit,
}

impl GroupError {
    /// Kafka's name for it (the audit log puts it before the message).
    pub fn name(self) -> &'static str {
        match self {
            GroupError::NotCoordinator => "NOT_COORDINATOR",
            GroupError::CoordinatorNotAvailable => "COORDINATOR_NOT_AVAILABLE",
            GroupError::UnknownMemberId => "UNKNOWN_MEMBER_ID",
            GroupError::IllegalGeneration => "ILLEGAL_GENERATION",
            GroupError::RebalanceInProgress => "REBALANCE_IN_PROGRESS",
            GroupError::MemberIdRequired => "MEMBER_ID_REQUIRED",
            GroupError::FencedInstanceId => "FENCED_INSTANCE_ID",
            GroupError::InconsistentGroupProtocol => "INCONSISTENT_GROUP_PROTOCOL",
            GroupError::InvalidSessionTimeout => "INVALID_SESSION_TIMEOUT",
            GroupError::GroupIdNotFound => "GROUP_ID_NOT_FOUND",
            GroupError::NonEmptyGroup => "NON_EMPTY_GROUP",
            GroupError::GroupSubscribedToTopic => "GROUP_SUBSCRIBED_TO_TOPIC",
            GroupError::InvalidGroupId => "INVALID_GROUP_ID",
            GroupError::OffsetMetadataTooLarge => "OFFSET_METADATA_TOO_LARGE",
            GroupError::UnknownTopicOrPartition => "UNKNOWN_TOPIC_OR_PARTITION",
            GroupError::GroupAuthorizationFailed => "GROUP_AUTHORIZATION_FAILED",
            GroupError::TopicAuthorizationFailed => "TOPIC_AUTHORIZATION_FAILED",
            GroupError::UnstableOffsetCommit => "UNSTABLE_OFFSET_COMMIT",
        }
    }
}
