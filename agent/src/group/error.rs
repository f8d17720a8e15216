//! What the group coordinator refuses, in its own terms; `api/errors.rs` gives each its
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
}
