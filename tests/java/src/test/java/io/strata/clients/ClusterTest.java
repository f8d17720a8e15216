package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Three agents on one shared embedded metastore and archive, a topic with replication
 * factor 3 and min.insync.replicas=2, Kafka's VerifiableProducer writing 100,000
 * records with acks=all (idempotent, retrying) while the leader of partition 0 is
 * SIGKILLed and later restarted on its data dir: every acknowledged record must be in
 * the log, at its acknowledged offset, exactly once.
 */
class ClusterTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    static final int NODES = 3;
    static final int PARTITIONS = 3;
    static final int RECORDS = 100_000;
    static final int THROUGHPUT = 5000; // records/s: ~20 s of producing
    static final ObjectMapper JSON = new ObjectMapper();

    /** Three agents, node ids 1..3, sharing a metastore file and an archive. */
    static List<StrataAgent> startCluster() throws IOException {
        return startCluster(strata);
    }

    /** {@link #startCluster()} for another class's (manual) extension, which registers
     *  the agents and the shared dir for log reporting and cleanup. */
    static List<StrataAgent> startCluster(StrataExtension strata) throws IOException {
        Path shared = Files.createTempDirectory("strata-java-cluster-");
        strata.addDir(shared);
        List<String> common = new ArrayList<>(List.of(
                "--metastore-path", shared.resolve("metastore.sqlite").toString(),
                "--archive-url", "file://" + shared.resolve("archive"),
                "--group-initial-rebalance-delay-ms", StrataExtension.GROUP_DELAY_MS));
        // Shorter than the 10 s defaults, so a killed leader's partitions move in ~3 s and
        // a dead follower leaves the ISR in ~2 s (when the binary has the flags).
        if (StrataAgent.agentHasFlag("--lease-ms")) {
            common.addAll(List.of("--lease-ms", "3000"));
        }
        if (StrataAgent.agentHasFlag("--replica-lag-time-max-ms")) {
            common.addAll(List.of("--replica-lag-time-max-ms", "2000"));
        }
        List<StrataAgent> agents = new ArrayList<>();
        for (int node = 1; node <= NODES; node++) {
            List<String> args = new ArrayList<>(List.of("--node-id", String.valueOf(node)));
            args.addAll(common);
            agents.add(strata.add(StrataAgent.create("strata-java-node" + node + "-", args,
                    Map.of("STRATA_DEFAULT_REPLICATION_FACTOR", String.valueOf(NODES)))));
        }
        for (StrataAgent a : agents) {
            a.start();
        }
        return agents;
    }

    static String servers(List<StrataAgent> agents) {
        return agents.stream().map(StrataAgent::bootstrap).collect(Collectors.joining(","));
    }

    static TopicDescription describe(Admin admin, String topic) throws Exception {
        return Clients.get(admin.describeTopics(List.of(topic)).topicNameValues().get(topic));
    }

    static String summary(TopicDescription d) {
        return d.partitions().stream().map(p -> "p" + p.partition() + " leader=" + (p.leader() == null ? null
                        : p.leader().id()) + " isr=" + p.isr().stream().map(Node::id).toList())
                .collect(Collectors.joining("; "));
    }

    /** Every partition led, with all three agents in its ISR. */
    static TopicDescription waitFullIsr(Admin admin, String topic, Duration timeout, String what) {
        return Wait.until(timeout, Duration.ofMillis(200), what, () -> {
            try {
                TopicDescription d = describe(admin, topic);
                boolean ok = d.partitions().size() == PARTITIONS && d.partitions().stream().allMatch(p ->
                        p.leader() != null && !p.leader().isEmpty() && p.replicas().size() == NODES
                                && p.isr().size() == NODES);
                return ok ? Wait.Check.done(d) : Wait.Check.notYet(summary(d));
            } catch (Exception e) {
                return Wait.Check.notYet(e.toString());
            }
        });
    }

    @Test
    void verifiableProducerAcksAllLosesNoAckedRecordWhenTheLeaderIsSigkilledAndRestarted() throws Exception {
        List<StrataAgent> agents = startCluster();
        String all = servers(agents);
        String topic = Clients.uniqueTopic("java-cluster");

        try (Admin admin = Clients.admin(all)) {
            Clients.createTopic(admin, topic, PARTITIONS, NODES, Map.of("min.insync.replicas", "2"));
            TopicDescription d0 = waitFullIsr(admin, topic, Duration.ofSeconds(30), "the new topic's full ISR");
            TopicPartitionInfo p0 = d0.partitions().get(0);
            int leader = p0.leader().id();
            System.out.println("[cluster] created " + topic + ": " + summary(d0));

            // producer config: idempotent, retrying through the leader change
            Path conf = Files.createTempFile("verifiable-producer-", ".properties");
            Files.writeString(conf, String.join("\n",
                    "enable.idempotence=true",
                    "acks=all",
                    "retries=2147483647",
                    "max.in.flight.requests.per.connection=5",
                    "delivery.timeout.ms=120000",
                    "request.timeout.ms=10000",
                    "retry.backoff.ms=100",
                    "reconnect.backoff.max.ms=1000",
                    "metadata.max.age.ms=5000",
                    "linger.ms=5",
                    ""), StandardCharsets.UTF_8);

            AtomicLong ackCount = new AtomicLong();
            Map<String, String> acked = new ConcurrentHashMap<>(); // "partition/offset" -> value
            ConcurrentLinkedQueue<String> doubleAcks = new ConcurrentLinkedQueue<>();
            ConcurrentLinkedQueue<JsonNode> failures = new ConcurrentLinkedQueue<>();
            ConcurrentLinkedQueue<String> otherLines = new ConcurrentLinkedQueue<>();
            long t0 = System.nanoTime();
            KafkaTool.Background producer = KafkaTool.start(line -> {
                if (!line.startsWith("{")) {
                    otherLines.add(line);
                    return;
                }
                try {
                    JsonNode e = JSON.readTree(line);
                    switch (e.get("name").asText()) {
                        case "producer_send_success" -> {
                            String po = e.get("partition").asInt() + "/" + e.get("offset").asLong();
                            if (acked.put(po, e.get("value").asText()) != null) {
                                doubleAcks.add(po);
                            }
                            ackCount.incrementAndGet();
                        }
                        case "producer_send_error" -> failures.add(e);
                        default -> { }
                    }
                } catch (IOException ex) {
                    otherLines.add(line);
                }
            }, KafkaTool.VERIFIABLE_PRODUCER, "--bootstrap-server", all, "--topic", topic,
                    "--max-messages", String.valueOf(RECORDS), "--throughput", String.valueOf(THROUGHPUT),
                    "--acks", "-1", "--producer.config", conf.toString());
            double killedAt;
            double restartedAt;
            int newLeader;
            try {
                // a third of the way in, SIGKILL the leader of partition 0
                Wait.untilTrue(Duration.ofSeconds(60), "30,000 acks before the kill",
                        () -> ackCount.get() >= 30_000 || !producer.isAlive(),
                        () -> "acked=" + ackCount.get() + " failures=" + failures.size());
                assertTrue(producer.isAlive(), "the producer ended before the kill\n" + producer.stderr());
                StrataAgent victim = agents.get(leader - 1);
                victim.kill();
                killedAt = (System.nanoTime() - t0) / 1e9;
                long ackedAtKill = ackCount.get();
                System.out.printf("[cluster] t=%.1fs SIGKILLed agent %d (leader of p0) at acked=%d%n",
                        killedAt, leader, ackedAtKill);

                // another agent takes partition 0 and the acks go on
                List<StrataAgent> alive = agents.stream().filter(StrataAgent::isRunning).toList();
                try (Admin survivors = Clients.admin(servers(alive))) {
                    newLeader = Wait.until(Duration.ofSeconds(40), Duration.ofMillis(200),
                            "a new leader for partition 0", () -> {
                                try {
                                    TopicPartitionInfo p = describe(survivors, topic).partitions().get(0);
                                    return p.leader() != null && !p.leader().isEmpty() && p.leader().id() != leader
                                            ? Wait.Check.done(p.leader().id())
                                            : Wait.Check.notYet(String.valueOf(p));
                                } catch (Exception e) {
                                    return Wait.Check.notYet(e.toString());
                                }
                            });
                }
                System.out.printf("[cluster] t=%.1fs agent %d leads p0%n", (System.nanoTime() - t0) / 1e9, newLeader);
                Wait.untilTrue(Duration.ofSeconds(40), "acks to continue after the kill",
                        () -> ackCount.get() >= ackedAtKill + 10_000 || !producer.isAlive(),
                        () -> "acked=" + ackCount.get() + " failures=" + failures.size());

                victim.start();
                restartedAt = (System.nanoTime() - t0) / 1e9;
                System.out.printf("[cluster] t=%.1fs restarted agent %d at acked=%d%n", restartedAt, leader,
                        ackCount.get());

                int rc = producer.waitFor(Duration.ofSeconds(150));
                System.out.printf("[cluster] t=%.1fs producer exited with %d%n", (System.nanoTime() - t0) / 1e9, rc);
                assertEquals(0, rc, "VerifiableProducer exit code\n" + producer.stderr());
            } finally {
                producer.close();
                Files.deleteIfExists(conf);
            }

            // the restarted agent catches up and rejoins every ISR
            TopicDescription healed = waitFullIsr(admin, topic, Duration.ofSeconds(60),
                    "agent " + leader + " back in every ISR");
            System.out.println("[cluster] after restart: " + summary(healed));

            // preferred-leader election gives partition 0 back to its first replica
            // (ElectionNotNeeded if strata's own rebalance timer did it already)
            TopicPartition tp0 = new TopicPartition(topic, 0);
            int preferred = healed.partitions().get(0).replicas().get(0).id();
            try {
                Clients.get(admin.electLeaders(ElectionType.PREFERRED, Set.of(tp0)).partitions()).forEach((tp, err) -> {
                    if (err.isPresent() && !(err.get() instanceof ElectionNotNeededException)) {
                        throw new AssertionError("electLeaders(PREFERRED, " + tp + ") failed", err.get());
                    }
                });
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof ElectionNotNeededException)) {
                    throw new AssertionError("electLeaders(PREFERRED, " + tp0 + ") failed", e.getCause());
                }
            }
            Wait.until(Duration.ofSeconds(30), Duration.ofMillis(200), "agent " + preferred + " to lead p0 again", () -> {
                try {
                    TopicPartitionInfo p = describe(admin, topic).partitions().get(0);
                    return p.leader() != null && p.leader().id() == preferred
                            ? Wait.Check.done(p) : Wait.Check.notYet(String.valueOf(p));
                } catch (Exception e) {
                    return Wait.Check.notYet(e.toString());
                }
            });
            System.out.println("[cluster] after electLeaders(PREFERRED): " + summary(describe(admin, topic)));

            // read everything back (from the current leaders)
            Properties extra = new Properties();
            extra.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
            List<ConsumerRecord<byte[], byte[]>> log = Clients.readAll(all, Clients.partitions(topic, PARTITIONS),
                    extra);
            Map<String, String> inLog = new HashMap<>();
            Map<String, Integer> valueCount = new HashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : log) {
                String v = new String(r.value(), StandardCharsets.UTF_8);
                inLog.put(r.partition() + "/" + r.offset(), v);
                valueCount.merge(v, 1, Integer::sum);
            }
            List<String> lost = new ArrayList<>();
            List<String> duplicated = new ArrayList<>();
            for (Map.Entry<String, String> a : acked.entrySet()) {
                if (!a.getValue().equals(inLog.get(a.getKey()))) {
                    lost.add(a.getKey() + "=" + a.getValue() + " (log has " + inLog.get(a.getKey()) + ")");
                }
                if (valueCount.getOrDefault(a.getValue(), 0) > 1) {
                    duplicated.add(a.getValue() + " x" + valueCount.get(a.getValue()));
                }
            }
            System.out.printf("[cluster] acked=%d failed=%d seen=%d lost=%d duplicated=%d double-acked=%d "
                            + "(kill at %.1fs, new leader agent %d, restart at %.1fs)%n",
                    acked.size(), failures.size(), log.size(), lost.size(), duplicated.size(), doubleAcks.size(),
                    killedAt, newLeader, restartedAt);
            if (!failures.isEmpty()) {
                System.out.println("[cluster] first failures: " + failures.stream().limit(5).toList());
            }
            assertEquals(List.of(), lost.stream().sorted().limit(20).toList(), lost.size() + " acked records lost");
            assertEquals(List.of(), doubleAcks.stream().limit(20).toList(), "offsets acknowledged twice");
            assertEquals(List.of(), duplicated.stream().sorted().limit(20).toList(),
                    "acked values written more than once by an idempotent producer");
            assertEquals(RECORDS, acked.size() + failures.size(), "every send got an ack or an error");
            assertEquals(List.of(), failures.stream().limit(5).map(JsonNode::toString).toList(),
                    "sends that failed (retries are unlimited within delivery.timeout.ms=120s)");

            // Kafka's VerifiableConsumer, in a group across the three agents, sees every
            // acknowledged record at its offset.
            String group = Clients.uniqueTopic("java-cluster-verifiable-group");
            KafkaTool.Result consumed = KafkaTool.ok(Duration.ofSeconds(180), null, KafkaTool.VERIFIABLE_CONSUMER,
                    "--bootstrap-server", all, "--topic", topic, "--group-id", group,
                    "--max-messages", String.valueOf(acked.size()), "--verbose", "--reset-policy", "earliest",
                    "--group-protocol", "classic", "--session-timeout", "10000");
            Map<String, String> seenByTool = new HashMap<>();
            for (String line : consumed.lines()) {
                if (!line.startsWith("{")) {
                    continue;
                }
                JsonNode e = JSON.readTree(line);
                if ("record_data".equals(e.get("name").asText())) {
                    seenByTool.put(e.get("partition").asInt() + "/" + e.get("offset").asLong(), e.get("value").asText());
                }
            }
            List<String> unseen = acked.entrySet().stream()
                    .filter(a -> !a.getValue().equals(seenByTool.get(a.getKey())))
                    .map(a -> a.getKey() + "=" + a.getValue() + " (seen " + seenByTool.get(a.getKey()) + ")")
                    .sorted().limit(20).toList();
            System.out.printf("[cluster] VerifiableConsumer: seen=%d of acked=%d, missing=%d%n",
                    seenByTool.size(), acked.size(), unseen.size());
            assertEquals(List.of(), unseen, "acked records the VerifiableConsumer did not see at their offset");
        }
    }
}
