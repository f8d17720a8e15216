//! Protocol-level tests against an in-process agent: every API at every version we
//! advertise, and the bad inputs of DESIGN.md invariant 6.
// These tests drive a real agent over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterPartitionReassignmentsRequest, ApiKey, ApiVersionsRequest,
    CreatePartitionsRequest, DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest, ElectLeadersRequest,
    FetchRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest,
    IncrementalAlterConfigsRequest, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest,
    ListGroupsRequest, ListOffsetsRequest, ListPartitionReassignmentsRequest, MetadataRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest,
    SyncGroupRequest, alter_configs_request, alter_partition_reassignments_request,
    create_partitions_request, delete_records_request, delete_topics_request,
    describe_configs_request, elect_leaders_request, fetch_request,
    incremental_alter_configs_request, join_group_request, leave_group_request,
    list_offsets_request, metadata_request, offset_commit_request, offset_delete_request,
    offset_fetch_request, offset_for_leader_epoch_request, sync_group_request,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest, alter_user_scram_credentials_request,
    describe_user_scram_credentials_request,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use strata_agent::api::versions::SUPPORTED;
#[path = "cases/security.rs"]
mod security_cases;
#[path = "cases/transactions.rs"]
mod txn_cases;

use strata_tests::{
    Client, TestAgent, batch, create, create_topic, name, produce, simple_batch, topic_id,
};

