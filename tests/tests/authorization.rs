//! The negative suite of authorization: with an authorizer configured, a principal
//! without ACLs is refused by every API strata answers, with Kafka's code, and nothing
//! changes (checked afterwards). The principal is the PLAINTEXT listener's
//! `User:ANONYMOUS`; it is first granted everything (through the metastore, as no one
//! could grant it over Kafka yet) to set up a topic, records, a group's offsets and a
//! transactional id, then the grant is deleted.
// These tests drive a real agent over real sockets, so they wait in real time.
#![allow(clippy::disallowed_methods)]

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strata_agent::api::versions::SUPPORTED;
use strata_metastore::AclRecord;
use strata_tests::{Client, TestAgent, create, name, produce, simple_batch, topic_id};

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
const TXN_DENIED: i16 = 53;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// ALL on every resource of each type, for `User:ANONYMOUS`.
fn grant_all() -> Vec<AclRecord> {
    [(2, "*"), (3, "*"), (4, "kafka-cluster"), (5, "*")]
        .into_iter()
        .map(|(t, n)| AclRecord {
            resource_type: t,
            resource_name: n.to_string(),
            pattern_type: 3,
            principal: "User:ANONYMOUS".to_string(),
            host: "*".to_string(),
            operation: 2,
            permission: 3,
        })
        .collect()
}

async fn set_acls(agent: &TestAgent, grant: bool) {
    let m = agent.broker().metastore();
    m.delete_acls(|_| true).await.expect("delete acls");
    if grant {
        m.create_acls(grant_all()).await.expect("create acls");
    }
    agent
        .broker()
        .authorizer()
        .refresh()
        .await
        .expect("refresh");
}

/// An agent with the ACL authorizer (super user `User:root`), everything granted to
/// `User:ANONYMOUS`, and a client as that principal.
async fn granted_agent() -> (TestAgent, Client) {
    let agent = TestAgent::start_with(|s| {
        s.authorizer = "acl".to_string();
        s.super_users = "User:root".to_string();
    })
    .await
    .expect("start");
    let c = agent.client().await.expect("connect");
    set_acls(&agent, true).await;
    (agent, c)
}

fn topic_request(topic: &str) -> Option<Vec<metadata_request::MetadataRequestTopic>> {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(name(topic));
    Some(vec![t])
}

/// A fetch (version `v`) of partition 0 of `topic`, named by `id` too for v13+, as
/// `replica` (-1: a consumer).
fn fetch(v: i16, topic: &str, id: uuid::Uuid, replica: i32) -> FetchRequest {
    let mut p = fetch_request::FetchPartition::default();
    p.partition = 0;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = name(topic);
    t.topic_id = id;
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    if v >= 15 {
        r.replica_id = BrokerId(-1);
        r.replica_state.replica_id = BrokerId(replica);
    } else {
        r.replica_id = BrokerId(replica);
    }
    r.max_bytes = 1 << 20;
    r.session_epoch = -1;
    r.topics = vec![t];
    r
}

fn list_offsets(topic: &str) -> ListOffsetsRequest {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = -1;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut r = ListOffsetsRequest::default();
    r.replica_id = BrokerId(-1);
    r.topics = vec![t];
    r
}

fn offset_commit(group: &str, topic: &str, offset: i64) -> OffsetCommitRequest {
    let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = offset;
    let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(s(group));
    r.generation_id_or_member_epoch = -1;
    r.topics = vec![t];
    r
}

fn offset_fetch(group: &str, topic: &str) -> OffsetFetchRequest {
    let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
    t.name = name(topic);
    t.partition_indexes = vec![0];
    let mut r = OffsetFetchRequest::default();
    r.group_id = GroupId(s(group));
    r.topics = Some(vec![t]);
    r
}

fn config_resource(
    resource_type: i8,
    name: &str,
) -> describe_configs_request::DescribeConfigsResource {
    let mut res = describe_configs_request::DescribeConfigsResource::default();
    res.resource_type = resource_type;
    res.resource_name = s(name);
    res
}

/// What the suite checks afterwards: the state the refused requests would have changed.
#[derive(Debug, PartialEq)]
struct State {
    topics: Vec<(String, usize)>,
    end_offset: i64,
    log_start: i64,
    committed: i64,
    retention: Option<String>,
    groups: usize,
    acls: usize,
    users: usize,
    quotas: usize,
}

