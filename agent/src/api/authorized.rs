//! The operations a client may ask to be told it is authorized for (KIP-430: Metadata,
//! DescribeCluster, DescribeGroups), as Kafka's bit field: bit `n` is the ACL operation
//! of code `n`. With no authorizer configured Kafka answers every operation the
//! resource type supports, and so do these handlers; with one, the gate (`gate.rs`)
//! replaces them with the principal's own. A client that does not ask gets `i32::MIN`,
//! Kafka's "not included".

use kafka_protocol::messages::metadata_response::MetadataResponseTopic;

/// Kafka's `AclOperation` codes.
const READ: u32 = 3;
const WRITE: u32 = 4;
const CREATE: u32 = 5;
const DELETE: u32 = 6;
const ALTER: u32 = 7;
const DESCRIBE: u32 = 8;
const CLUSTER_ACTION: u32 = 9;
const DESCRIBE_CONFIGS: u32 = 10;
const ALTER_CONFIGS: u32 = 11;
const IDEMPOTENT_WRITE: u32 = 12;

const fn bits(ops: &[u32]) -> i32 {
    let mut field = 0i32;
    let mut i = 0;
    while i < ops.len() {
        field |= 1 << ops[i];
        i += 1;
    }
    field
}

/// What Kafka's `AclEntry.supportedOperations(TOPIC)` lists.
pub const TOPIC: i32 = bits(&[
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
]);
/// ... `(CLUSTER)`.
pub const CLUSTER: i32 = bits(&[
    CREATE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
    ALTER,
    DESCRIBE,
]);

/// Kafka's "not included": the client did not ask.
pub const NOT_ASKED: i32 = i32::MIN;

/// `operations` if the client asked for them, else [`NOT_ASKED`].
pub fn if_asked(asked: bool, operations: i32) -> i32 {
    if asked { operations } else { NOT_ASKED }
}

/// Sets a described topic's operations (not an erroneous one's, as Kafka).
pub fn topic(t: &mut MetadataResponseTopic, asked: bool) {
    t.topic_authorized_operations = if_asked(asked && t.error_code == 0, TOPIC);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_hold_kafkas_operation_counts() {
        // librdkafka's admin tests expect 8 topic, 3 group and 7 cluster operations.
        assert_eq!(TOPIC.count_ones(), 8);
        assert_eq!(CLUSTER.count_ones(), 7);
        // A group's (the group service answers them from the authorizer): READ,
        // DESCRIBE and DELETE, bits 3, 8 and 6.
        let group = crate::authz::ResourceType::Group
            .operations()
            .iter()
            .fold(0i32, |bits, op| bits | (1 << op.code()));
        assert_eq!(group, 0b1_0100_1000);
    }
}