/// Produces and returns (error code, base offset).
async fn produce_one(
    client: &mut Client,
    version: i16,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> (i16, i64) {
    let r = client
        .send(version, &produce(topic, partition, records, -1))
        .await
        .expect("produce");
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn fetch(
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
    min_bytes: i32,
) -> FetchRequest {
    let mut p = fetch_request::FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = name(topic);
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.replica_id = kafka_protocol::messages::BrokerId(-1);
    r.max_wait_ms = max_wait_ms;
    r.min_bytes = min_bytes;
    r.max_bytes = 1 << 24;
    r.session_epoch = -1;
    r.topics = vec![t];
    r
}

fn list_offsets(topic: &str, partition: i32, timestamp: i64) -> ListOffsetsRequest {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.partition_index = partition;
    p.timestamp = timestamp;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut r = ListOffsetsRequest::default();
    r.replica_id = kafka_protocol::messages::BrokerId(-1);
    r.topics = vec![t];
    r
}

async fn latest_offset(client: &mut Client, topic: &str, partition: i32) -> i64 {
    let r = client
        .send(7, &list_offsets(topic, partition, -1))
        .await
        .expect("list offsets");
    r.topics[0].partitions[0].offset
}

/// Values of every record fetched from `offset`.
async fn fetch_values(
    client: &mut Client,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Vec<(i64, Option<Bytes>)> {
    let r = client
        .send(12, &fetch(topic, partition, offset, 0, 0))
        .await
        .expect("fetch");
    let data = &r.responses[0].partitions[0];
    assert_eq!(data.error_code, 0, "fetch error");
    let mut bytes = data.records.clone().unwrap_or_default();
    let sets = RecordBatchDecoder::decode_all(&mut bytes).expect("decode fetched batches");
    sets.into_iter()
        .flat_map(|s| s.records)
        .map(|r| (r.offset, r.value))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_answers_at_every_advertised_version() {
    let agent = TestAgent::start_with(|s| s.group_initial_rebalance_delay_ms = 0)
        .await
        .expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "t", 2, &[]).await, 0);
    assert_eq!(create(&mut c, "cp", 1, &[]).await, 0);
    let t_id = topic_id(&mut c, "t").await;
    assert!(!t_id.is_nil());
    let mut partitions_of_cp = 1;
    for &(api, min, max) in SUPPORTED {
        for v in min..=max {
            let ctx = format!("{api:?} v{v}");
            match api {
                ApiKey::ApiVersions => {
                    let r = c.answer(v, &ApiVersionsRequest::default(), &ctx).await;
                    assert_eq!(r.error_code, 0, "{ctx}");
                    assert_eq!(r.api_keys.len(), SUPPORTED.len(), "{ctx}");
                }
                ApiKey::Metadata => {
                    let mut req = MetadataRequest::default();
                    let mut t = metadata_request::MetadataRequestTopic::default();
                    t.name = Some(name("t"));
                    req.topics = Some(vec![t]);
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.topics[0].error_code, 0, "{ctx}");
                    assert_eq!(r.topics[0].partitions.len(), 2, "{ctx}");
                    assert_eq!(r.brokers.len(), 1, "{ctx}");
                }
                ApiKey::Produce => {
                    // v13 names topics by id only.
                    let mut req = produce("t", 0, simple_batch(2, 1_000), -1);
                    req.topic_data[0].topic_id = t_id;
                    let r = c.answer(v, &req, &ctx).await;
                    let p = &r.responses[0].partition_responses[0];
                    assert_eq!(p.error_code, 0, "{ctx}");
                    if v >= 13 {
                        assert_eq!(r.responses[0].topic_id, t_id, "{ctx}");
                    }
                }
                ApiKey::Fetch => {
                    // v13+ name topics by id only.
                    let mut req = fetch("t", 0, 0, 0, 0);
                    req.topics[0].topic_id = t_id;
                    let r = c.answer(v, &req, &ctx).await;
                    if v >= 13 {
                        assert_eq!(r.responses[0].topic_id, t_id, "{ctx}");
                    }
                    let p = &r.responses[0].partitions[0];
                    assert_eq!(p.error_code, 0, "{ctx}");
                    assert!(
                        p.records.as_ref().is_some_and(|b| !b.is_empty()),
                        "{ctx}: records"
                    );
                }
                ApiKey::ListOffsets => {
                    let r = c.answer(v, &list_offsets("t", 0, -2), &ctx).await;
                    assert_eq!(r.topics[0].partitions[0].error_code, 0, "{ctx}");
                    assert_eq!(r.topics[0].partitions[0].offset, 0, "{ctx}");
                }
                ApiKey::DeleteRecords => {
                    // Offset 0 moves nothing (the other APIs' checks still see offset
                    // 0); the retention tests move it for real.
                    let part = |index, offset| {
                        let mut p = delete_records_request::DeleteRecordsPartition::default();
                        p.partition_index = index;
                        p.offset = offset;
                        p
                    };
                    let mut t = delete_records_request::DeleteRecordsTopic::default();
                    t.name = name("t");
                    t.partitions = vec![part(0, 0), part(0, 1 << 40), part(99, 0)];
                    let mut req = DeleteRecordsRequest::default();
                    req.topics = vec![t];
                    req.timeout_ms = 5000;
                    let r = c.answer(v, &req, &ctx).await;
                    let got: Vec<(i16, i64)> = r.topics[0]
                        .partitions
                        .iter()
                        .map(|p| (p.error_code, p.low_watermark))
                        .collect();
                    assert_eq!(
                        got,
                        [
                            (0, 0),
                            (ResponseError::OffsetOutOfRange.code(), -1),
                            (ResponseError::UnknownTopicOrPartition.code(), -1)
                        ],
                        "{ctx}"
                    );
                }
                ApiKey::CreateTopics => {
                    let topic = format!("created-v{v}");
                    let r = c
                        .send(v, &create_topic(&topic, 1, &[("retention.ms", "60000")]))
                        .await
                        .unwrap_or_else(|e| panic!("{ctx}: {e:#}"));
                    assert_eq!(r.topics[0].error_code, 0, "{ctx}");
                }
                ApiKey::DeleteTopics => {
                    let topic = format!("deleted-v{v}");
                    assert_eq!(create(&mut c, &topic, 1, &[]).await, 0);
                    let mut req = DeleteTopicsRequest::default();
                    if v >= 6 {
                        let mut s = delete_topics_request::DeleteTopicState::default();
                        s.name = Some(name(&topic));
                        req.topics = vec![s];
                    } else {
                        req.topic_names = vec![name(&topic)];
                    }
                    req.timeout_ms = 5000;
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.responses[0].error_code, 0, "{ctx}");
                }
                ApiKey::DescribeConfigs => {
                    let mut res = describe_configs_request::DescribeConfigsResource::default();
                    res.resource_type = 2;
                    res.resource_name = StrBytes::from_static_str("t");
                    let mut req = DescribeConfigsRequest::default();
                    req.resources = vec![res];
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.results[0].error_code, 0, "{ctx}");
                    assert!(
                        r.results[0]
                            .configs
                            .iter()
                            .any(|c| c.name.as_str() == "retention.ms"),
                        "{ctx}"
                    );
                }
                ApiKey::AlterConfigs => {
                    let mut cfg = alter_configs_request::AlterableConfig::default();
                    cfg.name = StrBytes::from_static_str("retention.ms");
                    cfg.value = Some(StrBytes::from_static_str("1000"));
                    let mut res = alter_configs_request::AlterConfigsResource::default();
                    res.resource_type = 2;
                    res.resource_name = StrBytes::from_static_str("t");
                    res.configs = vec![cfg];
                    let mut req = AlterConfigsRequest::default();
                    req.resources = vec![res];
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.responses[0].error_code, 0, "{ctx}");
                }
                ApiKey::IncrementalAlterConfigs => {
                    let mut cfg = incremental_alter_configs_request::AlterableConfig::default();
                    cfg.name = StrBytes::from_static_str("cleanup.policy");
                    cfg.config_operation = 2;
                    cfg.value = Some(StrBytes::from_static_str("compact"));
                    let mut res =
                        incremental_alter_configs_request::AlterConfigsResource::default();
                    res.resource_type = 2;
                    res.resource_name = StrBytes::from_static_str("t");
                    res.configs = vec![cfg];
                    let mut req = IncrementalAlterConfigsRequest::default();
                    req.resources = vec![res];
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.responses[0].error_code, 0, "{ctx}");
                }
                ApiKey::CreatePartitions => {
                    partitions_of_cp += 1;
                    let mut t = create_partitions_request::CreatePartitionsTopic::default();
                    t.name = name("cp");
                    t.count = partitions_of_cp;
                    let mut req = CreatePartitionsRequest::default();
                    req.topics = vec![t];
                    req.timeout_ms = 5000;
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.results[0].error_code, 0, "{ctx}");
                }
                ApiKey::DescribeCluster => {
                    let r = c.answer(v, &DescribeClusterRequest::default(), &ctx).await;
                    assert_eq!(r.error_code, 0, "{ctx}");
                    assert_eq!(r.brokers.len(), 1, "{ctx}");
                }
                ApiKey::FindCoordinator => {
                    let mut req = FindCoordinatorRequest::default();
                    if v >= 4 {
                        req.coordinator_keys = vec![StrBytes::from_static_str("g")];
                    } else {
                        req.key = StrBytes::from_static_str("g");
                    }
                    let r = c.answer(v, &req, &ctx).await;
                    let node = if v >= 4 {
                        r.coordinators[0].node_id.0
                    } else {
                        r.node_id.0
                    };
                    assert_eq!((r.error_code, node), (0, 1), "{ctx}");
                }
                ApiKey::JoinGroup => {
                    let group = format!("join-v{v}");
                    let r = c.answer(v, &join_request(&group, ""), &ctx).await;
                    let r = if v >= 4 {
                        assert_eq!(
                            r.error_code,
                            ResponseError::MemberIdRequired.code(),
                            "{ctx}"
                        );
                        let id = r.member_id.to_string();
                        c.answer(v, &join_request(&group, &id), &ctx).await
                    } else {
                        r
                    };
                    assert_eq!(
                        (r.error_code, r.generation_id, r.members.len()),
                        (0, 1, 1),
                        "{ctx}"
                    );
                }
                ApiKey::SyncGroup => {
                    let group = format!("sync-v{v}");
                    let (member, generation) = join_alone(&mut c, &group).await;
                    let mut req = SyncGroupRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(group));
                    req.generation_id = generation;
                    req.member_id = StrBytes::from_string(member.clone());
                    if v >= 5 {
                        req.protocol_type = Some(StrBytes::from_static_str("consumer"));
                        req.protocol_name = Some(StrBytes::from_static_str("range"));
                    }
                    let mut a = sync_group_request::SyncGroupRequestAssignment::default();
                    a.member_id = StrBytes::from_string(member);
                    a.assignment = Bytes::from_static(b"assigned");
                    req.assignments = vec![a];
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(
                        (r.error_code, r.assignment.as_ref()),
                        (0, &b"assigned"[..]),
                        "{ctx}"
                    );
                }
                ApiKey::Heartbeat => {
                    let group = format!("hb-v{v}");
                    let (member, generation) = join_and_sync(&mut c, &group).await;
                    let mut req = HeartbeatRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(group));
                    req.generation_id = generation;
                    req.member_id = StrBytes::from_string(member);
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.error_code, 0, "{ctx}");
                }
                ApiKey::LeaveGroup => {
                    let group = format!("leave-v{v}");
                    let (member, _) = join_and_sync(&mut c, &group).await;
                    let mut req = LeaveGroupRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(group));
                    if v >= 3 {
                        let mut m = leave_group_request::MemberIdentity::default();
                        m.member_id = StrBytes::from_string(member);
                        req.members = vec![m];
                    } else {
                        req.member_id = StrBytes::from_string(member);
                    }
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.error_code, 0, "{ctx}");
                    if v >= 3 {
                        assert_eq!(r.members[0].error_code, 0, "{ctx}");
                    }
                }
                ApiKey::OffsetCommit => {
                    let r = c
                        .send(
                            v,
                            &commit_request("simple", "", -1, "t", 0, 10 + i64::from(v)),
                        )
                        .await
                        .unwrap_or_else(|e| panic!("{ctx}: {e:#}"));
                    assert_eq!(r.topics[0].partitions[0].error_code, 0, "{ctx}");
                }
                ApiKey::OffsetFetch => {
                    assert_eq!(commit(&mut c, "fetched", "", -1, 42).await, 0);
                    let mut req = OffsetFetchRequest::default();
                    if v >= 8 {
                        let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
                        g.group_id = GroupId(StrBytes::from_static_str("fetched"));
                        g.topics = None;
                        req.groups = vec![g];
                    } else {
                        req.group_id = GroupId(StrBytes::from_static_str("fetched"));
                        let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
                        t.name = name("t");
                        t.partition_indexes = vec![0, 1];
                        req.topics = Some(vec![t]);
                    }
                    let r = c.answer(v, &req, &ctx).await;
                    let offsets: Vec<i64> = if v >= 8 {
                        r.groups[0].topics[0]
                            .partitions
                            .iter()
                            .map(|p| p.committed_offset)
                            .collect()
                    } else {
                        r.topics[0]
                            .partitions
                            .iter()
                            .map(|p| p.committed_offset)
                            .collect()
                    };
                    let expected: &[i64] = if v >= 8 { &[42] } else { &[42, -1] };
                    assert_eq!(offsets, expected, "{ctx}");
                }
                ApiKey::ListGroups => {
                    let r = c.answer(v, &ListGroupsRequest::default(), &ctx).await;
                    assert_eq!(r.error_code, 0, "{ctx}");
                    assert!(
                        r.groups.iter().any(|g| g.group_id.0.as_str() == "simple"),
                        "{ctx}"
                    );
                }
                ApiKey::DescribeGroups => {
                    let group = format!("describe-v{v}");
                    join_and_sync(&mut c, &group).await;
                    let mut req = DescribeGroupsRequest::default();
                    req.groups = vec![
                        GroupId(StrBytes::from_string(group)),
                        GroupId(StrBytes::from_static_str("nobody")),
                    ];
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.groups[0].group_state.as_str(), "Stable", "{ctx}");
                    assert_eq!(r.groups[0].members.len(), 1, "{ctx}");
                    assert_eq!(r.groups[1].group_state.as_str(), "Dead", "{ctx}");
                }
                ApiKey::DeleteGroups => {
                    let group = format!("delete-v{v}");
                    let r = c
                        .send(8, &commit_request(&group, "", -1, "t", 0, 1))
                        .await
                        .expect("commit");
                    assert_eq!(r.topics[0].partitions[0].error_code, 0);
                    let mut req = DeleteGroupsRequest::default();
                    req.groups_names = vec![
                        GroupId(StrBytes::from_string(group)),
                        GroupId(StrBytes::from_static_str("never")),
                    ];
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.results[0].error_code, 0, "{ctx}");
                    assert_eq!(
                        r.results[1].error_code,
                        ResponseError::GroupIdNotFound.code(),
                        "{ctx}"
                    );
                }
                ApiKey::OffsetDelete => {
                    assert_eq!(commit(&mut c, "od", "", -1, 5).await, 0);
                    let mut p = offset_delete_request::OffsetDeleteRequestPartition::default();
                    p.partition_index = 0;
                    let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
                    t.name = name("t");
                    t.partitions = vec![p];
                    let mut req = OffsetDeleteRequest::default();
                    req.group_id = GroupId(StrBytes::from_static_str("od"));
                    req.topics = vec![t];
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(
                        (r.error_code, r.topics[0].partitions[0].error_code),
                        (0, 0),
                        "{ctx}"
                    );
                }
                ApiKey::ElectLeaders => {
                    // One agent: partition 0 of "t" is led by its preferred (only) replica.
                    let mut tp = elect_leaders_request::TopicPartitions::default();
                    tp.topic = name("t");
                    tp.partitions = vec![0];
                    let mut req = ElectLeadersRequest::default();
                    req.election_type = 0;
                    req.topic_partitions = Some(vec![tp]);
                    req.timeout_ms = 5000;
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(
                        r.replica_election_results[0].partition_result[0].error_code,
                        ResponseError::ElectionNotNeeded.code(),
                        "{ctx}"
                    );
                }
                ApiKey::AlterPartitionReassignments => {
                    // Cancelling when nothing moves; and a target naming an unknown agent.
                    let mut cancel =
                        alter_partition_reassignments_request::ReassignablePartition::default();
                    cancel.partition_index = 0;
                    cancel.replicas = None;
                    let mut bad = cancel.clone();
                    bad.partition_index = 1;
                    bad.replicas = Some(vec![kafka_protocol::messages::BrokerId(42)]);
                    let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
                    t.name = name("t");
                    t.partitions = vec![cancel, bad];
                    let mut req = AlterPartitionReassignmentsRequest::default();
                    req.timeout_ms = 5000;
                    req.topics = vec![t];
                    let r = c.answer(v, &req, &ctx).await;
                    let got = &r.responses[0].partitions;
                    assert_eq!(
                        got[0].error_code,
                        ResponseError::NoReassignmentInProgress.code(),
                        "{ctx}"
                    );
                    assert_eq!(
                        got[1].error_code,
                        ResponseError::InvalidReplicaAssignment.code(),
                        "{ctx}"
                    );
                }
                ApiKey::ListPartitionReassignments => {
                    let r = c
                        .answer(v, &ListPartitionReassignmentsRequest::default(), &ctx)
                        .await;
                    assert_eq!(r.error_code, 0, "{ctx}");
                    assert!(r.topics.is_empty(), "{ctx}: nothing is moving");
                }
                ApiKey::OffsetForLeaderEpoch => {
                    let mut p =
                        offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
                    p.partition = 0;
                    p.current_leader_epoch = if v >= 2 { 0 } else { -1 };
                    p.leader_epoch = 0;
                    let mut stale = p.clone();
                    stale.partition = 1;
                    stale.current_leader_epoch = 7;
                    let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
                    t.topic = name("t");
                    t.partitions = vec![p, stale];
                    let mut req = OffsetForLeaderEpochRequest::default();
                    req.replica_id = kafka_protocol::messages::BrokerId(-1);
                    req.topics = vec![t];
                    let r = c.answer(v, &req, &ctx).await;
                    let got = &r.topics[0].partitions;
                    assert_eq!(got[0].error_code, 0, "{ctx}");
                    assert_eq!(got[0].leader_epoch, 0, "{ctx}");
                    assert!(got[0].end_offset >= 0, "{ctx}");
                    // An epoch newer than the leader's: the asker knows of a later leader.
                    assert_eq!(
                        got[1].error_code,
                        ResponseError::UnknownLeaderEpoch.code(),
                        "{ctx}"
                    );
                }
                ApiKey::InitProducerId => {
                    let r = c.answer(v, &InitProducerIdRequest::default(), &ctx).await;
                    assert_eq!(r.error_code, 0, "{ctx}");
                    assert!(r.producer_id.0 >= 0, "{ctx}");
                }
                // This connection is on the PLAINTEXT listener: SASL is an illegal
                // state there, as in Kafka (the SASL listener: test_sasl.py).
                ApiKey::SaslHandshake => {
                    let mut req = SaslHandshakeRequest::default();
                    req.mechanism = StrBytes::from_static_str("PLAIN");
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(
                        r.error_code,
                        ResponseError::IllegalSaslState.code(),
                        "{ctx}"
                    );
                }
                ApiKey::SaslAuthenticate => {
                    let r = c.answer(v, &SaslAuthenticateRequest::default(), &ctx).await;
                    assert_eq!(
                        r.error_code,
                        ResponseError::IllegalSaslState.code(),
                        "{ctx}"
                    );
                }
                ApiKey::AlterUserScramCredentials => {
                    let mut u =
                        alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
                    u.name = StrBytes::from_string(format!("user-v{v}"));
                    u.mechanism = 2;
                    u.iterations = 4096;
                    u.salt = bytes::Bytes::from_static(b"salt");
                    u.salted_password = bytes::Bytes::from(vec![7u8; 64]);
                    let mut req = AlterUserScramCredentialsRequest::default();
                    req.upsertions = vec![u];
                    let r = c.answer(v, &req, &ctx).await;
                    assert_eq!(r.results.len(), 1, "{ctx}");
                    assert_eq!(r.results[0].error_code, 0, "{ctx}");
                    let mut d = describe_user_scram_credentials_request::UserName::default();
                    d.name = StrBytes::from_string(format!("user-v{v}"));
                    let mut req = DescribeUserScramCredentialsRequest::default();
                    req.users = Some(vec![d]);
                    let r = c.answer(0, &req, &ctx).await;
                    let infos = &r.results[0].credential_infos;
                    assert_eq!(
                        (infos[0].mechanism, infos[0].iterations),
                        (2, 4096),
                        "{ctx}"
                    );
                }
                ApiKey::DescribeUserScramCredentials => {
                    let r = c
                        .answer(v, &DescribeUserScramCredentialsRequest::default(), &ctx)
                        .await;
                    assert_eq!(r.error_code, 0, "{ctx}");
                }
                api if security_cases::handles(api) => security_cases::check(&mut c, api, v).await,
                api if txn_cases::handles(api) => txn_cases::check(&mut c, api, v).await,
                other => panic!("no test for advertised API {other:?}"),
            }
        }
    }
    // The configs set above stuck: retention.ms from AlterConfigs, cleanup.policy appended.
    let mut res = describe_configs_request::DescribeConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = StrBytes::from_static_str("t");
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![res];
    let r = c.send(4, &req).await.expect("describe");
    let get = |n: &str| {
        r.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == n)
            .and_then(|c| c.value.clone())
            .map(|v| v.to_string())
    };
    assert_eq!(get("cleanup.policy").as_deref(), Some("delete,compact"));
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_of_an_unknown_version_answers_v0_with_the_list() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    // ApiVersions v99: key 18, version 99, correlation id 7, client id null, then junk.
    let mut frame = vec![0, 18, 0, 99, 0, 0, 0, 7, 0xff, 0xff, 1, 2, 3];
    let mut raw = (frame.len() as i32).to_be_bytes().to_vec();
    raw.append(&mut frame);
    c.send_raw(&raw).await.expect("send");
    let mut body = c.read_frame().await.expect("read").expect("a response");
    let header =
        <kafka_protocol::messages::ResponseHeader as kafka_protocol::protocol::Decodable>::decode(
            &mut body, 0,
        )
        .expect("v0 header");
    assert_eq!(header.correlation_id, 7);
    let r = <kafka_protocol::messages::ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 0)
        .expect("v0 body");
    assert_eq!(r.error_code, ResponseError::UnsupportedVersion.code());
    assert!(
        r.api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::Produce as i16)
    );
    agent.stop().await;
}