async fn state(c: &mut Client, agent: &TestAgent) -> State {
    let m = agent.broker().metastore();
    let mut topics: Vec<(String, usize)> = m
        .topics()
        .await
        .expect("topics")
        .into_iter()
        .map(|t| (t.name, t.partitions.len()))
        .collect();
    topics.sort();
    let offsets = c.send(7, &list_offsets("t")).await.expect("list offsets");
    let mut earliest = list_offsets("t");
    earliest.topics[0].partitions[0].timestamp = -2;
    let earliest = c.send(7, &earliest).await.expect("list offsets");
    let fetched = c
        .send(7, &offset_fetch("g", "t"))
        .await
        .expect("offset fetch");
    let configs = {
        let mut r = DescribeConfigsRequest::default();
        r.resources = vec![config_resource(2, "t")];
        c.send(4, &r).await.expect("describe configs")
    };
    let retention = configs.results[0]
        .configs
        .iter()
        .find(|e| e.name.as_str() == "retention.ms" && e.config_source == 1)
        .and_then(|e| e.value.as_ref().map(|v| v.to_string()));
    let groups = c
        .send(4, &ListGroupsRequest::default())
        .await
        .expect("list groups")
        .groups
        .len();
    State {
        topics,
        end_offset: offsets.topics[0].partitions[0].offset,
        log_start: earliest.topics[0].partitions[0].offset,
        committed: fetched.topics[0].partitions[0].committed_offset,
        retention,
        groups,
        acls: m.acls().await.expect("acls").len(),
        users: m.all_user_credentials().await.expect("users").len(),
        quotas: m.quotas().await.expect("quotas").len(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_without_acls_is_refused_by_every_api_and_nothing_changes() {
    let agent = TestAgent::start_with(|s| {
        s.authorizer = "acl".to_string();
        s.group_initial_rebalance_delay_ms = 0;
    })
    .await
    .expect("start");
    let mut c = agent.client().await.expect("connect");

    // Nothing is allowed before any ACL exists (allow_everyone_if_no_acl_found is off).
    assert_eq!(create(&mut c, "t", 2, &[]).await, TOPIC_DENIED);

    set_acls(&agent, true).await;
    assert_eq!(create(&mut c, "t", 2, &[]).await, 0);
    for _ in 0..3 {
        let r = c
            .send(9, &produce("t", 0, simple_batch(2, 1_000), -1))
            .await
            .expect("produce");
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let r = c
        .send(8, &offset_commit("g", "t", 4))
        .await
        .expect("commit");
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let before = state(&mut c, &agent).await;
    let t_id = topic_id(&mut c, "t").await;
    assert_eq!(before.end_offset, 6);
    assert_eq!(before.committed, 4);

    set_acls(&agent, false).await;
    let group = || GroupId(s("g"));
    for &(api, _, max) in SUPPORTED {
        let v = max;
        let ctx = format!("{api:?} v{v}");
        match api {
            ApiKey::ApiVersions => {
                let r = c.send(v, &ApiVersionsRequest::default()).await.expect(&ctx);
                assert_eq!(r.error_code, 0, "{ctx}: needs no authorization");
            }
            ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
                // Part of authenticating, never authorized; the SASL suites cover them.
            }
            ApiKey::Produce => {
                // v13 names topics by id.
                let produce = |topic, partition, records, acks| {
                    let mut r = produce(topic, partition, records, acks);
                    r.topic_data[0].topic_id = t_id;
                    r
                };
                let r = c
                    .send(v, &produce("t", 0, simple_batch(1, 1_000), -1))
                    .await
                    .expect(&ctx);
                assert_eq!(
                    r.responses[0].partition_responses[0].error_code, TOPIC_DENIED,
                    "{ctx}"
                );
                let mut req = produce("t", 0, simple_batch(1, 1_000), -1);
                req.transactional_id = Some(TransactionalId(s("tx")));
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(
                    r.responses[0].partition_responses[0].error_code, TXN_DENIED,
                    "{ctx}"
                );
            }
            ApiKey::Fetch => {
                let r = c.send(v, &fetch(v, "t", t_id, -1)).await.expect(&ctx);
                let p = &r.responses[0].partitions[0];
                assert_eq!(p.error_code, TOPIC_DENIED, "{ctx}");
                assert!(
                    p.records.as_ref().is_none_or(|b| b.is_empty()),
                    "{ctx}: records leaked"
                );
                // A follower's fetch needs CLUSTER_ACTION.
                let r = c.send(v, &fetch(v, "t", t_id, 1)).await.expect(&ctx);
                assert_eq!(
                    r.responses[0].partitions[0].error_code, TOPIC_DENIED,
                    "{ctx} as replica"
                );
            }
            ApiKey::ListOffsets => {
                let r = c.send(v, &list_offsets("t")).await.expect(&ctx);
                assert_eq!(r.topics[0].partitions[0].error_code, TOPIC_DENIED, "{ctx}");
            }
            ApiKey::OffsetForLeaderEpoch => {
                let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
                p.leader_epoch = 0;
                p.current_leader_epoch = -1;
                let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
                t.topic = name("t");
                t.partitions = vec![p];
                let mut req = OffsetForLeaderEpochRequest::default();
                req.replica_id = BrokerId(-1);
                req.topics = vec![t];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.topics[0].partitions[0].error_code, TOPIC_DENIED, "{ctx}");
            }
            ApiKey::Metadata => {
                let mut all = MetadataRequest::default();
                all.topics = None;
                all.include_topic_authorized_operations = true;
                let r = c.send(v, &all).await.expect(&ctx);
                assert!(r.topics.is_empty(), "{ctx}: topics shown: {:?}", r.topics);
                let mut named = MetadataRequest::default();
                named.topics = topic_request("t");
                let r = c.send(v, &named).await.expect(&ctx);
                assert_eq!(r.topics[0].error_code, TOPIC_DENIED, "{ctx}");
                assert!(r.topics[0].partitions.is_empty(), "{ctx}");
                let mut create = MetadataRequest::default();
                create.topics = topic_request("auto");
                create.allow_auto_topic_creation = true;
                let r = c.send(v, &create).await.expect(&ctx);
                assert_eq!(r.topics[0].error_code, TOPIC_DENIED, "{ctx}: auto-create");
            }
            ApiKey::CreateTopics => {
                let r = c
                    .send(v, &strata_tests::create_topic("x", 1, &[]))
                    .await
                    .expect(&ctx);
                assert_eq!(r.topics[0].error_code, TOPIC_DENIED, "{ctx}");
            }
            ApiKey::DeleteTopics => {
                let mut req = DeleteTopicsRequest::default();
                let mut t = delete_topics_request::DeleteTopicState::default();
                t.name = Some(name("t"));
                req.topics = vec![t];
                req.topic_names = vec![name("t")];
                req.timeout_ms = 5000;
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.responses[0].error_code, TOPIC_DENIED, "{ctx}");
            }
            ApiKey::CreatePartitions => {
                let mut t = create_partitions_request::CreatePartitionsTopic::default();
                t.name = name("t");
                t.count = 4;
                let mut req = CreatePartitionsRequest::default();
                req.topics = vec![t];
                req.timeout_ms = 5000;
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.results[0].error_code, TOPIC_DENIED, "{ctx}");
            }
            ApiKey::DeleteRecords => {
                let mut p = delete_records_request::DeleteRecordsPartition::default();
                p.offset = 4;
                let mut t = delete_records_request::DeleteRecordsTopic::default();
                t.name = name("t");
                t.partitions = vec![p];
                let mut req = DeleteRecordsRequest::default();
                req.topics = vec![t];
                req.timeout_ms = 5000;
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.topics[0].partitions[0].error_code, TOPIC_DENIED, "{ctx}");
            }
            ApiKey::DescribeConfigs => {
                let mut req = DescribeConfigsRequest::default();
                req.resources = vec![config_resource(2, "t"), config_resource(4, "1")];
                let r = c.send(v, &req).await.expect(&ctx);
                let mut codes: Vec<(i8, i16)> = r
                    .results
                    .iter()
                    .map(|x| (x.resource_type, x.error_code))
                    .collect();
                codes.sort();
                assert_eq!(codes, [(2, TOPIC_DENIED), (4, CLUSTER_DENIED)], "{ctx}");
                assert!(r.results.iter().all(|x| x.configs.is_empty()), "{ctx}");
            }
            ApiKey::AlterConfigs => {
                let mut e = alter_configs_request::AlterableConfig::default();
                e.name = s("retention.ms");
                e.value = Some(s("1"));
                let mut res = alter_configs_request::AlterConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = s("t");
                res.configs = vec![e];
                let mut req = AlterConfigsRequest::default();
                req.resources = vec![res];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.responses[0].error_code, TOPIC_DENIED, "{ctx}");
            }
            ApiKey::IncrementalAlterConfigs => {
                let mut e = incremental_alter_configs_request::AlterableConfig::default();
                e.name = s("retention.ms");
                e.value = Some(s("1"));
                let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = s("t");
                res.configs = vec![e];
                let mut broker = incremental_alter_configs_request::AlterConfigsResource::default();
                broker.resource_type = 4;
                broker.resource_name = s("");
                let mut e = incremental_alter_configs_request::AlterableConfig::default();
                e.name = s("log.retention.ms");
                e.value = Some(s("1"));
                broker.configs = vec![e];
                let mut req = IncrementalAlterConfigsRequest::default();
                req.resources = vec![res, broker];
                let r = c.send(v, &req).await.expect(&ctx);
                let mut codes: Vec<(i8, i16)> = r
                    .responses
                    .iter()
                    .map(|x| (x.resource_type, x.error_code))
                    .collect();
                codes.sort();
                assert_eq!(codes, [(2, TOPIC_DENIED), (4, CLUSTER_DENIED)], "{ctx}");
            }
            ApiKey::DescribeCluster => {
                let mut req = DescribeClusterRequest::default();
                req.include_cluster_authorized_operations = true;
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, 0, "{ctx}: needs no authorization");
                assert_eq!(r.cluster_authorized_operations, 0, "{ctx}: operations");
            }
            ApiKey::FindCoordinator => {
                let mut req = FindCoordinatorRequest::default();
                req.coordinator_keys = vec![s("g")];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.coordinators.len(), 1, "{ctx}: {r:?}");
                assert_eq!(r.coordinators[0].error_code, GROUP_DENIED, "{ctx}");
                req.key_type = 1;
                req.coordinator_keys = vec![s("tx")];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.coordinators[0].error_code, TXN_DENIED, "{ctx}");
                let mut old = FindCoordinatorRequest::default();
                old.key = s("g");
                let r = c.send(3, &old).await.expect(&ctx);
                assert_eq!(r.error_code, GROUP_DENIED, "{ctx} (v3)");
            }
            ApiKey::JoinGroup => {
                let mut p = join_group_request::JoinGroupRequestProtocol::default();
                p.name = s("range");
                let mut req = JoinGroupRequest::default();
                req.group_id = group();
                req.session_timeout_ms = 10_000;
                req.rebalance_timeout_ms = 10_000;
                req.protocol_type = s("consumer");
                req.protocols = vec![p];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, GROUP_DENIED, "{ctx}");
            }
            ApiKey::SyncGroup => {
                let mut req = SyncGroupRequest::default();
                req.group_id = group();
                req.member_id = s("m");
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, GROUP_DENIED, "{ctx}");
            }
            ApiKey::Heartbeat => {
                let mut req = HeartbeatRequest::default();
                req.group_id = group();
                req.member_id = s("m");
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, GROUP_DENIED, "{ctx}");
            }
            ApiKey::LeaveGroup => {
                let mut m = leave_group_request::MemberIdentity::default();
                m.member_id = s("m");
                let mut req = LeaveGroupRequest::default();
                req.group_id = group();
                req.members = vec![m];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, GROUP_DENIED, "{ctx}");
            }
            ApiKey::OffsetCommit => {
                let r = c.send(v, &offset_commit("g", "t", 0)).await.expect(&ctx);
                assert_eq!(r.topics[0].partitions[0].error_code, GROUP_DENIED, "{ctx}");
            }
            ApiKey::OffsetFetch => {
                let mut t = offset_fetch_request::OffsetFetchRequestTopics::default();
                t.name = name("t");
                t.partition_indexes = vec![0];
                let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
                g.group_id = group();
                g.topics = Some(vec![t]);
                let mut req = OffsetFetchRequest::default();
                req.groups = vec![g];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.groups[0].error_code, GROUP_DENIED, "{ctx}");
                assert!(r.groups[0].topics.is_empty(), "{ctx}: offsets leaked");
                let r = c.send(7, &offset_fetch("g", "t")).await.expect(&ctx);
                assert_eq!(r.error_code, GROUP_DENIED, "{ctx} (v7)");
            }
            ApiKey::ListGroups => {
                let r = c.send(v, &ListGroupsRequest::default()).await.expect(&ctx);
                assert_eq!(r.error_code, 0, "{ctx}");
                assert!(r.groups.is_empty(), "{ctx}: groups shown");
            }
            ApiKey::DescribeGroups => {
                let mut req = DescribeGroupsRequest::default();
                req.groups = vec![group()];
                req.include_authorized_operations = true;
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.groups[0].error_code, GROUP_DENIED, "{ctx}");
            }
            ApiKey::DeleteGroups => {
                let mut req = DeleteGroupsRequest::default();
                req.groups_names = vec![group()];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.results[0].error_code, GROUP_DENIED, "{ctx}");
            }
            ApiKey::OffsetDelete => {
                let mut p = offset_delete_request::OffsetDeleteRequestPartition::default();
                p.partition_index = 0;
                let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
                t.name = name("t");
                t.partitions = vec![p];
                let mut req = OffsetDeleteRequest::default();
                req.group_id = group();
                req.topics = vec![t];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, GROUP_DENIED, "{ctx}");
            }
            ApiKey::AlterPartitionReassignments => {
                let mut p = alter_partition_reassignments_request::ReassignablePartition::default();
                p.replicas = Some(vec![BrokerId(1)]);
                let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
                t.name = name("t");
                t.partitions = vec![p];
                let mut req = AlterPartitionReassignmentsRequest::default();
                req.topics = vec![t];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::ListPartitionReassignments => {
                let r = c
                    .send(v, &ListPartitionReassignmentsRequest::default())
                    .await
                    .expect(&ctx);
                assert_eq!(r.error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::ElectLeaders => {
                let mut t = elect_leaders_request::TopicPartitions::default();
                t.topic = name("t");
                t.partitions = vec![0];
                let mut req = ElectLeadersRequest::default();
                req.topic_partitions = Some(vec![t]);
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::InitProducerId => {
                let mut req = InitProducerIdRequest::default();
                req.transactional_id = Some(TransactionalId(s("tx")));
                req.transaction_timeout_ms = 10_000;
                req.producer_id = ProducerId(-1);
                req.producer_epoch = -1;
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, TXN_DENIED, "{ctx}");
                req.transactional_id = None;
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, CLUSTER_DENIED, "{ctx}: idempotent");
            }
            ApiKey::AddPartitionsToTxn => {
                let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                t.name = name("t");
                t.partitions = vec![0];
                let mut req = AddPartitionsToTxnRequest::default();
                req.v3_and_below_transactional_id = TransactionalId(s("tx"));
                req.v3_and_below_topics = vec![t];
                let r = c.send(3, &req).await.expect(&ctx);
                let p = &r.results_by_topic_v3_and_below[0].results_by_partition[0];
                assert_eq!(p.partition_error_code, TXN_DENIED, "{ctx} (v3)");
                // v4+ is the brokers' own verification: CLUSTER_ACTION.
                let r = c
                    .send(v, &AddPartitionsToTxnRequest::default())
                    .await
                    .expect(&ctx);
                assert_eq!(r.error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::AddOffsetsToTxn => {
                let mut req = AddOffsetsToTxnRequest::default();
                req.transactional_id = TransactionalId(s("tx"));
                req.group_id = group();
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, TXN_DENIED, "{ctx}");
            }
            ApiKey::EndTxn => {
                let mut req = EndTxnRequest::default();
                req.transactional_id = TransactionalId(s("tx"));
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, TXN_DENIED, "{ctx}");
            }
            ApiKey::TxnOffsetCommit => {
                let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
                p.committed_offset = 0;
                let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
                t.name = name("t");
                t.partitions = vec![p];
                let mut req = TxnOffsetCommitRequest::default();
                req.transactional_id = TransactionalId(s("tx"));
                req.group_id = group();
                req.topics = vec![t];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.topics[0].partitions[0].error_code, TXN_DENIED, "{ctx}");
            }
            ApiKey::WriteTxnMarkers => {
                let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
                t.name = name("t");
                t.partition_indexes = vec![0];
                let mut m = write_txn_markers_request::WritableTxnMarker::default();
                m.producer_id = ProducerId(1);
                m.topics = vec![t];
                let mut req = WriteTxnMarkersRequest::default();
                req.markers = vec![m];
                let r = c.send(v, &req).await.expect(&ctx);
                let p = &r.markers[0].topics[0].partitions[0];
                assert_eq!(p.error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::DescribeTransactions => {
                let mut req = DescribeTransactionsRequest::default();
                req.transactional_ids = vec![TransactionalId(s("tx"))];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.transaction_states[0].error_code, TXN_DENIED, "{ctx}");
            }
            ApiKey::ListTransactions => {
                let r = c
                    .send(v, &ListTransactionsRequest::default())
                    .await
                    .expect(&ctx);
                assert!(r.transaction_states.is_empty(), "{ctx}: transactions shown");
            }
            ApiKey::DescribeProducers => {
                let mut t = describe_producers_request::TopicRequest::default();
                t.name = name("t");
                t.partition_indexes = vec![0];
                let mut req = DescribeProducersRequest::default();
                req.topics = vec![t];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.topics[0].partitions[0].error_code, TOPIC_DENIED, "{ctx}");
            }
            ApiKey::DescribeUserScramCredentials => {
                let r = c
                    .send(v, &DescribeUserScramCredentialsRequest::default())
                    .await
                    .expect(&ctx);
                assert_eq!(r.error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::AlterUserScramCredentials => {
                let mut u =
                    alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
                u.name = s("mallory");
                u.mechanism = 2;
                u.iterations = 4096;
                u.salt = bytes::Bytes::from_static(b"salt");
                u.salted_password = bytes::Bytes::from(vec![7u8; 64]);
                let mut req = AlterUserScramCredentialsRequest::default();
                req.upsertions = vec![u];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.results[0].error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::DescribeClientQuotas => {
                let r = c
                    .send(v, &DescribeClientQuotasRequest::default())
                    .await
                    .expect(&ctx);
                assert_eq!(r.error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::AlterClientQuotas => {
                let mut d = alter_client_quotas_request::EntityData::default();
                d.entity_type = s("user");
                d.entity_name = Some(s("mallory"));
                let mut o = alter_client_quotas_request::OpData::default();
                o.key = s("producer_byte_rate");
                o.value = 1e12;
                let mut e = alter_client_quotas_request::EntryData::default();
                e.entity = vec![d];
                e.ops = vec![o];
                let mut req = AlterClientQuotasRequest::default();
                req.entries = vec![e];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.entries[0].error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::CreateAcls => {
                let mut a = create_acls_request::AclCreation::default();
                a.resource_type = 2;
                a.resource_name = s("*");
                a.principal = s("User:ANONYMOUS");
                a.host = s("*");
                a.operation = 2;
                a.permission_type = 3;
                let mut req = CreateAclsRequest::default();
                req.creations = vec![a];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.results[0].error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::DescribeAcls => {
                let mut req = DescribeAclsRequest::default();
                req.resource_type_filter = 1;
                req.resource_name_filter = None;
                req.principal_filter = None;
                req.host_filter = None;
                req.pattern_type_filter = 1;
                req.operation = 1;
                req.permission_type = 1;
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.error_code, CLUSTER_DENIED, "{ctx}");
            }
            ApiKey::DeleteAcls => {
                let mut f = delete_acls_request::DeleteAclsFilter::default();
                f.resource_type_filter = 1;
                f.resource_name_filter = None;
                f.principal_filter = None;
                f.host_filter = None;
                f.pattern_type_filter = 1;
                f.operation = 1;
                f.permission_type = 1;
                let mut req = DeleteAclsRequest::default();
                req.filters = vec![f];
                let r = c.send(v, &req).await.expect(&ctx);
                assert_eq!(r.filter_results[0].error_code, CLUSTER_DENIED, "{ctx}");
            }
            other => panic!("no authorization case for advertised API {other:?}"),
        }
    }

    // Nothing the refused requests asked for happened.
    set_acls(&agent, true).await;
    let after = state(&mut c, &agent).await;
    assert_eq!(after, State { acls: 4, ..before });
    agent.stop().await;
}

/// Kafka's ACL model end to end over the wire: CreateAcls, DescribeAcls (with MATCH),
/// a prefixed ALLOW, a DENY that beats it, a host-bound binding, DeleteAcls, and the
/// caller's own authorized operations in Metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_created_over_kafka_decide_the_next_requests() {
    let (agent, mut c) = granted_agent().await;
    assert_eq!(create(&mut c, "pay-in", 1, &[]).await, 0);
    assert_eq!(create(&mut c, "pay-secret", 1, &[]).await, 0);
    assert_eq!(create(&mut c, "other", 1, &[]).await, 0);

    let binding = |t: i8, n: &str, p: i8, host: &str, op: i8, perm: i8| {
        let mut a = create_acls_request::AclCreation::default();
        a.resource_type = t;
        a.resource_name = s(n);
        a.resource_pattern_type = p;
        a.principal = s("User:ANONYMOUS");
        a.host = s(host);
        a.operation = op;
        a.permission_type = perm;
        a
    };
    // Keep ALTER on the cluster (to change ACLs), drop the rest of the grant.
    let mut req = CreateAclsRequest::default();
    req.creations = vec![
        binding(4, "kafka-cluster", 3, "*", 7, 3),
        binding(4, "kafka-cluster", 3, "*", 8, 3),
        binding(2, "pay-", 4, "*", 4, 3),
        binding(2, "pay-secret", 3, "*", 2, 2),
        binding(2, "other", 3, "10.9.9.9", 3, 3),
        binding(4, "not-the-cluster", 3, "*", 7, 3),
    ];
    let r = c.send(3, &req).await.expect("create acls");
    let codes: Vec<i16> = r.results.iter().map(|x| x.error_code).collect();
    assert_eq!(
        codes,
        [0, 0, 0, 0, 0, 42],
        "INVALID_REQUEST for the bad cluster name"
    );
    let mut del = DeleteAclsRequest::default();
    let mut f = delete_acls_request::DeleteAclsFilter::default();
    f.resource_type_filter = 1;
    f.resource_name_filter = None;
    f.principal_filter = None;
    f.host_filter = None;
    f.pattern_type_filter = 1;
    f.operation = 2;
    f.permission_type = 3;
    del.filters = vec![f];
    let r = c.send(3, &del).await.expect("delete acls");
    assert_eq!(
        r.filter_results[0].matching_acls.len(),
        4,
        "the ALL grants: {r:?}"
    );

    let write = |topic: &str| produce(topic, 0, simple_batch(1, 1_000), -1);
    let code = |r: &ProduceResponse| r.responses[0].partition_responses[0].error_code;
    assert_eq!(
        code(&c.send(9, &write("pay-in")).await.expect("produce")),
        0
    );
    assert_eq!(
        code(&c.send(9, &write("pay-secret")).await.expect("produce")),
        TOPIC_DENIED
    );
    assert_eq!(
        code(&c.send(9, &write("other")).await.expect("produce")),
        TOPIC_DENIED
    );

    // Metadata of all topics shows what the caller may describe (WRITE implies
    // DESCRIBE; the DENY of ALL hides pay-secret; the host-bound READ is not ours).
    let mut all = MetadataRequest::default();
    all.topics = None;
    all.include_topic_authorized_operations = true;
    let r = c.send(12, &all).await.expect("metadata");
    let shown: Vec<(String, i32)> = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.topic_authorized_operations,
            )
        })
        .collect();
    assert_eq!(shown, [("pay-in".to_string(), (1 << 4) | (1 << 8))]);

    // DescribeAcls with MATCH: the bindings that apply to pay-secret.
    let mut d = DescribeAclsRequest::default();
    d.resource_type_filter = 2;
    d.resource_name_filter = Some(s("pay-secret"));
    d.principal_filter = None;
    d.host_filter = None;
    d.pattern_type_filter = 2;
    d.operation = 1;
    d.permission_type = 1;
    let r = c.send(3, &d).await.expect("describe acls");
    let mut found: Vec<(String, i8)> = r
        .resources
        .iter()
        .map(|x| (x.resource_name.to_string(), x.pattern_type))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [("pay-".to_string(), 4), ("pay-secret".to_string(), 3)]
    );

    // Deleting the DENY opens pay-secret at once (on this agent, before the answer).
    let mut f = delete_acls_request::DeleteAclsFilter::default();
    f.resource_type_filter = 2;
    f.resource_name_filter = Some(s("pay-secret"));
    f.principal_filter = None;
    f.host_filter = None;
    f.pattern_type_filter = 3;
    f.operation = 1;
    f.permission_type = 2;
    del.filters = vec![f];
    let r = c.send(3, &del).await.expect("delete acls");
    assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    assert_eq!(
        code(&c.send(9, &write("pay-secret")).await.expect("produce")),
        0
    );
    agent.stop().await;
}

