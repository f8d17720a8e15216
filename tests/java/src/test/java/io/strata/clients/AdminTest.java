package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.GroupSubscribedToTopicException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicIdException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The Java Admin client against one agent: CreateTopics, Metadata, CreatePartitions,
 *  DescribeConfigs, IncrementalAlterConfigs, ListOffsets, ListGroups, DescribeGroups,
 *  OffsetFetch, OffsetDelete, DeleteGroups, DescribeCluster, DeleteTopics. */
class AdminTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.singleNode();

    static Admin admin;

    @BeforeAll
    static void openAdmin() {
        admin = Clients.admin(strata.bootstrap());
    }

    @AfterAll
    static void closeAdmin() {
        if (admin != null) {
            admin.close(Duration.ofSeconds(5));
        }
    }

    static <T> T get(org.apache.kafka.common.KafkaFuture<T> f) throws Exception {
        return Clients.get(f);
    }

    static Map<String, ConfigEntry> topicConfig(String topic) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = get(admin.describeConfigs(List.of(r)).all()).get(r);
        return c.entries().stream().collect(Collectors.toMap(ConfigEntry::name, e -> e));
    }

    @Test
    void createTopicsListAndDescribe() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-create");
        Map<String, String> configs = Map.of("retention.ms", "3600000", "cleanup.policy", "delete");
        get(admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1).configs(configs))).all());
        assertTrue(Clients.listTopics(admin).contains(topic), "listTopics shows the new topic");

        TopicDescription d = Clients.waitForLeaders(admin, topic, 3);
        assertEquals(topic, d.name());
        assertFalse(d.isInternal());
        assertNotNull(d.topicId(), "topic id");
        assertFalse(d.topicId().equals(Uuid.ZERO_UUID), "topic id is not zero");
        for (TopicPartitionInfo p : d.partitions()) {
            assertEquals(1, p.leader().id(), "leader of " + p.partition());
            assertEquals(List.of(1), p.replicas().stream().map(Node::id).toList(), "replicas of " + p.partition());
            assertEquals(List.of(1), p.isr().stream().map(Node::id).toList(), "ISR of " + p.partition());
        }
        assertEquals(List.of(0, 1, 2), d.partitions().stream().map(TopicPartitionInfo::partition).toList());
        assertEquals("3600000", topicConfig(topic).get("retention.ms").value(), "config given at creation");

        // validateOnly creates nothing
        String dry = Clients.uniqueTopic("java-admin-dry");
        get(admin.createTopics(List.of(new NewTopic(dry, 2, (short) 1)),
                new CreateTopicsOptions().validateOnly(true)).all());
        assertFalse(Clients.listTopics(admin).contains(dry), "validateOnly must not create " + dry);
    }

    /** Admin.describeTopics(TopicCollection.ofTopicIds(...)) sends Metadata v12 naming the
     *  topic by id only (KIP-516); Kafka answers with the topic's name and partitions. */
    @Test
    void describeTopicsByTopicIdFindsTheTopic() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-byid");
        Clients.createTopic(admin, topic, 2, 1, Map.of());
        Uuid id = Clients.waitForLeaders(admin, topic, 2).topicId();
        Map<Uuid, TopicDescription> byId = get(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id)))
                .allTopicIds());
        TopicDescription d = byId.get(id);
        assertNotNull(d, "described by id: " + byId);
        assertEquals(topic, d.name(), "name of topic id " + id);
        assertEquals(2, d.partitions().size());
        Throwable unknown = Clients.failure(admin.describeTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid())))
                .allTopicIds());
        assertInstanceOf(UnknownTopicIdException.class, unknown, "a topic id that does not exist");
    }

    /** DeleteTopics v6 names topics by id. */
    @Test
    void deleteTopicsByTopicId() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-delid");
        Clients.createTopic(admin, topic, 1, 1, Map.of());
        Uuid id = Clients.waitForLeaders(admin, topic, 1).topicId();
        get(admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all());
        Wait.untilTrue(Duration.ofSeconds(15), topic + " to disappear from listTopics", () -> {
            try {
                return !Clients.listTopics(admin).contains(topic);
            } catch (Exception e) {
                return false;
            }
        }, () -> "still listed");
        Throwable again = Clients.failure(admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all());
        assertInstanceOf(UnknownTopicIdException.class, again, "deleting the same id again");
    }

    @Test
    void createTopicWithABadConfigValueIsInvalidConfiguration() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-badcfg");
        Throwable e = Clients.failure(admin.createTopics(
                List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of("retention.ms", "forever")))).all());
        assertInstanceOf(InvalidConfigurationException.class, e, "retention.ms=forever");
        Throwable e2 = Clients.failure(admin.createTopics(
                List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of("cleanup.policy", "sometimes")))).all());
        assertInstanceOf(InvalidConfigurationException.class, e2, "cleanup.policy=sometimes");
        assertFalse(Clients.listTopics(admin).contains(topic), "nothing created");
    }

    @Test
    void createAnExistingTopicIsTopicExists() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-dup");
        Clients.createTopic(admin, topic, 1, 1, Map.of());
        Throwable e = Clients.failure(admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
        assertInstanceOf(TopicExistsException.class, e);
        assertEquals(1, Clients.waitForLeaders(admin, topic, 1).partitions().size(), "still one partition");
    }

    @Test
    void createTopicsWithInvalidNamesPartitionsOrReplicationFactorAreRefused() throws Exception {
        for (String name : List.of("bad name", "slash/topic", "..", "x".repeat(250), "star*")) {
            Throwable e = Clients.failure(admin.createTopics(List.of(new NewTopic(name, 1, (short) 1))).all());
            assertInstanceOf(InvalidTopicException.class, e, "topic name '" + name + "'");
        }
        String topic = Clients.uniqueTopic("java-admin-badparts");
        Throwable e = Clients.failure(admin.createTopics(List.of(new NewTopic(topic, 0, (short) 1))).all());
        assertInstanceOf(InvalidPartitionsException.class, e, "0 partitions");
        Throwable rf = Clients.failure(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 2))).all());
        assertInstanceOf(InvalidReplicationFactorException.class, rf, "replication factor 2 with one broker");
        assertFalse(Clients.listTopics(admin).contains(topic));
    }

    @Test
    void createPartitionsGrowsTheTopicAndRefusesToShrinkIt() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-parts");
        Clients.createTopic(admin, topic, 1, 1, Map.of());
        get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all());
        Clients.waitForLeaders(admin, topic, 4);
        Throwable e = Clients.failure(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all());
        assertInstanceOf(InvalidPartitionsException.class, e, "shrinking 4 -> 2");
        Throwable same = Clients.failure(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all());
        assertInstanceOf(InvalidPartitionsException.class, same, "4 -> 4");
        // the new partitions take records
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(Clients.producerProps(strata.bootstrap()))) {
            for (int i = 0; i < 4; i++) {
                assertEquals(0L, p.send(new ProducerRecord<>(topic, i, null, ("p" + i).getBytes())).get().offset());
            }
        }
    }

    @Test
    void describeConfigsAndIncrementalAlterConfigs() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-configs");
        Clients.createTopic(admin, topic, 1, 1, Map.of("retention.ms", "3600000"));
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);

        Map<String, ConfigEntry> before = topicConfig(topic);
        ConfigEntry retention = before.get("retention.ms");
        assertEquals("3600000", retention.value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, retention.source(), "retention.ms source");
        assertFalse(retention.isDefault());
        ConfigEntry maxBytes = before.get("max.message.bytes");
        assertNotNull(maxBytes, "max.message.bytes is described");
        assertEquals("1048588", maxBytes.value(), "default max.message.bytes");
        assertTrue(maxBytes.isDefault() || maxBytes.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                "max.message.bytes not set on the topic: " + maxBytes);
        assertEquals("delete", before.get("cleanup.policy").value(), "default cleanup.policy");

        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("segment.bytes", "1048576"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND))))
                .all());
        Map<String, ConfigEntry> after = topicConfig(topic);
        assertEquals("7200000", after.get("retention.ms").value(), "SET retention.ms");
        assertEquals("1048576", after.get("segment.bytes").value(), "SET segment.bytes");
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, after.get("segment.bytes").source());
        assertEquals(Set.of("delete", "compact"), Set.of(after.get("cleanup.policy").value().split(",")),
                "APPEND compact to cleanup.policy");

        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT))))
                .all());
        Map<String, ConfigEntry> reverted = topicConfig(topic);
        assertEquals("604800000", reverted.get("retention.ms").value(), "DELETE retention.ms: back to the default");
        assertTrue(reverted.get("retention.ms").source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                "retention.ms no longer a topic config: " + reverted.get("retention.ms"));
        assertEquals("compact", reverted.get("cleanup.policy").value(), "SUBTRACT delete from cleanup.policy");

        Throwable bad = Clients.failure(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all());
        assertInstanceOf(InvalidConfigurationException.class, bad, "SET retention.ms=soon");
        Throwable unknown = Clients.failure(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all());
        assertInstanceOf(InvalidConfigurationException.class, unknown, "SET no.such.config");
        assertEquals("1048576", topicConfig(topic).get("segment.bytes").value(), "failed alters changed nothing");

        // a broker resource is described (read-only there)
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "1");
        Config bc = get(admin.describeConfigs(List.of(broker)).all()).get(broker);
        assertFalse(bc.entries().isEmpty(), "broker 1 has configs to describe");
    }

    @Test
    void listOffsetsEarliestLatestAndByTimestamp() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-offsets");
        Clients.createTopic(admin, topic, 1, 1, Map.of());
        long base = 1_700_000_000_000L;
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(Clients.producerProps(strata.bootstrap()))) {
            for (int i = 0; i < 10; i++) {
                // timestamps out of order: the largest is at offset 6
                long ts = i == 6 ? base + 1000 : base + i;
                p.send(new ProducerRecord<>(topic, 0, ts, null, ("v" + i).getBytes()));
            }
            p.flush();
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        assertEquals(0L, offset(tp, OffsetSpec.earliest()), "earliest");
        assertEquals(10L, offset(tp, OffsetSpec.latest()), "latest");
        assertEquals(3L, offset(tp, OffsetSpec.forTimestamp(base + 3)), "forTimestamp(base + 3)");
        ListOffsetsResult.ListOffsetsResultInfo max = get(admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp()))
                .partitionResult(tp));
        assertEquals(6L, max.offset(), "maxTimestamp: the offset of the record with the largest timestamp");
        assertEquals(base + 1000, max.timestamp(), "maxTimestamp's timestamp");
    }

    static long offset(TopicPartition tp, OffsetSpec spec) throws Exception {
        return get(admin.listOffsets(Map.of(tp, spec)).partitionResult(tp)).offset();
    }

    @Test
    @SuppressWarnings("deprecation") // listConsumerGroups: what most tools still call
    void consumerGroupListDescribeOffsetsAndDelete() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-groups");
        String group = Clients.uniqueTopic("java-admin-group");
        Clients.createTopic(admin, topic, 2, 1, Map.of());
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(Clients.producerProps(strata.bootstrap()))) {
            for (int i = 0; i < 20; i++) {
                p.send(new ProducerRecord<>(topic, i % 2, null, ("v" + i).getBytes()));
            }
            p.flush();
        }
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        var props = Clients.consumerProps(strata.bootstrap(), group);
        props.put("client.id", "java-admin-member");
        try (KafkaConsumer<byte[], byte[]> c = Clients.consumer(props)) {
            c.subscribe(List.of(topic));
            int[] n = {0};
            Wait.untilTrue(Duration.ofSeconds(30), "20 records", () -> {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    n[0]++;
                }
                return n[0] >= 20;
            }, () -> n[0] + " records");
            c.commitSync(Map.of(p0, new OffsetAndMetadata(7), p1, new OffsetAndMetadata(10)));

            // while the member is active
            Collection<ConsumerGroupListing> listed = get(admin.listConsumerGroups().all());
            ConsumerGroupListing l = listed.stream().filter(g -> g.groupId().equals(group)).findFirst()
                    .orElseThrow(() -> new AssertionError(group + " not in listConsumerGroups: " + listed));
            assertFalse(l.isSimpleConsumerGroup());
            assertEquals(GroupState.STABLE, l.groupState().orElse(null), "listed state while active");
            Collection<GroupListing> groups = get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all());
            assertTrue(groups.stream().anyMatch(g -> g.groupId().equals(group)), "listGroups(consumer): " + groups);

            ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group));
            assertEquals(GroupState.STABLE, d.groupState(), "described state while active");
            assertEquals(1, d.members().size(), "members: " + d.members());
            MemberDescription m = d.members().iterator().next();
            assertEquals("java-admin-member", m.clientId());
            assertEquals(Set.of(p0, p1), m.assignment().topicPartitions(), "member's assignment");
            assertFalse(d.partitionAssignor().isEmpty(), "assignor named");
            assertEquals(1, d.coordinator().id(), "coordinator");

            Map<TopicPartition, OffsetAndMetadata> offs = get(admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata());
            assertEquals(Map.of(p0, 7L, p1, 10L), offs.entrySet().stream()
                    .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset())), "committed offsets");

            Throwable busy = Clients.failure(admin.deleteConsumerGroups(List.of(group)).all());
            assertInstanceOf(GroupNotEmptyException.class, busy, "deleting a group with a member");
            Throwable subscribed = Clients.failure(admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all());
            assertInstanceOf(GroupSubscribedToTopicException.class, subscribed,
                    "deleting offsets of a topic the group subscribes to");
        }

        // the member left (LeaveGroup on close): the group is empty but keeps its offsets
        ConsumerGroupDescription empty = get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group));
        assertEquals(GroupState.EMPTY, empty.groupState(), "state after the member closed");
        assertTrue(empty.members().isEmpty());
        get(admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all());
        Map<TopicPartition, OffsetAndMetadata> left = get(admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata());
        assertEquals(Set.of(p1), left.keySet().stream().filter(tp -> left.get(tp) != null).collect(Collectors.toSet()),
                "offsets after OffsetDelete of p0");

        get(admin.deleteConsumerGroups(List.of(group)).all());
        Collection<ConsumerGroupListing> after = get(admin.listConsumerGroups().all());
        assertTrue(after.stream().noneMatch(g -> g.groupId().equals(group)), "deleted group still listed: " + after);
        Map<TopicPartition, OffsetAndMetadata> gone = get(admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata());
        assertTrue(gone.values().stream().allMatch(v -> v == null), "offsets of a deleted group: " + gone);
    }

    @Test
    void describeClusterNamesThisBroker() throws Exception {
        var r = admin.describeCluster();
        String clusterId = get(r.clusterId());
        assertNotNull(clusterId);
        assertFalse(clusterId.isEmpty(), "cluster id");
        Collection<Node> nodes = get(r.nodes());
        assertEquals(1, nodes.size(), "nodes: " + nodes);
        Node n = nodes.iterator().next();
        assertEquals(1, n.id());
        assertEquals("127.0.0.1", n.host());
        assertEquals(strata.agent().kafkaPort, n.port());
        Node controller = get(r.controller());
        assertNotNull(controller, "controller");
        assertEquals(1, controller.id(), "controller id");
    }

    @Test
    void deleteTopicsRemovesTheTopicAndOnlyIt() throws Exception {
        String topic = Clients.uniqueTopic("java-admin-delete");
        String keep = Clients.uniqueTopic("java-admin-keep");
        Clients.createTopic(admin, topic, 2, 1, Map.of());
        Clients.createTopic(admin, keep, 1, 1, Map.of());
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(Clients.producerProps(strata.bootstrap()))) {
            p.send(new ProducerRecord<>(topic, 0, null, "doomed".getBytes(StandardCharsets.UTF_8))).get();
        }
        get(admin.deleteTopics(List.of(topic)).all());
        Wait.untilTrue(Duration.ofSeconds(15), topic + " to disappear from listTopics",
                () -> {
                    try {
                        return !Clients.listTopics(admin).contains(topic);
                    } catch (Exception e) {
                        return false;
                    }
                }, () -> "still listed");
        assertTrue(Clients.listTopics(admin).contains(keep), "the other topic stays");
        Throwable described = Clients.failure(admin.describeTopics(List.of(topic)).allTopicNames());
        assertInstanceOf(UnknownTopicOrPartitionException.class, described, "describing a deleted topic");
        Throwable again = Clients.failure(admin.deleteTopics(List.of(topic)).all());
        assertInstanceOf(UnknownTopicOrPartitionException.class, again, "deleting it again");

        // the name can be used again, and the new topic starts empty
        Clients.createTopic(admin, topic, 1, 1, Map.of());
        TopicPartition tp = new TopicPartition(topic, 0);
        assertEquals(0L, offset(tp, OffsetSpec.latest()), "a re-created topic starts at offset 0");
    }
}