/// Each of these closes only its own connection; the broker keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_their_connection() {
    let agent = TestAgent::start_with(|s| s.max_request_bytes = 1 << 20)
        .await
        .expect("start");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "frame over the size limit",
            (2i32 << 20).to_be_bytes().to_vec(),
        ),
        ("negative frame size", (-5i32).to_be_bytes().to_vec()),
        (
            "frame shorter than a header",
            [&4i32.to_be_bytes()[..], &[0, 3, 0, 1]].concat(),
        ),
        (
            "unknown API key",
            [&8i32.to_be_bytes()[..], &[0x7f, 0x00, 0, 1, 0, 0, 0, 1]].concat(),
        ),
        (
            "unsupported Metadata version",
            [
                &10i32.to_be_bytes()[..],
                &[0, 3, 0, 99, 0, 0, 0, 1, 0xff, 0xff],
            ]
            .concat(),
        ),
        (
            "garbage body",
            [
                &20i32.to_be_bytes()[..],
                &[0, 3, 0, 9, 0, 0, 0, 1],
                &[0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4],
            ]
            .concat(),
        ),
    ];
    for (what, bytes) in cases {
        let mut c = agent.client().await.expect("connect");
        c.send_raw(&bytes).await.expect("send");
        assert!(
            c.closed_by_broker().await,
            "{what}: connection should be closed"
        );
        // Everyone else is still served.
        let mut other = agent.client().await.expect("connect");
        let r = other
            .send(3, &ApiVersionsRequest::default())
            .await
            .expect(what);
        assert_eq!(r.error_code, 0, "{what}");
    }
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_get_their_error_and_append_nothing() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(
        create(&mut c, "b", 1, &[("max.message.bytes", "1000")]).await,
        0
    );
    let (code, base) = produce_one(&mut c, 9, "b", 0, simple_batch(3, 1000)).await;
    assert_eq!((code, base), (0, 0));

    // Bad CRC.
    let mut corrupt = simple_batch(3, 1000).to_vec();
    let n = corrupt.len();
    corrupt[n - 1] ^= 0xff;
    let (code, _) = produce_one(&mut c, 9, "b", 0, Bytes::from(corrupt)).await;
    assert_eq!(code, ResponseError::CorruptMessage.code(), "bad CRC");

    // Truncated batch (length field says more than was sent).
    let short = simple_batch(3, 1000).slice(..40);
    let (code, _) = produce_one(&mut c, 9, "b", 0, short).await;
    assert_eq!(code, ResponseError::CorruptMessage.code(), "short batch");

    // Over max.message.bytes.
    let big = vec![7u8; 2000];
    let large = batch(&[(None, Some(&big[..]), &[])], 1000, Compression::None);
    let (code, _) = produce_one(&mut c, 9, "b", 0, large).await;
    assert_eq!(code, ResponseError::MessageTooLarge.code(), "too large");

    // Unknown partition and unknown topic.
    let (code, _) = produce_one(&mut c, 9, "b", 7, simple_batch(1, 1000)).await;
    assert_eq!(
        code,
        ResponseError::UnknownTopicOrPartition.code(),
        "unknown partition"
    );
    let (code, _) = produce_one(&mut c, 9, "nope", 0, simple_batch(1, 1000)).await;
    assert_eq!(
        code,
        ResponseError::UnknownTopicOrPartition.code(),
        "unknown topic"
    );

    // Bad acks.
    let r = c
        .send(9, &produce("b", 0, simple_batch(1, 1000), 2))
        .await
        .expect("produce");
    assert_eq!(
        r.responses[0].partition_responses[0].error_code,
        ResponseError::InvalidRequiredAcks.code()
    );

    // Nothing of the above was appended, and the log still takes good batches.
    assert_eq!(latest_offset(&mut c, "b", 0).await, 3);
    let (code, base) = produce_one(&mut c, 9, "b", 0, simple_batch(2, 1000)).await;
    assert_eq!((code, base), (0, 3));
    let values: Vec<i64> = fetch_values(&mut c, "b", 0, 0)
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(values, [0, 1, 2, 3, 4]);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_admin_requests_get_their_error() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    for bad in ["", ".", "..", "has space", "slash/name", &"x".repeat(250)] {
        assert_eq!(
            create(&mut c, bad, 1, &[]).await,
            ResponseError::InvalidTopicException.code(),
            "{bad:?}"
        );
    }
    assert_eq!(
        create(&mut c, "ok", 0, &[]).await,
        ResponseError::InvalidPartitions.code()
    );
    assert_eq!(
        create(&mut c, "ok", 1, &[("retention.ms", "soon")]).await,
        ResponseError::InvalidConfig.code()
    );
    assert_eq!(
        create(&mut c, "ok", 1, &[("no.such.thing", "1")]).await,
        ResponseError::InvalidConfig.code()
    );
    let mut rf3 = create_topic("ok", 1, &[]);
    rf3.topics[0].replication_factor = 3;
    let r = c.send(7, &rf3).await.expect("create");
    assert_eq!(
        r.topics[0].error_code,
        ResponseError::InvalidReplicationFactor.code()
    );
    assert_eq!(create(&mut c, "ok", 1, &[]).await, 0);
    assert_eq!(
        create(&mut c, "ok", 1, &[]).await,
        ResponseError::TopicAlreadyExists.code()
    );

    // An invalid value through IncrementalAlterConfigs changes nothing.
    let mut cfg = incremental_alter_configs_request::AlterableConfig::default();
    cfg.name = StrBytes::from_static_str("segment.bytes");
    cfg.value = Some(StrBytes::from_static_str("-5"));
    let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = StrBytes::from_static_str("ok");
    res.configs = vec![cfg];
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![res];
    let r = c.send(1, &req).await.expect("alter");
    assert_eq!(
        r.responses[0].error_code,
        ResponseError::InvalidConfig.code()
    );

    // Fetch out of range.
    let r = c.send(12, &fetch("ok", 0, 5, 0, 0)).await.expect("fetch");
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::OffsetOutOfRange.code()
    );

    // FindCoordinator of a key type neither a group (0) nor a transaction (1): as Kafka,
    // INVALID_REQUEST for that key, and no coordinator.
    let mut find = FindCoordinatorRequest::default();
    find.key_type = 7;
    find.coordinator_keys = vec![StrBytes::from_static_str("g")];
    let r = c.send(4, &find).await.expect("find coordinator");
    let answered: Vec<(i16, i32)> = r
        .coordinators
        .iter()
        .map(|k| (k.error_code, k.node_id.0))
        .collect();
    assert_eq!(answered, [(ResponseError::InvalidRequest.code(), -1)]);
    find.key_type = 0;
    let r = c.send(4, &find).await.expect("find coordinator");
    assert_eq!(r.coordinators[0].error_code, 0);
    assert_eq!(r.coordinators[0].node_id.0, agent.broker().node_id());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_long_polls_until_data_arrives() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "lp", 1, &[]).await, 0);
    let addr = agent.kafka_addr();
    let waiting = tokio::spawn(async move {
        let mut f = Client::connect(addr).await.expect("connect");
        f.send(12, &fetch("lp", 0, 0, 30_000, 1))
            .await
            .expect("fetch")
    });
    // The long poll is parked (no data yet); producing wakes it well before 30 s.
    let started = std::time::Instant::now();
    let (code, _) = produce_one(&mut c, 9, "lp", 0, simple_batch(1, 1000)).await;
    assert_eq!(code, 0);
    let r = waiting.await.expect("join");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(25),
        "woken by the append, not the timeout"
    );
    assert!(
        r.responses[0].partitions[0]
            .records
            .as_ref()
            .is_some_and(|b| !b.is_empty())
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_in_the_middle_of_a_batch_and_timestamps_survive_restart() {
    let mut agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(
        create(&mut c, "ts", 1, &[("segment.bytes", "300")]).await,
        0
    );
    // Ten batches of five records; record i has timestamp 10_000 + 10 * i.
    for b in 0..10 {
        let values: Vec<String> = (0..5).map(|i| format!("r{}", b * 5 + i)).collect();
        let recs: Vec<kafka_protocol::records::Record> = values
            .iter()
            .enumerate()
            .map(|(i, v)| kafka_protocol::records::Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: kafka_protocol::records::TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32 - 1,
                timestamp: 10_000 + 10 * (b * 5 + i as i64),
                key: None,
                value: Some(Bytes::copy_from_slice(v.as_bytes())),
                headers: Default::default(),
            })
            .collect();
        let mut buf = bytes::BytesMut::new();
        kafka_protocol::records::RecordBatchEncoder::encode(
            &mut buf,
            &recs,
            &kafka_protocol::records::RecordEncodeOptions {
                version: 2,
                compression: Compression::Lz4,
            },
        )
        .expect("encode");
        let (code, base) = produce_one(&mut c, 9, "ts", 0, buf.freeze()).await;
        assert_eq!((code, base), (0, b * 5));
    }
    for round in 0..2 {
        // Offset 23 is in the middle of the batch 20..24: that whole batch comes back.
        let got = fetch_values(&mut c, "ts", 0, 23).await;
        assert_eq!(got.first().map(|r| r.0), Some(20), "round {round}");
        assert_eq!(
            got.iter().find(|r| r.0 == 23).and_then(|r| r.1.clone()),
            Some(Bytes::from_static(b"r23"))
        );
        // By timestamp: first record at or after the time.
        for (query, expected) in [
            (0, 0),
            (10_000, 0),
            (10_001, 1),
            (10_230, 23),
            (10_235, 24),
            (10_490, 49),
        ] {
            let r = c
                .send(7, &list_offsets("ts", 0, query))
                .await
                .expect("list");
            assert_eq!(
                r.topics[0].partitions[0].offset, expected,
                "round {round} query {query}"
            );
        }
        let r = c
            .send(7, &list_offsets("ts", 0, 10_491))
            .await
            .expect("list");
        assert_eq!(r.topics[0].partitions[0].offset, -1, "nothing that late");
        let r = c.send(7, &list_offsets("ts", 0, -3)).await.expect("max ts");
        assert_eq!(
            (
                r.topics[0].partitions[0].offset,
                r.topics[0].partitions[0].timestamp
            ),
            (49, 10_490)
        );
        agent.restart().await.expect("restart");
        c = agent.client().await.expect("reconnect");
    }
    agent.stop().await;
}