/// A fetch session keeps answering its partitions without naming them: the fetch
/// service decides again at every fetch, so once the ACL is gone the session's
/// partition is answered TOPIC_AUTHORIZATION_FAILED, with no records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_session_stops_answering_a_topic_once_its_acl_is_gone() {
    let (agent, mut c) = granted_agent().await;
    assert_eq!(create(&mut c, "t", 1, &[]).await, 0);
    let written = c
        .send(9, &produce("t", 0, simple_batch(2, 1_000), -1))
        .await
        .expect("produce");
    assert_eq!(written.responses[0].partition_responses[0].error_code, 0);

    // A full fetch that opens a session.
    let mut opening = fetch(12, "t", uuid::Uuid::nil(), -1);
    opening.session_id = 0;
    opening.session_epoch = 0;
    let r = c.send(12, &opening).await.expect("fetch");
    assert_eq!(r.error_code, 0);
    assert_ne!(r.session_id, 0, "a session was opened: {r:?}");
    let p = &r.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 2));
    assert!(p.records.as_ref().is_some_and(|b| !b.is_empty()));

    // The grant goes; the next incremental fetch names no topic.
    set_acls(&agent, false).await;
    let mut next = FetchRequest::default();
    next.replica_id = BrokerId(-1);
    next.max_bytes = 1 << 20;
    next.session_id = r.session_id;
    next.session_epoch = 1;
    let r = c.send(12, &next).await.expect("fetch");
    assert_eq!(r.error_code, 0);
    let answered: Vec<(String, i32, i16, bool)> = r
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.topic.to_string(),
                    p.partition_index,
                    p.error_code,
                    p.records.as_ref().is_some_and(|b| !b.is_empty()),
                )
            })
        })
        .collect();
    assert_eq!(answered, [("t".to_string(), 0, TOPIC_DENIED, false)]);
    agent.stop().await;
}

