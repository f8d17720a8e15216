//! The consumer-group APIs (classic protocol): FindCoordinator, JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
//! DeleteGroups and OffsetDelete. Each translates between wire structs and the
//! coordinator; group semantics live in `group/`.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as CoordinatorEntry;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::caller::Caller;
use crate::clock::now_ms;
use crate::error_map::ApiError;
use crate::group::GroupError;
use crate::group::state::{JoinRequest, Leaving};
use crate::service::groups::{CommittedOffset, Member, Offsets, TopicPartition};

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn code(e: Option<GroupError>) -> i16 {
    e.map_or(0, group_code)
}

/// The Kafka code of a coordinator's refusal (mapped in `error_map.rs`).
fn group_code(e: GroupError) -> i16 {
    ApiError::from(e).code()
}

/// The coordinator of `key` (of `key_type` 0, a group, or 1, a transactional id: the
/// group or the transaction service finds it, for a caller with DESCRIBE on the key), at
/// its address on `listener`; without that listener it is not available to this client
/// (as Kafka answers).
fn coordinator(
    broker: &Broker,
    who: &Caller,
    key_type: i8,
    key: &str,
    listener: &str,
) -> Result<(i32, String, i32), ApiError> {
    let agent = match key_type {
        0 => broker.groups().find_coordinator(who, key)?,
        1 => broker
            .transacting()
            .find_coordinator(who, key)
            .map_err(|e| ApiError::from(&e))?,
        other => {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                format!("unknown coordinator key type {other}: 0 (group) or 1 (transaction)"),
            ));
        }
    };
    match agent.address(listener) {
        Some((host, port)) => Ok((agent.node_id, host.to_string(), port)),
        None => Err(ApiError::new(
            ResponseError::CoordinatorNotAvailable,
            format!("the coordinator has no {listener} listener"),
        )),
    }
}

pub fn find_coordinator(
    broker: &Broker,
    who: &Caller,
    req: FindCoordinatorRequest,
    version: i16,
    listener: &str,
) -> FindCoordinatorResponse {
    let mut response = FindCoordinatorResponse::default();
    if version >= 4 {
        response.coordinators = req
            .coordinator_keys
            .iter()
            .map(|key| {
                let mut c = CoordinatorEntry::default();
                c.key = key.clone();
                match coordinator(broker, who, req.key_type, key.as_str(), listener) {
                    Ok((node_id, host, port)) => {
                        c.node_id = BrokerId(node_id);
                        c.host = s(host);
                        c.port = port;
                    }
                    Err(e) => {
                        c.node_id = BrokerId(-1);
                        c.port = -1;
                        c.error_code = e.code();
                        c.error_message = Some(s(e.message));
                    }
                }
                c
            })
            .collect();
    } else {
        // v0 has no key type: a group.
        let key_type = if version >= 1 { req.key_type } else { 0 };
        match coordinator(broker, who, key_type, req.key.as_str(), listener) {
            Ok((node_id, host, port)) => {
                response.node_id = BrokerId(node_id);
                response.host = s(host);
                response.port = port;
            }
            Err(e) => {
                response.node_id = BrokerId(-1);
                response.port = -1;
                response.error_code = e.code();
                if version >= 1 {
                    response.error_message = Some(s(e.message));
                }
            }
        }
    }
    response
}

pub async fn join_group(
    broker: &Broker,
    who: &Caller,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
) -> JoinGroupResponse {
    let mut response = JoinGroupResponse::default();
    if version < 7 {
        response.protocol_name = Some(StrBytes::default());
    }
    if req.group_id.0.is_empty() {
        response.error_code = ResponseError::InvalidGroupId.code();
        response.member_id = req.member_id;
        return response;
    }
    let fresh = format!("{client_id}-{}", uuid::Uuid::new_v4());
    let join = JoinRequest {
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
        session_timeout_ms: i64::from(req.session_timeout_ms),
        rebalance_timeout_ms: i64::from(if version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        }),
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: version >= 4,
        fresh_member_id: fresh,
    };
    let r = broker
        .groups()
        .join(who, req.group_id.0.as_str(), join)
        .await;
    response.error_code = code(r.error);
    response.generation_id = r.generation_id;
    if version >= 7 {
        response.protocol_type = r.protocol_type.map(s);
        response.protocol_name = r.protocol_name.map(s);
    } else {
        response.protocol_name = Some(s(r.protocol_name.unwrap_or_default()));
    }
    response.leader = s(r.leader);
    response.member_id = s(r.member_id);
    if version >= 9 {
        response.skip_assignment = r.skip_assignment;
    }
    response.members = r
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            let mut m = JoinGroupResponseMember::default();
            m.member_id = s(id);
            if version >= 5 {
                m.group_instance_id = instance.map(s);
            }
            m.metadata = metadata;
            m
        })
        .collect();
    response
}