fn metadata_for(topic: &str, allow_auto_create: bool) -> MetadataRequest {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = allow_auto_create;
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_creation_follows_the_request_and_the_broker_setting() {
    let agent = TestAgent::start_with(|s| s.topic_defaults.num_partitions = 3)
        .await
        .expect("start");
    let mut c = agent.client().await.expect("connect");
    let r = c
        .send(12, &metadata_for("not-asked", false))
        .await
        .expect("metadata");
    assert_eq!(
        r.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let r = c
        .send(12, &metadata_for("asked", true))
        .await
        .expect("metadata");
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(
        r.topics[0].partitions.len(),
        3,
        "num.partitions default applies"
    );
    // v3 and older have no flag: the broker setting alone decides.
    let r = c
        .send(3, &metadata_for("old-client", true))
        .await
        .expect("metadata");
    assert_eq!(r.topics[0].error_code, 0);
    let r = c
        .send(12, &metadata_for("bad name!", true))
        .await
        .expect("metadata");
    assert_eq!(
        r.topics[0].error_code,
        ResponseError::InvalidTopicException.code()
    );
    agent.stop().await;

    let agent = TestAgent::start_with(|s| s.auto_create_topics = false)
        .await
        .expect("start");
    let mut c = agent.client().await.expect("connect");
    let r = c
        .send(12, &metadata_for("asked", true))
        .await
        .expect("metadata");
    assert_eq!(
        r.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_respects_partition_and_response_limits() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "lim", 2, &[]).await, 0);
    let big = vec![b'x'; 3000];
    for p in 0..2 {
        for _ in 0..4 {
            let (code, _) = produce_one(
                &mut c,
                9,
                "lim",
                p,
                batch(&[(None, Some(&big[..]), &[])], 1, Compression::None),
            )
            .await;
            assert_eq!(code, 0);
        }
    }
    let batch_len = batch(&[(None, Some(&big[..]), &[])], 1, Compression::None).len();
    let mut req = fetch("lim", 0, 0, 0, 0);
    let mut p1 = req.topics[0].partitions[0].clone();
    p1.partition = 1;
    req.topics[0].partitions.push(p1);

    // partition_max_bytes smaller than one batch: still one whole batch per partition.
    for p in &mut req.topics[0].partitions {
        p.partition_max_bytes = 100;
    }
    let r = c.send(12, &req).await.expect("fetch");
    let sizes: Vec<usize> = r.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
        .collect();
    assert_eq!(
        sizes,
        [batch_len, 0],
        "only the first batch of the response may exceed the limits"
    );

    // Room for two batches per partition, three in all.
    for p in &mut req.topics[0].partitions {
        p.partition_max_bytes = (2 * batch_len) as i32;
    }
    req.max_bytes = (3 * batch_len) as i32;
    let r = c.send(12, &req).await.expect("fetch");
    let sizes: Vec<usize> = r.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
        .collect();
    assert_eq!(sizes, [2 * batch_len, batch_len]);
    agent.stop().await;
}

fn join_request(group: &str, member_id: &str) -> JoinGroupRequest {
    let mut p = join_group_request::JoinGroupRequestProtocol::default();
    p.name = StrBytes::from_static_str("range");
    p.metadata = Bytes::from_static(b"\0\0\0\0\0\x01\0\x01t\0\0\0\0");
    let mut req = JoinGroupRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    req.session_timeout_ms = 10_000;
    req.rebalance_timeout_ms = 10_000;
    req.member_id = StrBytes::from_string(member_id.to_string());
    req.protocol_type = StrBytes::from_static_str("consumer");
    req.protocols = vec![p];
    req
}

/// Joins `group` as its only member (JoinGroup v5); returns (member id, generation).
async fn join_alone(c: &mut Client, group: &str) -> (String, i32) {
    let r = c.send(5, &join_request(group, "")).await.expect("join");
    assert_eq!(r.error_code, ResponseError::MemberIdRequired.code());
    let r = c
        .send(5, &join_request(group, r.member_id.as_str()))
        .await
        .expect("join");
    assert_eq!(r.error_code, 0);
    (r.member_id.to_string(), r.generation_id)
}

async fn join_and_sync(c: &mut Client, group: &str) -> (String, i32) {
    let (member, generation) = join_alone(c, group).await;
    let mut req = SyncGroupRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    req.generation_id = generation;
    req.member_id = StrBytes::from_string(member.clone());
    let r = c.send(3, &req).await.expect("sync");
    assert_eq!(r.error_code, 0);
    (member, generation)
}

fn commit_request(
    group: &str,
    member: &str,
    generation: i32,
    topic: &str,
    partition: i32,
    offset: i64,
) -> OffsetCommitRequest {
    let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
    p.partition_index = partition;
    p.committed_offset = offset;
    p.committed_metadata = Some(StrBytes::from_static_str("meta"));
    let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    req.generation_id_or_member_epoch = generation;
    req.member_id = StrBytes::from_string(member.to_string());
    req.topics = vec![t];
    req
}

/// Commits offset `offset` of t-0; returns the partition's error code.
async fn commit(c: &mut Client, group: &str, member: &str, generation: i32, offset: i64) -> i16 {
    let r = c
        .send(
            8,
            &commit_request(group, member, generation, "t", 0, offset),
        )
        .await
        .expect("commit");
    r.topics[0].partitions[0].error_code
}

async fn committed(c: &mut Client, group: &str) -> i64 {
    let mut req = OffsetFetchRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
    t.name = name("t");
    t.partition_indexes = vec![0];
    req.topics = Some(vec![t]);
    let r = c.send(7, &req).await.expect("offset fetch");
    r.topics[0].partitions[0].committed_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_from_a_stale_generation_is_refused_and_changes_nothing() {
    let mut agent = TestAgent::start_with(|s| s.group_initial_rebalance_delay_ms = 0)
        .await
        .expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "t", 1, &[]).await, 0);
    let (a, generation) = join_and_sync(&mut c, "g").await;
    assert_eq!(commit(&mut c, "g", &a, generation, 10).await, 0);
    // A second member joins and the group moves to the next generation.
    let mut c2 = agent.client().await.expect("connect");
    let r = c2.send(5, &join_request("g", "")).await.expect("join");
    let b = r.member_id.to_string();
    let waiting = tokio::spawn(async move {
        let r = c2.send(5, &join_request("g", &b)).await.expect("join");
        (c2, r)
    });
    // a learns of the rebalance from its heartbeat, then rejoins.
    let mut hb = HeartbeatRequest::default();
    hb.group_id = GroupId(StrBytes::from_static_str("g"));
    hb.generation_id = generation;
    hb.member_id = StrBytes::from_string(a.clone());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = c.send(4, &hb).await.expect("heartbeat");
        if r.error_code == ResponseError::RebalanceInProgress.code() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no rebalance signalled"
        );
        tokio::task::yield_now().await;
    }
    let r = c.send(5, &join_request("g", &a)).await.expect("rejoin");
    assert_eq!((r.error_code, r.generation_id), (0, generation + 1));
    let (_c2, rb) = waiting.await.expect("join b");
    assert_eq!(rb.generation_id, generation + 1);

    // The old generation, an unknown member, and a commit during CompletingRebalance: refused.
    assert_eq!(
        commit(&mut c, "g", &a, generation, 99).await,
        ResponseError::IllegalGeneration.code()
    );
    assert_eq!(
        commit(&mut c, "g", "who", generation + 1, 99).await,
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        commit(&mut c, "g", &a, generation + 1, 99).await,
        ResponseError::RebalanceInProgress.code()
    );
    assert_eq!(committed(&mut c, "g").await, 10, "nothing was written");

    // Offsets survive a restart; the group comes back empty.
    agent.restart().await.expect("restart");
    let mut c = agent.client().await.expect("reconnect");
    assert_eq!(committed(&mut c, "g").await, 10);
    let mut req = DescribeGroupsRequest::default();
    req.groups = vec![GroupId(StrBytes::from_static_str("g"))];
    let r = c.send(5, &req).await.expect("describe");
    assert_eq!(
        (r.groups[0].group_state.as_str(), r.groups[0].members.len()),
        ("Empty", 0)
    );
    assert_eq!(
        commit(&mut c, "g", &a, generation + 1, 99).await,
        ResponseError::IllegalGeneration.code()
    );
    agent.stop().await;
}

