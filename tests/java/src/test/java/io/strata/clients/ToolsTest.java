package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Kafka's own command-line tools (kafka-topics, kafka-consumer-groups, the console
 *  producer and consumer, the verifiable producer and consumer) against one agent, each
 *  run as a child JVM the way its shell script runs it. */
class ToolsTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.singleNode();

    static final Duration TOOL_TIMEOUT = Duration.ofSeconds(90);
    static final ObjectMapper JSON = new ObjectMapper();

    static KafkaTool.Result tool(String mainClass, String... args) {
        return KafkaTool.ok(TOOL_TIMEOUT, null, mainClass, args);
    }

    /** JSON lines of a tool's stdout (other lines, such as deprecation notices, skipped). */
    static List<JsonNode> jsonLines(List<String> lines) {
        List<JsonNode> out = new ArrayList<>();
        for (String l : lines) {
            if (l.startsWith("{")) {
                try {
                    out.add(JSON.readTree(l));
                } catch (Exception e) {
                    throw new AssertionError("not JSON: " + l, e);
                }
            }
        }
        return out;
    }

    @Test
    void kafkaTopicsCreateDescribeAndList() throws Exception {
        String topic = Clients.uniqueTopic("java-tool-topic");
        String bs = strata.bootstrap();
        KafkaTool.Result created = tool(KafkaTool.TOPICS, "--bootstrap-server", bs, "--create", "--topic", topic,
                "--partitions", "3", "--replication-factor", "1", "--config", "retention.ms=123456789");
        assertTrue(created.stdout().contains("Created topic " + topic), created.describe());

        KafkaTool.Result listed = tool(KafkaTool.TOPICS, "--bootstrap-server", bs, "--list");
        assertTrue(listed.lines().contains(topic), "kafka-topics --list shows the topic\n" + listed.describe());

        KafkaTool.Result described = tool(KafkaTool.TOPICS, "--bootstrap-server", bs, "--describe", "--topic", topic);
        String out = described.stdout();
        assertTrue(out.contains("Topic: " + topic), described.describe());
        assertTrue(out.contains("PartitionCount: 3"), described.describe());
        assertTrue(out.contains("ReplicationFactor: 1"), described.describe());
        assertTrue(out.contains("retention.ms=123456789"), "the topic's config in the summary\n" + described.describe());
        Pattern row = Pattern.compile("Partition: (\\d+)\\s+Leader: (\\S+)\\s+Replicas: (\\S+)\\s+Isr: (\\S+)");
        Map<Integer, String> rows = new TreeMap<>();
        Matcher m = row.matcher(out);
        while (m.find()) {
            rows.put(Integer.parseInt(m.group(1)), m.group(2) + "/" + m.group(3) + "/" + m.group(4));
        }
        assertEquals(Map.of(0, "1/1/1", 1, "1/1/1", 2, "1/1/1"), rows,
                "leader/replicas/isr per partition\n" + described.describe());

        // kafka-topics --alter --partitions, then the Admin client agrees
        tool(KafkaTool.TOPICS, "--bootstrap-server", bs, "--alter", "--topic", topic, "--partitions", "5");
        try (Admin a = Clients.admin(bs)) {
            TopicDescription d = Clients.waitForLeaders(a, topic, 5);
            assertEquals(5, d.partitions().size());
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            ConfigEntry e = Clients.get(a.describeConfigs(List.of(r)).all()).get(r).get("retention.ms");
            assertEquals("123456789", e.value());
        }

        // creating it again fails, with Kafka's message
        KafkaTool.Result dup = KafkaTool.run(TOOL_TIMEOUT, null, KafkaTool.TOPICS, "--bootstrap-server", bs,
                "--create", "--topic", topic, "--partitions", "1");
        assertTrue(dup.exitCode() != 0, "creating an existing topic must fail\n" + dup.describe());
        assertTrue((dup.stdout() + dup.stderr()).contains("already exists"), dup.describe());

        // kafka-topics --delete, then --list no longer shows it
        tool(KafkaTool.TOPICS, "--bootstrap-server", bs, "--delete", "--topic", topic);
        Wait.untilTrue(Duration.ofSeconds(30), topic + " gone from kafka-topics --list",
                () -> !tool(KafkaTool.TOPICS, "--bootstrap-server", bs, "--list").lines().contains(topic),
                () -> "still listed");
    }

    /** Rows of kafka-consumer-groups --describe (or --reset-offsets): header name -> value, per row. */
    static List<Map<String, String>> table(String stdout, String firstColumn) {
        List<Map<String, String>> rows = new ArrayList<>();
        List<String> header = null;
        for (String line : stdout.split("\\R")) {
            String t = line.trim();
            if (t.isEmpty()) {
                continue;
            }
            List<String> cells = List.of(t.split("\\s+"));
            if (cells.get(0).equals(firstColumn)) {
                header = cells;
                continue;
            }
            if (header != null && cells.size() >= header.size() - 3) {
                Map<String, String> row = new HashMap<>();
                for (int i = 0; i < header.size() && i < cells.size(); i++) {
                    row.put(header.get(i), cells.get(i));
                }
                rows.add(row);
            }
        }
        return rows;
    }

    @Test
    void kafkaConsumerGroupsDescribeShowsLagAndResetsToEarliest() throws Exception {
        String topic = Clients.uniqueTopic("java-tool-lag");
        String group = Clients.uniqueTopic("java-tool-group");
        String bs = strata.bootstrap();
        Clients.createTopic(bs, topic, 3);
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(Clients.producerProps(bs))) {
            for (int i = 0; i < 30; i++) {
                p.send(new ProducerRecord<>(topic, i % 3, null, ("v" + i).getBytes()));
            }
            p.flush();
        }
        // a member that read everything but committed 4, 6, 8 (lags 6, 4, 2)
        Map<Integer, Long> committed = Map.of(0, 4L, 1, 6L, 2, 8L);
        try (KafkaConsumer<byte[], byte[]> c = Clients.consumer(Clients.consumerProps(bs, group))) {
            c.subscribe(List.of(topic));
            int[] n = {0};
            Wait.untilTrue(Duration.ofSeconds(30), "30 records", () -> {
                n[0] += c.poll(Duration.ofMillis(100)).count();
                return n[0] >= 30;
            }, () -> n[0] + " records");
            c.commitSync(committed.entrySet().stream().collect(Collectors.toMap(
                    e -> new TopicPartition(topic, e.getKey()), e -> new OffsetAndMetadata(e.getValue()))));

            KafkaTool.Result active = tool(KafkaTool.CONSUMER_GROUPS, "--bootstrap-server", bs, "--describe",
                    "--group", group);
            List<Map<String, String>> rows = table(active.stdout(), "GROUP");
            assertEquals(3, rows.size(), "one row per partition\n" + active.describe());
            for (Map<String, String> r : rows) {
                int part = Integer.parseInt(r.get("PARTITION"));
                String at = "partition " + part + "\n" + active.describe();
                assertEquals(group, r.get("GROUP"), at);
                assertEquals(topic, r.get("TOPIC"), at);
                assertEquals(String.valueOf(committed.get(part)), r.get("CURRENT-OFFSET"), at);
                assertEquals("10", r.get("LOG-END-OFFSET"), at);
                assertEquals(String.valueOf(10 - committed.get(part)), r.get("LAG"), at);
                assertTrue(r.get("CONSUMER-ID") != null && !r.get("CONSUMER-ID").equals("-"),
                        "an active member owns the partition\n" + at);
            }
            // --members --verbose lists the one member with its 3 partitions
            KafkaTool.Result members = tool(KafkaTool.CONSUMER_GROUPS, "--bootstrap-server", bs, "--describe",
                    "--group", group, "--members");
            List<Map<String, String>> mrows = table(members.stdout(), "GROUP");
            assertEquals(1, mrows.size(), members.describe());
            assertEquals("3", mrows.get(0).get("#PARTITIONS"), members.describe());

            // resetting an active group's offsets is refused
            KafkaTool.Result refused = KafkaTool.run(TOOL_TIMEOUT, null, KafkaTool.CONSUMER_GROUPS,
                    "--bootstrap-server", bs, "--group", group, "--topic", topic, "--reset-offsets",
                    "--to-earliest", "--execute");
            assertTrue((refused.stdout() + refused.stderr()).contains("inactive"),
                    "reset of an active group must be refused (Kafka: 'Assignments can only be reset if the "
                            + "group ... is inactive')\n" + refused.describe());
        }

        // the member left: the group is inactive and can be reset
        KafkaTool.Result state = tool(KafkaTool.CONSUMER_GROUPS, "--bootstrap-server", bs, "--describe",
                "--group", group, "--state");
        assertTrue(state.stdout().contains("Empty"), "group state after the member left\n" + state.describe());

        KafkaTool.Result reset = tool(KafkaTool.CONSUMER_GROUPS, "--bootstrap-server", bs, "--group", group,
                "--topic", topic, "--reset-offsets", "--to-earliest", "--execute");
        List<Map<String, String>> resetRows = table(reset.stdout(), "GROUP");
        assertEquals(3, resetRows.size(), reset.describe());
        for (Map<String, String> r : resetRows) {
            assertEquals("0", r.get("NEW-OFFSET"), reset.describe());
        }
        try (Admin a = Clients.admin(bs)) {
            Map<TopicPartition, OffsetAndMetadata> offs = Clients.get(a.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata());
            assertEquals(Map.of(0L, 3L), offs.values().stream()
                    .collect(Collectors.groupingBy(OffsetAndMetadata::offset, Collectors.counting())),
                    "every committed offset is 0 after --to-earliest: " + offs);
        }
        KafkaTool.Result after = tool(KafkaTool.CONSUMER_GROUPS, "--bootstrap-server", bs, "--describe",
                "--group", group);
        List<Map<String, String>> afterRows = table(after.stdout(), "GROUP");
        assertEquals(3, afterRows.size(), after.describe());
        for (Map<String, String> r : afterRows) {
            assertEquals("0", r.get("CURRENT-OFFSET"), after.describe());
            assertEquals("10", r.get("LAG"), after.describe());
        }

        // --list shows the group; --delete removes it
        KafkaTool.Result list = tool(KafkaTool.CONSUMER_GROUPS, "--bootstrap-server", bs, "--list");
        assertTrue(list.lines().contains(group), list.describe());
        KafkaTool.Result deleted = tool(KafkaTool.CONSUMER_GROUPS, "--bootstrap-server", bs, "--delete",
                "--group", group);
        assertTrue(deleted.stdout().contains("successful"), deleted.describe());
        KafkaTool.Result listAfter = tool(KafkaTool.CONSUMER_GROUPS, "--bootstrap-server", bs, "--list");
        assertFalse(listAfter.lines().contains(group), listAfter.describe());
    }

    @Test
    void consoleProducerThenConsoleConsumerRoundTrip() throws Exception {
        String topic = Clients.uniqueTopic("java-tool-console");
        String bs = strata.bootstrap();
        Clients.createTopic(bs, topic, 1);
        List<String> lines = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            lines.add("key-" + i + ":value " + i + " ünïcødé ✓");
        }
        KafkaTool.ok(TOOL_TIMEOUT, String.join("\n", lines) + "\n", KafkaTool.CONSOLE_PRODUCER,
                "--bootstrap-server", bs, "--topic", topic,
                "--property", "parse.key=true", "--property", "key.separator=:",
                "--producer-property", "acks=all");

        KafkaTool.Result consumed = tool(KafkaTool.CONSOLE_CONSUMER, "--bootstrap-server", bs, "--topic", topic,
                "--from-beginning", "--max-messages", "50", "--timeout-ms", "30000",
                "--property", "print.key=true", "--property", "key.separator=:",
                "--property", "print.offset=true", "--property", "print.partition=true");
        List<String> got = consumed.lines().stream().filter(l -> l.startsWith("Partition:")).toList();
        assertEquals(50, got.size(), consumed.describe());
        for (int i = 0; i < 50; i++) {
            // DefaultMessageFormatter: Partition:0:Offset:i:key:value (with key.separator ':')
            assertEquals("Partition:0:Offset:" + i + ":" + lines.get(i), got.get(i), "line " + i);
        }
        assertTrue(consumed.stderr().contains("Processed a total of 50 messages"), consumed.describe());

        // and the Java consumer sees the same bytes
        List<ConsumerRecord<byte[], byte[]>> recs = Clients.readAll(bs, topic, 1);
        assertEquals(50, recs.size());
        for (int i = 0; i < 50; i++) {
            String[] kv = lines.get(i).split(":", 2);
            assertEquals(kv[0], new String(recs.get(i).key(), StandardCharsets.UTF_8));
            assertEquals(kv[1], new String(recs.get(i).value(), StandardCharsets.UTF_8));
        }
    }

    @Test
    void verifiableProducerAcksAllThenVerifiableConsumerSeesEveryAckedOffset() throws Exception {
        String topic = Clients.uniqueTopic("java-tool-verifiable");
        String bs = strata.bootstrap();
        int n = 5000;
        Clients.createTopic(bs, topic, 3);

        KafkaTool.Result produced = tool(KafkaTool.VERIFIABLE_PRODUCER, "--bootstrap-server", bs, "--topic", topic,
                "--max-messages", String.valueOf(n), "--acks", "-1", "--repeating-keys", "30");
        List<JsonNode> events = jsonLines(produced.lines());
        Map<String, Long> acked = new HashMap<>(); // "partition/offset" -> value
        List<JsonNode> errors = new ArrayList<>();
        JsonNode toolData = null;
        for (JsonNode e : events) {
            switch (e.get("name").asText()) {
                case "producer_send_success" -> {
                    assertEquals(topic, e.get("topic").asText());
                    String po = e.get("partition").asInt() + "/" + e.get("offset").asLong();
                    Long prev = acked.put(po, Long.parseLong(e.get("value").asText()));
                    assertEquals(null, prev, "two acks for " + po);
                }
                case "producer_send_error" -> errors.add(e);
                case "tool_data" -> toolData = e;
                default -> { }
            }
        }
        System.out.println("[verifiable] producer: acked=" + acked.size() + " failed=" + errors.size()
                + " tool_data=" + toolData);
        assertEquals(List.of(), errors, "producer_send_error events");
        assertEquals(n, acked.size(), "producer_send_success events");
        assertNotNull(toolData, "tool_data summary\n" + produced.describe());
        assertEquals(n, toolData.get("acked").asLong());
        // offsets dense per partition
        Map<Integer, Set<Long>> byPartition = new TreeMap<>();
        for (String po : acked.keySet()) {
            String[] s = po.split("/");
            byPartition.computeIfAbsent(Integer.parseInt(s[0]), k -> new HashSet<>()).add(Long.parseLong(s[1]));
        }
        for (Map.Entry<Integer, Set<Long>> e : byPartition.entrySet()) {
            int size = e.getValue().size();
            assertEquals(size - 1L, e.getValue().stream().mapToLong(Long::longValue).max().orElse(-1),
                    "acked offsets of partition " + e.getKey() + " are 0.." + (size - 1));
        }

        String group = Clients.uniqueTopic("java-tool-verifiable-group");
        KafkaTool.Result consumed = tool(KafkaTool.VERIFIABLE_CONSUMER, "--bootstrap-server", bs, "--topic", topic,
                "--group-id", group, "--max-messages", String.valueOf(n), "--verbose", "--reset-policy", "earliest",
                "--group-protocol", "classic", "--session-timeout", "10000");
        Map<String, Long> seen = new HashMap<>();
        int dupes = 0;
        boolean assigned = false;
        long committedTotal = 0;
        for (JsonNode e : jsonLines(consumed.lines())) {
            switch (e.get("name").asText()) {
                case "record_data" -> {
                    String po = e.get("partition").asInt() + "/" + e.get("offset").asLong();
                    if (seen.put(po, Long.parseLong(e.get("value").asText())) != null) {
                        dupes++;
                    }
                }
                case "partitions_assigned" -> assigned = true;
                case "offsets_committed" -> {
                    assertTrue(e.get("success").asBoolean(), "commit failed: " + e);
                    committedTotal++;
                }
                default -> { }
            }
        }
        List<String> missing = acked.entrySet().stream()
                .filter(a -> !a.getValue().equals(seen.get(a.getKey())))
                .map(a -> a.getKey() + "=" + a.getValue() + " (seen " + seen.get(a.getKey()) + ")")
                .sorted().limit(20).toList();
        System.out.println("[verifiable] consumer: seen=" + seen.size() + " duplicates=" + dupes
                + " missing=" + missing.size() + " commits=" + committedTotal);
        assertTrue(assigned, "partitions_assigned event\n" + consumed.describe());
        assertEquals(List.of(), missing, "acked records the VerifiableConsumer did not see at their offset");
        assertEquals(n, seen.size(), "records seen");
        assertTrue(committedTotal > 0, "the consumer committed offsets");
        try (Admin a = Clients.admin(bs)) {
            Map<TopicPartition, OffsetAndMetadata> offs = Clients.get(a.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata());
            Map<Integer, Long> got = offs.entrySet().stream()
                    .collect(Collectors.toMap(e -> e.getKey().partition(), e -> e.getValue().offset()));
            Map<Integer, Long> want = byPartition.entrySet().stream()
                    .collect(Collectors.toMap(Map.Entry::getKey, e -> (long) e.getValue().size()));
            assertEquals(want, got, "the group's committed offsets are the end offsets");
        }
        assertFalse(seen.isEmpty());
    }

    /** A record of {@code bytes} bytes to {@code topic}: null if acknowledged, else why not. */
    static Throwable produceFails(String bs, String topic, int bytes) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(Clients.producerProps(bs))) {
            p.send(new ProducerRecord<>(topic, 0, null, new byte[bytes])).get();
            return null;
        } catch (java.util.concurrent.ExecutionException e) {
            return e.getCause();
        }
    }

    static Map<String, ConfigEntry> describe(Admin a, ConfigResource r) throws Exception {
        return Clients.get(a.describeConfigs(List.of(r), new org.apache.kafka.clients.admin.DescribeConfigsOptions()
                .includeSynonyms(true)).all()).get(r).entries().stream()
                .collect(Collectors.toMap(ConfigEntry::name, e -> e));
    }

    /** kafka-configs on brokers: the cluster default and a per-broker value of a dynamic
     *  config apply to a topic without a restart, in Kafka's order and with Kafka's
     *  sources; read-only and bad values are refused; broker loggers change levels. */
    @Test
    void kafkaConfigsChangesBrokerConfigsWithoutRestart() throws Exception {
        String bs = strata.bootstrap();
        String topic = Clients.uniqueTopic("java-tool-dynamic");
        ConfigResource topicRes = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        ConfigResource broker1 = new ConfigResource(ConfigResource.Type.BROKER, "1");
        try (Admin a = Clients.admin(bs)) {
            Clients.createTopic(a, topic, 1, 1, Map.of());
            assertEquals(null, produceFails(bs, topic, 4000), "4000 bytes under the default max.message.bytes");
            try {
                tool(KafkaTool.CONFIGS, "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-default",
                        "--alter", "--add-config", "message.max.bytes=2000,log.retention.ms=3600000");
                ConfigEntry max = describe(a, topicRes).get("max.message.bytes");
                assertEquals("2000", max.value(), "the topic inherits the cluster default: " + max);
                assertEquals(ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, max.source(), max.toString());
                assertEquals("message.max.bytes", max.synonyms().get(0).name(), "synonym by the broker's name");
                assertTrue(produceFails(bs, topic, 4000) instanceof
                        org.apache.kafka.common.errors.RecordTooLargeException,
                        "4000 bytes over the new cluster default, applied without a restart");

                KafkaTool.Result defaults = tool(KafkaTool.CONFIGS, "--bootstrap-server", bs,
                        "--entity-type", "brokers", "--entity-default", "--describe");
                assertTrue(defaults.stdout().contains("message.max.bytes=2000"), defaults.describe());
                assertTrue(defaults.stdout().contains("log.retention.ms=3600000"), defaults.describe());

                // this broker's own value beats the cluster default
                tool(KafkaTool.CONFIGS, "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "1",
                        "--alter", "--add-config", "message.max.bytes=5000");
                ConfigEntry own = describe(a, broker1).get("message.max.bytes");
                assertEquals("5000", own.value(), own.toString());
                assertEquals(ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG, own.source(), own.toString());
                assertEquals(List.of("5000", "2000", "1048588"),
                        own.synonyms().stream().map(ConfigEntry.ConfigSynonym::value).toList(),
                        "synonyms: broker, cluster default, built-in default");
                assertFalse(own.isReadOnly(), own.toString());
                assertTrue(describe(a, broker1).get("broker.id").isReadOnly(), "broker.id is static");
                assertEquals(null, produceFails(bs, topic, 4000), "under the per-broker value");
                assertEquals("3600000", describe(a, topicRes).get("retention.ms").value(), "log.retention.ms");

                // refused: a read-only config, a bad value; nothing changes
                KafkaTool.Result readOnly = KafkaTool.run(TOOL_TIMEOUT, null, KafkaTool.CONFIGS, "--bootstrap-server",
                        bs, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config",
                        "log.dirs=/tmp/elsewhere");
                assertTrue(readOnly.exitCode() != 0, readOnly.describe());
                assertTrue((readOnly.stdout() + readOnly.stderr()).contains("Cannot update these configs dynamically"),
                        readOnly.describe());
                KafkaTool.Result bad = KafkaTool.run(TOOL_TIMEOUT, null, KafkaTool.CONFIGS, "--bootstrap-server",
                        bs, "--entity-type", "brokers", "--entity-name", "1", "--alter", "--add-config",
                        "log.retention.ms=soon");
                assertTrue(bad.exitCode() != 0, bad.describe());
                assertTrue((bad.stdout() + bad.stderr()).contains("log.retention.ms"), bad.describe());
                assertEquals("3600000", describe(a, topicRes).get("retention.ms").value(), "unchanged by refusals");
            } finally {
                tool(KafkaTool.CONFIGS, "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "1",
                        "--alter", "--delete-config", "message.max.bytes");
                tool(KafkaTool.CONFIGS, "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-default",
                        "--alter", "--delete-config", "message.max.bytes,log.retention.ms");
            }
            ConfigEntry back = describe(a, topicRes).get("max.message.bytes");
            assertEquals("1048588", back.value(), back.toString());
            assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, back.source(), back.toString());

            // broker loggers: Kafka's log4j level names, per agent, until restart
            tool(KafkaTool.CONFIGS, "--bootstrap-server", bs, "--entity-type", "broker-loggers", "--entity-name", "1",
                    "--alter", "--add-config", "strata_agent.group=DEBUG");
            KafkaTool.Result loggers = tool(KafkaTool.CONFIGS, "--bootstrap-server", bs,
                    "--entity-type", "broker-loggers", "--entity-name", "1", "--describe");
            assertTrue(loggers.stdout().contains("strata_agent.group=DEBUG"), loggers.describe());
            assertTrue(loggers.stdout().contains("root=INFO"), loggers.describe());
            KafkaTool.Result badLevel = KafkaTool.run(TOOL_TIMEOUT, null, KafkaTool.CONFIGS, "--bootstrap-server", bs,
                    "--entity-type", "broker-loggers", "--entity-name", "1", "--alter", "--add-config",
                    "strata_agent=LOUD");
            assertTrue(badLevel.exitCode() != 0, badLevel.describe());
            tool(KafkaTool.CONFIGS, "--bootstrap-server", bs, "--entity-type", "broker-loggers", "--entity-name", "1",
                    "--alter", "--delete-config", "strata_agent.group");
            KafkaTool.Result reset = tool(KafkaTool.CONFIGS, "--bootstrap-server", bs,
                    "--entity-type", "broker-loggers", "--entity-name", "1", "--describe");
            assertTrue(reset.stdout().contains("strata_agent.group=INFO"), reset.describe());
        }
    }
}