pub async fn sync_group(
    broker: &Broker,
    who: &Caller,
    req: SyncGroupRequest,
    version: i16,
) -> SyncGroupResponse {
    let assignments: Vec<(String, Bytes)> = req
        .assignments
        .iter()
        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
        .collect();
    let r = broker
        .groups()
        .sync(
            who,
            req.group_id.0.as_str(),
            Member {
                member_id: req.member_id.as_str(),
                group_instance_id: req.group_instance_id.as_ref().map(|i| i.as_str()),
                generation_id: req.generation_id,
            },
            req.protocol_type.as_ref().map(|p| p.as_str()),
            req.protocol_name.as_ref().map(|p| p.as_str()),
            assignments,
        )
        .await;
    let mut response = SyncGroupResponse::default();
    response.error_code = code(r.error);
    if version >= 5 {
        response.protocol_type = r.protocol_type.map(s);
        response.protocol_name = r.protocol_name.map(s);
    }
    response.assignment = r.assignment;
    response
}

pub fn heartbeat(broker: &Broker, who: &Caller, req: HeartbeatRequest) -> HeartbeatResponse {
    let mut response = HeartbeatResponse::default();
    let member = Member {
        member_id: req.member_id.as_str(),
        group_instance_id: req.group_instance_id.as_ref().map(|i| i.as_str()),
        generation_id: req.generation_id,
    };
    response.error_code = code(
        broker
            .groups()
            .heartbeat(who, req.group_id.0.as_str(), member)
            .err(),
    );
    response
}

pub fn leave_group(
    broker: &Broker,
    who: &Caller,
    req: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let leaving: Vec<Leaving> = if version >= 3 {
        req.members
            .iter()
            .map(|m| Leaving {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
            })
            .collect()
    } else {
        vec![Leaving {
            member_id: req.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let mut response = LeaveGroupResponse::default();
    let results = match broker
        .groups()
        .leave(who, req.group_id.0.as_str(), &leaving)
    {
        Ok(results) => results,
        Err(e) => {
            response.error_code = group_code(e);
            return response;
        }
    };
    if version >= 3 {
        response.members = leaving
            .into_iter()
            .zip(results)
            .map(|(l, r)| {
                let mut m = MemberResponse::default();
                m.member_id = s(l.member_id);
                m.group_instance_id = l.group_instance_id.map(s);
                m.error_code = code(r.err());
                m
            })
            .collect();
    } else {
        response.error_code = code(results.into_iter().next().and_then(|r| r.err()));
    }
    response
}

pub async fn offset_commit(
    broker: &Broker,
    who: &Caller,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let now = now_ms();
    let offsets = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    (t.name.0.to_string(), p.partition_index),
                    CommittedOffset {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        commit_timestamp_ms: now,
                    },
                )
            })
        })
        .collect();
    let member = Member {
        member_id: req.member_id.as_str(),
        group_instance_id: req.group_instance_id.as_ref().map(|i| i.as_str()),
        generation_id: req.generation_id_or_member_epoch,
    };
    let outcomes = broker
        .groups()
        .commit(who, req.group_id.0.as_str(), member, offsets)
        .await;
    let mut response = OffsetCommitResponse::default();
    for t in req.topics {
        let mut out = OffsetCommitResponseTopic::default();
        out.name = t.name.clone();
        for p in t.partitions {
            let tp: TopicPartition = (t.name.0.to_string(), p.partition_index);
            let mut r = OffsetCommitResponsePartition::default();
            r.partition_index = p.partition_index;
            r.error_code = code(outcomes.get(&tp).and_then(|o| o.err()));
            out.partitions.push(r);
        }
        response.topics.push(out);
    }
    response
}