/// An idempotent batch for producer `pid`, epoch 0, first sequence `seq`. Timestamps are
/// current: producer state expires by the batches' timestamps (as in Kafka), and a
/// 1970 timestamp would expire at the agent's first maintenance tick.
fn idempotent_batch(pid: i64, seq: i32, values: &[&str]) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<kafka_protocol::records::Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| kafka_protocol::records::Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: 0,
            timestamp_type: kafka_protocol::records::TimestampType::Creation,
            offset: i as i64,
            sequence: seq + i as i32,
            timestamp: now,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    kafka_protocol::records::RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &kafka_protocol::records::RecordEncodeOptions {
            version: 2,
            compression: Compression::Zstd,
        },
    )
    .expect("encode");
    buf.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotent_batch_twice_is_stored_once() {
    let mut agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    assert_eq!(create(&mut c, "idem", 1, &[]).await, 0);
    let r = c
        .send(4, &InitProducerIdRequest::default())
        .await
        .expect("init");
    let pid = r.producer_id.0;
    let first = idempotent_batch(pid, 0, &["a", "b", "c"]);
    assert_eq!(
        produce_one(&mut c, 9, "idem", 0, first.clone()).await,
        (0, 0)
    );
    assert_eq!(
        produce_one(&mut c, 9, "idem", 0, idempotent_batch(pid, 3, &["d"])).await,
        (0, 3)
    );
    // The retry gets the original offset and appends nothing.
    assert_eq!(
        produce_one(&mut c, 9, "idem", 0, first.clone()).await,
        (0, 0)
    );
    assert_eq!(latest_offset(&mut c, "idem", 0).await, 4);
    // A gap, and an old epoch, are refused.
    let (code, _) = produce_one(&mut c, 9, "idem", 0, idempotent_batch(pid, 9, &["x"])).await;
    assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
    // After a restart the retry is still recognised.
    agent.restart().await.expect("restart");
    let mut c = agent.client().await.expect("reconnect");
    assert_eq!(produce_one(&mut c, 9, "idem", 0, first).await, (0, 0));
    assert_eq!(
        produce_one(&mut c, 9, "idem", 0, idempotent_batch(pid, 4, &["e"])).await,
        (0, 4)
    );
    let values: Vec<Option<Bytes>> = fetch_values(&mut c, "idem", 0, 0)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let expected: Vec<Option<Bytes>> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|v| Some(Bytes::from(*v)))
        .collect();
    assert_eq!(values, expected);
    // Producer ids are not reused across restarts.
    let r = c
        .send(4, &InitProducerIdRequest::default())
        .await
        .expect("init");
    assert!(r.producer_id.0 > pid);
    agent.stop().await;
}

