//! The operations a client may ask to be told it is authorized for (KIP-430: Metadata,
//! DescribeCluster, DescribeGroups), as Kafka's bit field: bit `n` is the ACL operation
//! of code `n`. The services answer them from the authorizer (the topic service for
//! topics and the cluster, the group service for groups): with no authorizer configured
//! every operation the resource type supports, as Kafka answers. A client that does not
//! ask gets `i32::MIN`, Kafka's "not included".

/// Kafka's "not included": the client did not ask.
pub const NOT_ASKED: i32 = i32::MIN;

/// `operations` if the client asked for them, else [`NOT_ASKED`].
pub fn if_asked(asked: bool, operations: i32) -> i32 {
    if asked { operations } else { NOT_ASKED }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fields_hold_kafkas_operation_counts() {
        use crate::authz::ResourceType;
        // librdkafka's admin tests expect 8 topic, 3 group and 7 cluster operations.
        assert_eq!(ResourceType::Topic.operations().len(), 8);
        assert_eq!(ResourceType::Cluster.operations().len(), 7);
        // A group's (the group service answers them from the authorizer): READ,
        // DESCRIBE and DELETE, bits 3, 8 and 6.
        let group = crate::authz::ResourceType::Group
            .operations()
            .iter()
            .fold(0i32, |bits, op| bits | (1 << op.code()));
        assert_eq!(group, 0b1_0100_1000);
    }
}
