//! The `consumer` protocol's member metadata, as the group coordinator's members carry
//! it: a subscription, an assignment, and the assignment of every member as Kafka's
//! `RangeAssignor` computes it. The HTTP consumer speaks it in its group (so Kafka
//! consumers can share the group with HTTP ones, whichever leads), and the HTTP group
//! description reads members' assignments with it.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartitions;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedPartitions;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The assignor HTTP consumers offer.
pub const ASSIGNOR: &str = "range";

/// A `consumer` protocol subscription to one topic (version 1, as Kafka consumers send).
pub fn subscription(topic: &str) -> Bytes {
    let mut s = ConsumerProtocolSubscription::default();
    s.topics = vec![StrBytes::from_string(topic.to_string())];
    s.owned_partitions = Vec::<OwnedPartitions>::new();
    versioned(&s, 1)
}

fn versioned<T: Encodable>(message: &T, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    message
        .encode(&mut buf, version)
        .expect("encoding a consumer protocol message in memory cannot fail");
    buf.freeze()
}

fn decode_versioned<T: Decodable>(bytes: &[u8], max_version: i16) -> Option<T> {
    let mut buf = Bytes::copy_from_slice(bytes);
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16().clamp(0, max_version);
    T::decode(&mut buf, version).ok()
}

/// Every topic's partitions in a member's assignment (empty if it is not one of the
/// consumer protocol's).
pub fn assigned_all(assignment: &[u8]) -> Vec<(String, Vec<i32>)> {
    let Some(a) = decode_versioned::<ConsumerProtocolAssignment>(assignment, 3) else {
        return Vec::new();
    };
    a.assigned_partitions
        .into_iter()
        .map(|t| {
            let mut partitions = t.partitions;
            partitions.sort_unstable();
            (t.topic.to_string(), partitions)
        })
        .collect()
}

/// This member's partitions of `topic` in a SyncGroup assignment.
pub fn assigned(assignment: &[u8], topic: &str) -> Vec<i32> {
    let Some(a) = decode_versioned::<ConsumerProtocolAssignment>(assignment, 3) else {
        return Vec::new();
    };
    let mut partitions: Vec<i32> = a
        .assigned_partitions
        .into_iter()
        .filter(|t| t.topic.as_str() == topic)
        .flat_map(|t| t.partitions)
        .collect();
    partitions.sort_unstable();
    partitions
}

/// The range assignment, as Kafka's `RangeAssignor` computes it, for the group's members,
/// with `partitions` giving each topic's partition count (none for a topic that does
/// not exist: its subscribers get nothing of it).
pub fn assign(
    partitions: impl Fn(&str) -> Option<i32>,
    members: &[(String, Option<String>, Bytes)],
) -> Vec<(String, Bytes)> {
    let mut by_topic: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (member_id, _, metadata) in members {
        let Some(s) = decode_versioned::<ConsumerProtocolSubscription>(metadata, 3) else {
            continue;
        };
        for t in s.topics {
            by_topic.entry(t.to_string()).or_default().push(member_id);
        }
    }
    let mut assigned: BTreeMap<&str, Vec<AssignedPartitions>> = members
        .iter()
        .map(|(m, _, _)| (m.as_str(), Vec::new()))
        .collect();
    for (topic, mut subscribers) in by_topic {
        let Some(n) = partitions(&topic) else {
            continue;
        };
        subscribers.sort_unstable();
        subscribers.dedup();
        let m = subscribers.len() as i32;
        let (per, extra) = (n / m, n % m);
        for (i, member) in subscribers.into_iter().enumerate() {
            let i = i as i32;
            let start = i * per + i.min(extra);
            let len = per + i32::from(i < extra);
            if len == 0 {
                continue;
            }
            let mut tp = AssignedPartitions::default();
            tp.topic = TopicName(StrBytes::from_string(topic.clone()));
            tp.partitions = (start..start + len).collect();
            assigned.entry(member).or_default().push(tp);
        }
    }
    assigned
        .into_iter()
        .map(|(member, partitions)| {
            let mut a = ConsumerProtocolAssignment::default();
            a.assigned_partitions = partitions;
            (member.to_string(), versioned(&a, 0))
        })
        .collect()
}