/// A committed offset as OffsetFetch answers it: offset, leader epoch, metadata, code.
fn fetched(offset: Result<Option<CommittedOffset>, GroupError>) -> (i64, i32, String, i16) {
    match offset {
        Ok(o) => (
            o.as_ref().map_or(-1, |o| o.offset),
            o.as_ref().map_or(-1, |o| o.leader_epoch),
            o.and_then(|o| o.metadata).unwrap_or_default(),
            0,
        ),
        Err(e) => (-1, -1, String::new(), group_code(e)),
    }
}

fn wanted<T>(
    topics: Option<Vec<T>>,
    name: impl Fn(&T) -> String,
    partitions: impl Fn(T) -> Vec<i32>,
) -> Option<Vec<(String, Vec<i32>)>> {
    topics.map(|ts| ts.into_iter().map(|t| (name(&t), partitions(t))).collect())
}

pub async fn offset_fetch(
    broker: &Broker,
    who: &Caller,
    req: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let mut response = OffsetFetchResponse::default();
    if version >= 8 {
        for g in req.groups {
            let wanted = wanted(g.topics, |t| t.name.0.to_string(), |t| t.partition_indexes);
            let mut out = OffsetFetchResponseGroup::default();
            out.group_id = g.group_id.clone();
            let offsets = broker
                .groups()
                .offsets(who, g.group_id.0.as_str(), wanted, req.require_stable)
                .await;
            match offsets {
                Ok(topics) => {
                    out.topics = topics
                        .into_iter()
                        .map(|(topic, parts)| {
                            let mut t = OffsetFetchResponseTopics::default();
                            t.name = TopicName(s(topic));
                            t.partitions = parts
                                .into_iter()
                                .map(|(p, o)| {
                                    let (offset, epoch, metadata, code) = fetched(o);
                                    let mut r = OffsetFetchResponsePartitions::default();
                                    r.partition_index = p;
                                    r.committed_offset = offset;
                                    r.committed_leader_epoch = epoch;
                                    r.metadata = Some(s(metadata));
                                    r.error_code = code;
                                    r
                                })
                                .collect();
                            t
                        })
                        .collect();
                }
                Err(e) => out.error_code = group_code(e),
            }
            response.groups.push(out);
        }
        return response;
    }
    let require_stable = version >= 7 && req.require_stable;
    let wanted = wanted(
        req.topics,
        |t| t.name.0.to_string(),
        |t| t.partition_indexes,
    );
    let asked = wanted.clone();
    let offsets = broker
        .groups()
        .offsets(who, req.group_id.0.as_str(), wanted, require_stable)
        .await;
    let topics: Offsets = match offsets {
        Ok(topics) => topics,
        Err(e) => {
            if version >= 2 {
                response.error_code = group_code(e);
            }
            // Before v2 there is no top-level code: a refused group's partitions carry
            // it (other errors answer no partitions, as before).
            match (e, asked) {
                (GroupError::GroupAuthorizationFailed, Some(asked)) if version < 2 => asked
                    .into_iter()
                    .map(|(t, ps)| (t, ps.into_iter().map(|p| (p, Err(e))).collect()))
                    .collect(),
                _ => Vec::new(),
            }
        }
    };
    response.topics = topics
        .into_iter()
        .map(|(topic, parts)| {
            let mut t = OffsetFetchResponseTopic::default();
            t.name = TopicName(s(topic));
            t.partitions = parts
                .into_iter()
                .map(|(p, o)| {
                    let (offset, epoch, metadata, code) = fetched(o);
                    let mut r = OffsetFetchResponsePartition::default();
                    r.partition_index = p;
                    r.committed_offset = offset;
                    if version >= 5 {
                        r.committed_leader_epoch = epoch;
                    }
                    r.metadata = Some(s(metadata));
                    r.error_code = code;
                    r
                })
                .collect();
            t
        })
        .collect();
    response
}

