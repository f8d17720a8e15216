package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.InvalidReplicaAssignmentException;
import org.apache.kafka.common.errors.NoReassignmentInProgressException;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Partition reassignment (KIP-455) and preferred leader election (KIP-460) through the
 * Java Admin, against three agents started as {@link ClusterTest} starts them: a
 * partition with replication factor 2 is moved to a replica set that drops its leader
 * and adds the third agent; the new replica copies the log, joins the ISR, and only then
 * is the old one removed. Every record acknowledged with acks=all before the move is
 * read back afterwards, at its offset.
 */
class ReassignmentTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    static final int RECORDS = 3000;
    static final int MORE_RECORDS = 500;
    static final Duration MOVE_TIMEOUT = Duration.ofSeconds(60);

    static List<StrataAgent> agents;
    static String all;

    @BeforeAll
    static void startCluster() throws Exception {
        agents = ClusterTest.startCluster(strata);
        all = ClusterTest.servers(agents);
    }

    static List<Integer> ids(List<Node> nodes) {
        return nodes.stream().map(Node::id).toList();
    }

    static TopicPartitionInfo partition0(Admin admin, String topic) throws Exception {
        return ClusterTest.describe(admin, topic).partitions().get(0);
    }

    static String show(TopicPartitionInfo p) {
        return "leader=" + (p.leader() == null ? null : p.leader().id()) + " replicas=" + ids(p.replicas())
                + " isr=" + ids(p.isr());
    }

    static String show(PartitionReassignment r) {
        return "replicas=" + r.replicas() + " adding=" + r.addingReplicas() + " removing=" + r.removingReplicas();
    }

    /** A topic with one partition and replication factor 2, both replicas in sync. */
    static TopicPartitionInfo createInSync(Admin admin, String topic) throws Exception {
        Clients.createTopic(admin, topic, 1, 2, Map.of());
        return Wait.until(Duration.ofSeconds(30), Duration.ofMillis(200), topic + "-0 led, 2 replicas in sync",
                () -> {
                    try {
                        TopicPartitionInfo p = partition0(admin, topic);
                        boolean ok = p.leader() != null && !p.leader().isEmpty() && p.replicas().size() == 2
                                && new HashSet<>(ids(p.isr())).equals(new HashSet<>(ids(p.replicas())));
                        return ok ? Wait.Check.done(p) : Wait.Check.notYet(show(p));
                    } catch (Exception e) {
                        return Wait.Check.notYet(e.toString());
                    }
                });
    }

    static Map<TopicPartition, PartitionReassignment> ongoing(Admin admin) throws Exception {
        return Clients.get(admin.listPartitionReassignments().reassignments());
    }

    /** A listed reassignment of {@code tp} from {@code original} to {@code target}, as Kafka
     *  lists it: replicas = target plus the replicas still to remove, adding = target minus
     *  original, removing = original minus target. */
    static void assertConsistent(PartitionReassignment r, List<Integer> original, List<Integer> target) {
        Set<Integer> adding = new HashSet<>(target);
        adding.removeAll(original);
        Set<Integer> removing = new HashSet<>(original);
        removing.removeAll(target);
        Set<Integer> union = new LinkedHashSet<>(target);
        union.addAll(original);
        String what = "listed reassignment " + original + " -> " + target + ": " + show(r);
        assertEquals(adding, new HashSet<>(r.addingReplicas()), "addingReplicas of the " + what);
        assertEquals(removing, new HashSet<>(r.removingReplicas()), "removingReplicas of the " + what);
        assertEquals(union, new HashSet<>(r.replicas()), "replicas of the " + what);
        assertEquals(r.replicas().size(), new HashSet<>(r.replicas()).size(), "no replica twice in the " + what);
    }

    /** Sends values[from..to) with acks=all to partition 0; checks each offset. */
    static void produce(String bootstrap, String topic, int from, int to) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(Clients.producerProps(bootstrap))) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = from; i < to; i++) {
                sent.add(p.send(new ProducerRecord<>(topic, 0, ("k" + i).getBytes(StandardCharsets.UTF_8),
                        value(i))));
            }
            p.flush();
            for (int i = from; i < to; i++) {
                assertEquals(i, sent.get(i - from).get().offset(), "offset acknowledged for record " + i);
            }
        }
    }

    static byte[] value(int i) {
        return String.format("value-%05d-%s", i, "x".repeat(100)).getBytes(StandardCharsets.UTF_8);
    }

    /** Every record of partition 0, read through {@code bootstrap}: exactly values[0..n), in order. */
    static void assertLog(String bootstrap, String topic, int n, String when) {
        Properties extra = new Properties();
        List<ConsumerRecord<byte[], byte[]>> got = Clients.readAll(bootstrap, List.of(new TopicPartition(topic, 0)),
                extra);
        List<String> lost = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            ConsumerRecord<byte[], byte[]> r = i < got.size() ? got.get(i) : null;
            if (r == null || r.offset() != i || !new String(value(i), StandardCharsets.UTF_8)
                    .equals(new String(r.value(), StandardCharsets.UTF_8))) {
                lost.add(i + " (read " + (r == null ? "nothing" : "offset " + r.offset()) + ")");
            }
        }
        assertEquals(List.of(), lost.stream().limit(20).toList(), lost.size() + " records missing or moved " + when);
        assertEquals(n, got.size(), "records in the log " + when);
    }

    @Test
    void aMoveThatDropsTheLeaderCopiesFirstLosesNothingAndPreferredElectionFollowsTheTarget() throws Exception {
        String topic = Clients.uniqueTopic("java-reassign");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Clients.admin(all)) {
            TopicPartitionInfo before = createInSync(admin, topic);
            List<Integer> original = ids(before.replicas());
            int oldLeader = before.leader().id();
            int kept = original.stream().filter(id -> id != oldLeader).findFirst().orElseThrow();
            int added = agents.stream().map(a -> agentId(a)).filter(id -> !original.contains(id)).findFirst()
                    .orElseThrow();
            // The new agent first: after the move it is the preferred leader.
            List<Integer> target = List.of(added, kept);
            System.out.println("[reassign] " + topic + " created: " + show(before) + "; moving to " + target);

            produce(all, topic, 0, RECORDS);
            assertEquals(Map.of(), ongoing(admin), "no reassignment before any was asked for");

            long t0 = System.nanoTime();
            Clients.get(admin.alterPartitionReassignments(
                    Map.of(tp, Optional.of(new NewPartitionReassignment(target)))).all());

            // Listed while in progress (or already done: then not listed at all).
            Map<TopicPartition, PartitionReassignment> listed = ongoing(admin);
            assertTrue(listed.keySet().stream().allMatch(tp::equals), "only " + tp + " is being moved: " + listed);
            if (listed.containsKey(tp)) {
                assertConsistent(listed.get(tp), original, target);
                System.out.println("[reassign] in progress: " + show(listed.get(tp)));
                Map<TopicPartition, PartitionReassignment> one =
                        Clients.get(admin.listPartitionReassignments(Set.of(tp)).reassignments());
                if (one.containsKey(tp)) {
                    assertConsistent(one.get(tp), original, target);
                }
            } else {
                System.out.println("[reassign] already complete when first listed");
            }

            // Until the move is complete every view is the original set, target + removing,
            // or the target; the leader is always one of the replicas.
            Set<Integer> union = new HashSet<>(original);
            union.addAll(target);
            Set<Set<Integer>> allowed = Set.of(Set.copyOf(original), union, Set.copyOf(target));
            List<String> odd = new ArrayList<>();
            TopicPartitionInfo after = Wait.until(MOVE_TIMEOUT, Duration.ofMillis(200),
                    "replicas and ISR " + target + " and no reassignment listed", () -> {
                        try {
                            TopicPartitionInfo p = partition0(admin, topic);
                            Set<Integer> rs = new HashSet<>(ids(p.replicas()));
                            if (!allowed.contains(rs) || (p.leader() != null && !p.leader().isEmpty()
                                    && !rs.contains(p.leader().id()))) {
                                odd.add(show(p));
                            }
                            Map<TopicPartition, PartitionReassignment> now = ongoing(admin);
                            if (now.containsKey(tp)) {
                                assertConsistent(now.get(tp), original, target);
                            }
                            boolean done = ids(p.replicas()).equals(target)
                                    && new HashSet<>(ids(p.isr())).equals(Set.copyOf(target))
                                    && p.leader() != null && !p.leader().isEmpty() && now.isEmpty();
                            return done ? Wait.Check.done(p) : Wait.Check.notYet(show(p) + " listed=" + now);
                        } catch (AssertionError e) {
                            odd.add(e.getMessage());
                            return Wait.Check.notYet(e.getMessage());
                        } catch (Exception e) {
                            return Wait.Check.notYet(e.toString());
                        }
                    });
            System.out.printf("[reassign] complete after %.1f s: %s%n", (System.nanoTime() - t0) / 1e9, show(after));
            assertEquals(List.of(), odd, "states seen while moving " + original + " -> " + target);
            assertTrue(target.contains(after.leader().id()), "the leader is a target replica: " + show(after));
            assertEquals(Map.of(), Clients.get(admin.listPartitionReassignments(Set.of(tp)).reassignments()),
                    "listPartitionReassignments(" + tp + ") after the move");

            // Every record acknowledged before the move, read from the new leader; and the
            // partition takes acks=all writes on its new replica set.
            String newLeader = agentFor(after.leader().id()).bootstrap();
            assertLog(newLeader, topic, RECORDS, "after the move (leader " + after.leader().id() + ")");
            produce(all, topic, RECORDS, RECORDS + MORE_RECORDS);

            // Nothing to cancel once the move is complete.
            Throwable cancel = Clients.failure(admin.alterPartitionReassignments(
                    Map.of(tp, Optional.empty())).values().get(tp));
            assertInstanceOf(NoReassignmentInProgressException.class, cancel,
                    "cancelling the completed move: " + cancel);

            // Preferred election: the first target replica leads (ElectionNotNeeded if it
            // already did).
            int preferred = target.get(0);
            Map<TopicPartition, Optional<Throwable>> elected =
                    Clients.get(admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions());
            assertEquals(Set.of(tp), elected.keySet(), "electLeaders answers for " + tp);
            elected.get(tp).ifPresent(e -> assertInstanceOf(ElectionNotNeededException.class, e,
                    "electLeaders(PREFERRED, " + tp + ") with agent " + preferred + " in sync: " + e));
            System.out.println("[reassign] electLeaders(PREFERRED): "
                    + elected.get(tp).map(Throwable::toString).orElse("elected"));
            TopicPartitionInfo led = Wait.until(Duration.ofSeconds(30), Duration.ofMillis(200),
                    "agent " + preferred + " to lead " + tp, () -> {
                        try {
                            TopicPartitionInfo p = partition0(admin, topic);
                            return p.leader() != null && p.leader().id() == preferred
                                    ? Wait.Check.done(p) : Wait.Check.notYet(show(p));
                        } catch (Exception e) {
                            return Wait.Check.notYet(e.toString());
                        }
                    });
            assertEquals(target, ids(led.replicas()), "replicas after the election");
            assertEquals(Set.copyOf(target), new HashSet<>(ids(led.isr())), "ISR after the election");

            // A second request finds the preferred replica leading.
            Optional<Throwable> again = Clients.get(
                    admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions()).get(tp);
            assertTrue(again.isPresent() && again.get() instanceof ElectionNotNeededException,
                    "a second electLeaders(PREFERRED) with agent " + preferred + " leading: " + again);

            assertLog(agentFor(preferred).bootstrap(), topic, RECORDS + MORE_RECORDS,
                    "after the election (leader " + preferred + ")");
        }
    }

    @Test
    void reassignmentsToAMissingBrokerOrOfNothingInProgressAreRefused() throws Exception {
        String topic = Clients.uniqueTopic("java-reassign-bad");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Clients.admin(all)) {
            TopicPartitionInfo before = createInSync(admin, topic);
            List<Integer> original = ids(before.replicas());
            int missing = 42;
            assertTrue(agents.stream().noneMatch(a -> agentId(a) == missing));

            Throwable noSuchBroker = Clients.failure(admin.alterPartitionReassignments(Map.of(tp,
                    Optional.of(new NewPartitionReassignment(List.of(original.get(0), missing))))).values().get(tp));
            assertInstanceOf(InvalidReplicaAssignmentException.class, noSuchBroker,
                    "a reassignment to " + List.of(original.get(0), missing) + " (no broker " + missing + "): "
                            + noSuchBroker);

            Throwable twice = Clients.failure(admin.alterPartitionReassignments(Map.of(tp,
                    Optional.of(new NewPartitionReassignment(List.of(original.get(0), original.get(0))))))
                    .values().get(tp));
            assertInstanceOf(InvalidReplicaAssignmentException.class, twice,
                    "a reassignment naming broker " + original.get(0) + " twice: " + twice);

            Throwable cancel = Clients.failure(admin.alterPartitionReassignments(
                    Map.of(tp, Optional.empty())).values().get(tp));
            assertInstanceOf(NoReassignmentInProgressException.class, cancel,
                    "cancelling when nothing is in progress: " + cancel);

            assertEquals(Map.of(), ongoing(admin), "nothing listed after the refusals");
            assertEquals(original, ids(partition0(admin, topic).replicas()), "nothing moved");
        }
    }

    /** The node id an agent was started with (ClusterTest numbers them 1..3 in order). */
    static int agentId(StrataAgent a) {
        return agents.indexOf(a) + 1;
    }

    static StrataAgent agentFor(int id) {
        return agents.get(id - 1);
    }
}