/// A batch that skips sequence numbers, on a connection where the batch before it was
/// refused with an error the client answers by sending it again, is refused the same
/// way, not OUT_OF_ORDER_SEQUENCE_NUMBER: it was on its way before the client learned
/// of the refusal (a pipeline), and the client sends both again, in order. (Judged out
/// of order, librdkafka would bump its producer epoch and write twice the batches of
/// other partitions it had in flight: found by the cattle soak, where an agent becomes
/// leader between two pipelined requests.) Here the refusal is an unknown partition and
/// the state changes between the two batches because the topic is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_after_a_refused_one_on_its_connection_is_refused_as_it_was() {
    let agent = TestAgent::start().await.expect("start");
    let mut c = agent.client().await.expect("connect");
    let mut other = agent.client().await.expect("connect");
    let r = c
        .send(4, &InitProducerIdRequest::default())
        .await
        .expect("init");
    let pid = r.producer_id.0;
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let first = idempotent_batch(pid, 0, &["a"]);
    let second = idempotent_batch(pid, 1, &["b"]);
    assert_eq!(
        produce_one(&mut c, 9, "later", 0, first.clone()).await.0,
        unknown
    );
    assert_eq!(create(&mut other, "later", 1, &[]).await, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while latest_offset(&mut other, "later", 0).await != 0 {
        assert!(std::time::Instant::now() < deadline, "the topic is served");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The batch after the refused one is refused as it was, on its connection only.
    let (code, _) = produce_one(&mut c, 9, "later", 0, second.clone()).await;
    assert_eq!(code, unknown, "held to the refusal before it");
    let (code, _) = produce_one(&mut other, 9, "later", 0, second.clone()).await;
    assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
    // Sent again in order, both are written once.
    assert_eq!(produce_one(&mut c, 9, "later", 0, first).await, (0, 0));
    assert_eq!(produce_one(&mut c, 9, "later", 0, second).await, (0, 1));
    let values: Vec<Option<Bytes>> = fetch_values(&mut c, "later", 0, 0)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, vec![Some(Bytes::from("a")), Some(Bytes::from("b"))]);
    // Once a batch is written, a gap is out of order again.
    let (code, _) = produce_one(&mut c, 9, "later", 0, idempotent_batch(pid, 9, &["x"])).await;
    assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
    agent.stop().await;
}

/// A topic created through one agent is picked up by another agent on the same metastore
/// through the metastore watch, sooner than the 5 s maintenance refresh would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_one_metastore_follow_topic_changes_through_the_watch() {
    let a = TestAgent::start().await.expect("start a");
    let shared = a.settings.metastore_path();
    let b = TestAgent::start_with(|s| {
        s.node_id = 2;
        s.metastore_path = Some(shared.clone());
    })
    .await
    .expect("start b");
    let mut client = a.client().await.expect("connect");
    assert_eq!(create(&mut client, "followed", 2, &[]).await, 0);
    let created = std::time::Instant::now();
    while b.broker().replicas().topic("followed").is_none() {
        assert!(
            created.elapsed() < std::time::Duration::from_secs(4),
            "the second agent did not pick the topic up within 4 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    b.stop().await;
    a.stop().await;
}