pub async fn list_groups(
    broker: &Broker,
    who: &Caller,
    req: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    let mut response = ListGroupsResponse::default();
    match broker.groups().list(who).await {
        Ok(groups) => {
            for (id, protocol_type, state) in groups {
                if !req.states_filter.is_empty()
                    && !req
                        .states_filter
                        .iter()
                        .any(|f| f.eq_ignore_ascii_case(state))
                {
                    continue;
                }
                if !req.types_filter.is_empty()
                    && !req
                        .types_filter
                        .iter()
                        .any(|f| f.eq_ignore_ascii_case("classic"))
                {
                    continue;
                }
                let mut g = ListedGroup::default();
                g.group_id = GroupId(s(id));
                g.protocol_type = s(protocol_type);
                if version >= 4 {
                    g.group_state = StrBytes::from_static_str(state);
                }
                if version >= 5 {
                    g.group_type = StrBytes::from_static_str("classic");
                }
                response.groups.push(g);
            }
        }
        Err(e) => response.error_code = group_code(e),
    }
    response
}

pub async fn describe_groups(
    broker: &Broker,
    who: &Caller,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let mut response = DescribeGroupsResponse::default();
    for id in req.groups {
        let mut g = DescribedGroup::default();
        g.group_id = id.clone();
        let described = broker.groups().describe(who, id.0.as_str()).await;
        if version >= 3 {
            // KIP-430: the caller's own operations; none told for a group it may not
            // describe.
            let asked = req.include_authorized_operations
                && !matches!(described, Err(GroupError::GroupAuthorizationFailed));
            g.authorized_operations = super::authorized::if_asked(
                asked,
                broker.groups().authorized_operations(who, id.0.as_str()),
            );
        }
        match described {
            Ok(Some(summary)) => {
                g.group_state = StrBytes::from_static_str(summary.state);
                g.protocol_type = s(summary.protocol_type);
                g.protocol_data = s(summary.protocol_name.clone());
                g.members = summary
                    .members
                    .iter()
                    .map(|m| {
                        let mut d = DescribedGroupMember::default();
                        d.member_id = s(m.member_id.clone());
                        if version >= 4 {
                            d.group_instance_id = m.group_instance_id.clone().map(s);
                        }
                        d.client_id = s(m.client_id.clone());
                        d.client_host = s(m.client_host.clone());
                        d.member_metadata = m.metadata(&summary.protocol_name);
                        d.member_assignment = m.assignment.clone();
                        d
                    })
                    .collect();
            }
            Ok(None) => g.group_state = StrBytes::from_static_str("Dead"),
            Err(e) => g.error_code = group_code(e),
        }
        response.groups.push(g);
    }
    response
}

pub async fn delete_groups(
    broker: &Broker,
    who: &Caller,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut response = DeleteGroupsResponse::default();
    for id in req.groups_names {
        let mut r = DeletableGroupResult::default();
        r.group_id = id.clone();
        r.error_code = code(broker.groups().delete(who, id.0.as_str()).await.err());
        response.results.push(r);
    }
    response
}

pub async fn offset_delete(
    broker: &Broker,
    who: &Caller,
    req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let mut response = OffsetDeleteResponse::default();
    let partitions: Vec<TopicPartition> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index))
        })
        .collect();
    match broker
        .groups()
        .delete_offsets(who, req.group_id.0.as_str(), partitions)
        .await
    {
        Ok(results) => {
            let mut by_topic: BTreeMap<String, Vec<(i32, Option<GroupError>)>> = BTreeMap::new();
            for ((topic, p), e) in results {
                by_topic.entry(topic).or_default().push((p, e));
            }
            response.topics = by_topic
                .into_iter()
                .map(|(topic, parts)| {
                    let mut t = OffsetDeleteResponseTopic::default();
                    t.name = TopicName(s(topic));
                    t.partitions = parts
                        .into_iter()
                        .map(|(p, e)| {
                            let mut r = OffsetDeleteResponsePartition::default();
                            r.partition_index = p;
                            r.error_code = code(e);
                            r
                        })
                        .collect();
                    t
                })
                .collect();
        }
        Err(e) => response.error_code = group_code(e),
    }
    response
}