/// One HTTP request through the agent's router, as `User:ANONYMOUS` (no credentials):
/// the status and the body as JSON (`Null` if it is not).
async fn http(
    router: &axum::Router,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, serde_json::Value) {
    use tower::ServiceExt as _;
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

/// The HTTP API's half of the negative suite: every route of the route table (the code
/// the router is built from, so a route added later is walked too), called by a
/// principal without ACLs, is refused with the Kafka error of its resource, or shows an
/// empty listing, and nothing changes. Only the probes, metrics, the API's description
/// and the cluster overview (what Kafka's Metadata shows anyone) answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_http_route_refuses_a_principal_without_acls_and_nothing_changes() {
    use strata_agent::http::Needs;
    let agent = TestAgent::start_with(|s| {
        s.authorizer = "acl".to_string();
        s.group_initial_rebalance_delay_ms = 0;
    })
    .await
    .expect("start");
    let mut c = agent.client().await.expect("connect");
    let router = strata_agent::http::router(std::sync::Arc::clone(agent.broker()));

    set_acls(&agent, true).await;
    assert_eq!(create(&mut c, "t", 2, &[]).await, 0);
    let r = c
        .send(9, &produce("t", 0, simple_batch(2, 1_000), -1))
        .await
        .expect("produce");
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    // An HTTP consumer instance of group g, to be deleted by the refused caller.
    let (status, consumed) = http(
        &router,
        "POST",
        "/v1/topics/t/consume",
        r#"{"group_id": "g", "new_consumer": true, "timeout_ms": 0}"#,
    )
    .await;
    assert_eq!(status, 200, "{consumed}");
    let consumer = consumed["consumer_id"].as_str().expect("id").to_string();
    let before = state(&mut c, &agent).await;

    set_acls(&agent, false).await;
    let routes = strata_agent::http::routes();
    assert!(routes.len() >= 35, "{} routes", routes.len());
    // What answers without any ACL is pinned here, not taken from the table.
    let open: Vec<(&str, &str)> = routes
        .iter()
        .filter(|r| matches!(r.needs, Needs::Nothing | Needs::Caller))
        .map(|r| (r.method, r.path))
        .collect();
    assert_eq!(
        open,
        [
            ("GET", "/healthz"),
            ("GET", "/readyz"),
            ("GET", "/metrics"),
            ("GET", "/v1/openapi.json"),
            ("GET", "/v1/cluster"),
        ]
    );
    for route in routes {
        let path = route
            .path
            .replace("{topic}", "t")
            .replace("{partition}", "0")
            .replace("{group}", "g")
            .replace("{node_id}", &agent.broker().node_id().to_string())
            .replace("{id}", "txn-1")
            .replace("{consumer_id}", &consumer)
            .replace("{user}", "mallory");
        // Requests that would change something if they were let through.
        let (path, body) = match (route.method, route.path) {
            ("POST", "/v1/topics") => (path, r#"{"name": "new", "partitions": 1}"#),
            ("POST", "/v1/topics/{topic}/partitions") => (path, r#"{"count": 4}"#),
            ("POST", "/v1/groups/{group}/offsets") => (path, r#"{"topic": "t", "to": "earliest"}"#),
            ("PATCH", "/v1/topics/{topic}/configs") => {
                (path, r#"{"set": {"retention.ms": "1000"}}"#)
            }
            ("POST", "/v1/acls") => (
                path,
                r#"{"acls": [{"resource_type": "CLUSTER", "resource_name": "kafka-cluster",
                    "principal": "User:mallory", "operation": "ALL"}]}"#,
            ),
            ("DELETE", "/v1/acls") => (format!("{path}?resource_type=ANY"), "{}"),
            ("PUT", "/v1/users/{user}") => (path, r#"{"password": "mallory-secret"}"#),
            ("POST", "/v1/transactions/abort") => (
                path,
                r#"{"topic": "t", "partition": 0, "producer_id": 1, "producer_epoch": 0, "force": true}"#,
            ),
            ("PATCH", "/v1/quotas") => (
                path,
                r#"{"entity": {"user": null}, "set": {"producer_byte_rate": 1}}"#,
            ),
            _ => (path, "{}"),
        };
        let (status, answer) = http(&router, route.method, &path, body).await;
        let ctx = format!("{} {path}: {status} {answer}", route.method);
        let kafka_error = answer["kafka_error"].as_str().unwrap_or("");
        match route.needs {
            Needs::Nothing | Needs::Caller => assert_eq!(status, 200, "{ctx}"),
            Needs::On(_, kind, _) => {
                assert_eq!(status, 403, "{ctx}");
                let expected = match kind {
                    strata_agent::authz::ResourceType::Topic => "TOPIC_AUTHORIZATION_FAILED",
                    strata_agent::authz::ResourceType::Group => "GROUP_AUTHORIZATION_FAILED",
                    strata_agent::authz::ResourceType::Cluster => "CLUSTER_AUTHORIZATION_FAILED",
                    strata_agent::authz::ResourceType::TransactionalId => {
                        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
                    }
                };
                assert_eq!(kafka_error, expected, "{ctx}");
            }
            Needs::InHandler(_) => match (route.method, route.path) {
                ("GET", "/v1/topics") => {
                    assert_eq!(
                        (status, &answer["topics"]),
                        (200, &serde_json::json!([])),
                        "{ctx}"
                    )
                }
                ("GET", "/v1/groups") => {
                    assert_eq!(
                        (status, &answer["groups"]),
                        (200, &serde_json::json!([])),
                        "{ctx}"
                    )
                }
                // The topic, config, produce and fetch services decide, as for the Kafka
                // APIs.
                ("POST", "/v1/topics")
                | ("POST", "/v1/topics/{topic}/produce")
                | ("POST", "/v1/topics/{topic}/consume")
                | ("POST", "/v1/topics/{topic}/read")
                | ("DELETE", "/v1/topics/{topic}")
                | ("POST", "/v1/topics/{topic}/partitions")
                | ("PATCH", "/v1/topics/{topic}/configs") => {
                    assert_eq!(
                        (status, kafka_error),
                        (403, "TOPIC_AUTHORIZATION_FAILED"),
                        "{ctx}"
                    )
                }
                // The group service decides, as for the Kafka APIs.
                ("GET" | "DELETE", "/v1/groups/{group}")
                | ("POST", "/v1/groups/{group}/offsets")
                | ("DELETE", "/v1/consumers/{consumer_id}") => {
                    assert_eq!(
                        (status, kafka_error),
                        (403, "GROUP_AUTHORIZATION_FAILED"),
                        "{ctx}"
                    )
                }
                // The topic service decides the incident switch, the transaction service
                // an operator's abort, the maintenance service the archive's repairs,
                // the agents service a drain: ALTER on the cluster.
                ("POST", "/v1/topics/{topic}/partitions/{partition}/disable")
                | ("POST", "/v1/topics/{topic}/partitions/{partition}/enable")
                | ("POST", "/v1/topics/{topic}/partitions/{partition}/tier")
                | ("POST", "/v1/topics/{topic}/partitions/{partition}/verify")
                | ("POST" | "DELETE", "/v1/agents/{node_id}/drain")
                | ("POST", "/v1/transactions/abort") => {
                    assert_eq!(
                        (status, kafka_error),
                        (403, "CLUSTER_AUTHORIZATION_FAILED"),
                        "{ctx}"
                    )
                }
                // The security service decides: CLUSTER, as the Kafka APIs.
                (_, path)
                    if ["/v1/acls", "/v1/users", "/v1/quotas"]
                        .iter()
                        .any(|p| path.starts_with(p)) =>
                {
                    assert_eq!(
                        (status, kafka_error),
                        (403, "CLUSTER_AUTHORIZATION_FAILED"),
                        "{ctx}"
                    )
                }
                _ => panic!("no authorization case for {ctx}: {:?}", route.needs),
            },
        }
    }

    // The operator and security changes audited their refusals.
    let refused: Vec<String> = agent
        .broker()
        .audit()
        .tail(10_000)
        .expect("the audit log")
        .into_iter()
        .filter(|e| !e.ok)
        .map(|e| e.action)
        .collect();
    for action in [
        "partition.disable",
        "partition.enable",
        "partition.tier",
        "partition.verify",
        "agent.drain",
        "agent.undrain",
        "transaction.abort",
        "acl.create",
        "acl.delete",
        "user.alter_scram_credentials",
        "quota.alter",
    ] {
        assert!(
            refused.iter().any(|a| a == action),
            "{action} refused but not audited: {refused:?}"
        );
    }

    // Nothing the refused requests asked for happened: the instance is still there.
    set_acls(&agent, true).await;
    let after = state(&mut c, &agent).await;
    assert_eq!(after, State { acls: 4, ..before });
    let (status, answer) = http(
        &router,
        "POST",
        "/v1/topics/t/consume",
        &format!(r#"{{"group_id": "g", "consumer_id": "{consumer}", "timeout_ms": 0}}"#),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    agent.stop().await;
}
