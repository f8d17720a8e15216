//! Which API versions strata answers, and ApiVersions itself (including KIP-511: a client
//! that asks with a version we do not know gets a v0 answer listing what we do).

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;

/// Every API answered, with the version range. Each range lies within what the
/// `kafka-protocol` crate can decode; `docs/COMPATIBILITY.md` lists the tests.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

/// The supported range of `key`, if it is answered at all.
pub fn range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| (min, max))
}

pub fn is_supported(key: ApiKey, version: i16) -> bool {
    range(key).is_some_and(|(min, max)| (min..=max).contains(&version))
}

/// The ApiVersions response body, with `error_code` set (0 or UNSUPPORTED_VERSION).
pub fn api_versions(error_code: i16) -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.error_code = error_code;
    response.api_keys = SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = key as i16;
            v.min_version = min;
            v.max_version = max;
            v
        })
        .collect();
    // KIP-890: transactions v2 is on, so clients that speak it (the Java client from
    // 4.0) use it: Produce v12 adds partitions implicitly, EndTxn v5 bumps the epoch.
    let mut supported = SupportedFeatureKey::default();
    supported.name = StrBytes::from_static_str(TRANSACTION_VERSION);
    supported.min_version = 0;
    supported.max_version = 2;
    response.supported_features = vec![supported];
    let mut finalized = FinalizedFeatureKey::default();
    finalized.name = StrBytes::from_static_str(TRANSACTION_VERSION);
    finalized.min_version_level = 2;
    finalized.max_version_level = 2;
    response.finalized_features = vec![finalized];
    response.finalized_features_epoch = 1;
    response
}

/// The feature flag of KIP-890's transaction protocol versions.
const TRANSACTION_VERSION: &str = "transaction.version";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_lie_within_the_codec() {
        for &(key, min, max) in SUPPORTED {
            let codec = key.valid_versions();
            assert!(
                codec.min <= min && max <= codec.max,
                "{key:?} {min}..={max} outside {codec}"
            );
        }
    }
}
