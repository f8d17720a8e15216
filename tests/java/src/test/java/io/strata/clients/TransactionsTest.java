package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.InvalidTxnStateException;
import org.apache.kafka.common.errors.InvalidTxnTimeoutException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TransactionAbortableException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Kafka transactions (exactly-once) with the Java 4.1 clients against strata: the
 * transactional producer (InitProducerId with a transactional.id, Produce v12 under
 * transactions v2 = KIP-890, where the partition leader adds the partition to the
 * transaction itself through AddPartitionsToTxn, EndTxn v5 bumping the epoch after
 * every transaction, WriteTxnMarkers), {@code sendOffsetsToTransaction}
 * (TxnOffsetCommit), read_committed Fetch (stopping at the last stable offset, with the
 * aborted transactions), OffsetFetch with requireStable (UNSTABLE_OFFSET_COMMIT),
 * Admin listTransactions / describeTransactions / describeProducers, Kafka's
 * kafka-transactions.sh, the transaction timeout, a restart, and three agents (markers
 * written to other agents' partitions).
 *
 * <p>One agent for the class, with {@code --transaction-max-timeout-ms 120000} and a
 * 500 ms timed-out-transaction check; the cluster test starts its own three. The
 * expectations (offsets and markers, states, epochs, the exceptions the client throws,
 * the tool's tables) were checked by running these tests against Apache Kafka 4.1.1
 * ({@link KafkaBroker}, with transaction.max.timeout.ms=120000 and a 500 ms
 * transaction.abort.timed.out.transaction.cleanup.interval.ms), apart from the restart
 * and the HTTP endpoint; the three-agent test against one Kafka broker.
 */
class TransactionsTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    /** The three-agent cluster of {@link #threeAgentsMarkersReachEveryLeaderAndOffsetsCommitAcrossAgents}. */
    @RegisterExtension
    static final StrataExtension cluster = StrataExtension.manual();

    static final Duration WAIT = Duration.ofSeconds(30);
    static final int MAX_TIMEOUT_MS = 120_000;
    static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

    @BeforeAll
    static void startAgent() {
        strata.add(StrataAgent.create("strata-java-txn-", List.of(
                "--group-initial-rebalance-delay-ms", StrataExtension.GROUP_DELAY_MS,
                "--transaction-max-timeout-ms", String.valueOf(MAX_TIMEOUT_MS),
                "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "500"), Map.of())).start();
    }

    // ----- helpers -----

    /** A record as read back. */
    record Rec(int partition, long offset, String key, String value) {
        static Rec of(ConsumerRecord<byte[], byte[]> r) {
            return new Rec(r.partition(), r.offset(), r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8),
                    r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8));
        }
    }

    static Properties txProps(String bootstrap, String transactionalId) {
        Properties p = Clients.producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        // Failures must surface well within a test's minute.
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "25000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        return p;
    }

    static KafkaProducer<String, String> producer(Properties p) {
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaProducer<String, String> txProducer(String bootstrap, String transactionalId) {
        return producer(txProps(bootstrap, transactionalId));
    }

    /** Sends {@code values} to one partition and waits for every ack. */
    static List<RecordMetadata> sendAcked(KafkaProducer<String, String> p, String topic, int partition,
                                          List<String> values) throws Exception {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        for (String v : values) {
            fs.add(p.send(new ProducerRecord<>(topic, partition, "k-" + v, v)));
        }
        p.flush();
        List<RecordMetadata> out = new ArrayList<>();
        for (Future<RecordMetadata> f : fs) {
            out.add(f.get(30, TimeUnit.SECONDS));
        }
        return out;
    }

    static List<String> values(String prefix, int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(prefix + "-" + i);
        }
        return out;
    }

    /** Everything in the partitions up to the end offset for that isolation level (the LSO
     *  for read_committed), in partition then offset order. */
    static List<Rec> read(String bootstrap, List<TopicPartition> tps, String isolation) {
        Properties extra = new Properties();
        extra.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        return Clients.readAll(bootstrap, tps, extra).stream().map(Rec::of).toList();
    }

    static List<String> valuesOf(List<Rec> recs) {
        return recs.stream().map(Rec::value).toList();
    }

    static Map<TopicPartition, Long> endOffsets(Admin admin, Collection<TopicPartition> tps, IsolationLevel level)
            throws ExecutionException {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicPartition tp : tps) {
            req.put(tp, OffsetSpec.latest());
        }
        return Clients.get(admin.listOffsets(req, new ListOffsetsOptions(level)).all()).entrySet().stream()
                .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset(), (a, b) -> a, () -> new TreeMap<>(TP_ORDER)));
    }

    /** Waits until no transaction is open on the partitions: the last stable offset
     *  (ListOffsets latest with read_committed) equals the high watermark. Returns the
     *  high watermarks. */
    static Map<TopicPartition, Long> awaitNoOpenTransaction(Admin admin, Collection<TopicPartition> tps) {
        return Wait.until(WAIT, Duration.ofMillis(100), "LSO == high watermark (no open transaction) on " + tps,
                () -> {
                    try {
                        Map<TopicPartition, Long> hw = endOffsets(admin, tps, IsolationLevel.READ_UNCOMMITTED);
                        Map<TopicPartition, Long> lso = endOffsets(admin, tps, IsolationLevel.READ_COMMITTED);
                        return hw.equals(lso) ? Wait.Check.done(hw)
                                : Wait.Check.notYet("high watermarks " + hw + ", last stable offsets " + lso);
                    } catch (ExecutionException e) {
                        return Wait.Check.notYet(e.getCause().toString());
                    }
                });
    }

    static TransactionDescription describeTxn(Admin admin, String id) throws ExecutionException {
        return Clients.get(admin.describeTransactions(List.of(id)).description(id));
    }

    static TransactionDescription awaitTxnState(Admin admin, String id, TransactionState state) {
        return Wait.until(WAIT, "transaction " + id + " to be " + state, () -> {
            try {
                TransactionDescription d = describeTxn(admin, id);
                return d.state() == state ? Wait.Check.done(d) : Wait.Check.notYet(d.toString());
            } catch (ExecutionException e) {
                return Wait.Check.notYet(e.getCause().toString());
            }
        });
    }

    static List<ProducerState> producers(Admin admin, TopicPartition tp) throws ExecutionException {
        return Clients.get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers();
    }

    static Optional<ProducerState> producer(Admin admin, TopicPartition tp, long producerId) throws ExecutionException {
        return producers(admin, tp).stream().filter(s -> s.producerId() == producerId).findFirst();
    }

    /** A group's committed offsets for the given partitions (null: none committed); with
     *  requireStable, a partition with offsets pending in a transaction is missing (the
     *  Admin client skips partitions answered with UNSTABLE_OFFSET_COMMIT). */
    static Map<TopicPartition, Long> groupOffsets(Admin admin, String group, List<TopicPartition> tps,
                                                  boolean requireStable) throws ExecutionException {
        Map<TopicPartition, OffsetAndMetadata> m = Clients.get(admin.listConsumerGroupOffsets(
                        Map.of(group, new ListConsumerGroupOffsetsSpec().topicPartitions(tps)),
                        new ListConsumerGroupOffsetsOptions().requireStable(requireStable))
                .partitionsToOffsetAndMetadata(group));
        Map<TopicPartition, Long> out = new TreeMap<>(TP_ORDER);
        m.forEach((tp, om) -> out.put(tp, om == null ? null : om.offset()));
        return out;
    }

    /** TopicPartition is not Comparable. */
    static final java.util.Comparator<TopicPartition> TP_ORDER =
            java.util.Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition);

    static Map<TopicPartition, Long> offsetsMap(Map<TopicPartition, Long> m) {
        Map<TopicPartition, Long> out = new TreeMap<>(TP_ORDER);
        out.putAll(m);
        return out;
    }

    static List<Throwable> causes(Throwable e) {
        List<Throwable> out = new ArrayList<>();
        for (Throwable c = e; c != null && !out.contains(c); c = c.getCause()) {
            out.add(c);
        }
        return out;
    }

    static String chain(Throwable e) {
        return causes(e).stream().map(Throwable::toString).collect(Collectors.joining(" <- caused by "));
    }

    static boolean chainHas(Throwable e, Class<?>... types) {
        for (Throwable c : causes(e)) {
            for (Class<?> t : types) {
                if (t.isInstance(c)) {
                    return true;
                }
            }
        }
        return false;
    }

    /** Polls a consumer until it has {@code n} records (fails at the deadline or beyond n). */
    static List<ConsumerRecord<String, String>> pollExactly(KafkaConsumer<String, String> c, int n) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        Wait.untilTrue(WAIT, n + " records polled", () -> {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                got.add(r);
            }
            return got.size() >= n;
        }, () -> got.size() + " records so far");
        assertEquals(n, got.size(), "records polled: " + got.stream().map(ConsumerRecord::value).toList());
        return got;
    }

    static KafkaConsumer<String, String> stringConsumer(Properties p) {
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static void producePlain(String bootstrap, String topic, int partition, List<String> vs) throws Exception {
        try (KafkaProducer<String, String> p = producer(Clients.producerProps(bootstrap))) {
            sendAcked(p, topic, partition, vs);
        }
    }

    // ----- tests -----

    /**
     * Three transactions from one transactional producer on two partitions: commit,
     * abort, commit. read_committed sees the committed records only, each once, in order;
     * read_uncommitted sees every data record; each transaction leaves one control record
     * (its marker) per partition, as in Kafka: committed at 0-4, marker 5, aborted 6-10,
     * marker 11, committed 12-16, marker 17, high watermark 18. The producer's epoch goes
     * up with every transaction (transactions v2: EndTxn returns the bumped epoch, which
     * the next transaction's Produce v12 uses).
     */
    @Test
    void commitAndAbortAreSeenOnlyAsCommittedByReadCommittedAndAllByReadUncommitted() throws Exception {
        String bs = strata.bootstrap();
        String topic = Clients.uniqueTopic("java-txn-basic");
        String txnId = Clients.uniqueTopic("java-txn-basic-id");
        List<TopicPartition> tps = Clients.partitions(topic, 2);
        try (Admin admin = Clients.admin(bs);
             KafkaProducer<String, String> p = txProducer(bs, txnId)) {
            Clients.createTopic(admin, topic, 2, 1, Map.of());
            p.initTransactions();
            List<Integer> epochs = new ArrayList<>();
            String[] txns = {"t1-commit", "t2-abort", "t3-commit"};
            for (String t : txns) {
                p.beginTransaction();
                for (int part = 0; part < 2; part++) {
                    List<RecordMetadata> acks = sendAcked(p, topic, part, values(t + "-p" + part, 5));
                    assertTrue(acks.stream().allMatch(m -> m.partition() != -1), "acked: " + acks);
                }
                epochs.add(describeTxn(admin, txnId).producerEpoch());
                if (t.endsWith("abort")) {
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                }
            }
            Map<TopicPartition, Long> hw = awaitNoOpenTransaction(admin, tps);
            System.out.println("[txn] high watermarks after commit/abort/commit: " + hw + "; epochs " + epochs);
            for (TopicPartition tp : tps) {
                assertEquals(18L, hw.get(tp), "high watermark of " + tp
                        + ": 15 data records and one marker per transaction");
            }
            assertTrue(epochs.get(0) < epochs.get(1) && epochs.get(1) < epochs.get(2),
                    "transactions v2 bumps the producer epoch at the end of every transaction; epochs seen "
                            + "during the three transactions: " + epochs);

            List<String> committed = new ArrayList<>();
            List<String> all = new ArrayList<>();
            for (int part = 0; part < 2; part++) {
                committed.addAll(values("t1-commit-p" + part, 5));
                committed.addAll(values("t3-commit-p" + part, 5));
                all.addAll(values("t1-commit-p" + part, 5));
                all.addAll(values("t2-abort-p" + part, 5));
                all.addAll(values("t3-commit-p" + part, 5));
            }
            List<Rec> rc = read(bs, tps, "read_committed");
            assertEquals(committed, valuesOf(rc), "read_committed: the committed records, each once, in order");
            List<Long> want = new ArrayList<>();
            for (long o = 0; o < 5; o++) {
                want.add(o);
            }
            for (long o = 12; o < 17; o++) {
                want.add(o);
            }
            for (int part = 0; part < 2; part++) {
                final int pp = part;
                assertEquals(want, rc.stream().filter(r -> r.partition() == pp).map(Rec::offset).toList(),
                        "offsets of the committed records in partition " + part);
            }
            List<Rec> ru = read(bs, tps, "read_uncommitted");
            assertEquals(all, valuesOf(ru), "read_uncommitted: every data record (aborted too), each once");
        }
    }

    /**
     * An open transaction holds the last stable offset at its first offset, even when
     * another transactional producer commits and a plain producer writes after it; a
     * live read_committed consumer gets nothing past it. Once it aborts, the consumer
     * gets exactly the committed and plain records, in offset order, without the aborted
     * ones on both sides of them (the aborted transactions list of read_committed Fetch).
     */
    @Test
    void anOpenTransactionHoldsBackTheLastStableOffsetAndIsFilteredOnceAborted() throws Exception {
        String bs = strata.bootstrap();
        String topic = Clients.uniqueTopic("java-txn-lso");
        TopicPartition tp = new TopicPartition(topic, 0);
        String idA = Clients.uniqueTopic("java-txn-lso-a");
        String idB = Clients.uniqueTopic("java-txn-lso-b");
        Properties rcProps = Clients.consumerProps(bs, null);
        rcProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (Admin admin = Clients.admin(bs);
             KafkaProducer<String, String> a = txProducer(bs, idA);
             KafkaProducer<String, String> b = txProducer(bs, idB);
             KafkaConsumer<String, String> live = stringConsumer(rcProps)) {
            Clients.createTopic(admin, topic, 1, 1, Map.of());
            live.assign(List.of(tp));
            live.seekToBeginning(List.of(tp));

            a.initTransactions();
            a.beginTransaction();
            assertEquals(0L, sendAcked(a, topic, 0, values("a-open", 3)).get(0).offset(), "A's first offset");

            b.initTransactions();
            b.beginTransaction();
            sendAcked(b, topic, 0, values("b-committed", 3));
            b.commitTransaction();
            awaitTxnState(admin, idB, TransactionState.COMPLETE_COMMIT);
            producePlain(bs, topic, 0, values("c-plain", 3));

            long a0 = describeTxn(admin, idA).producerId();
            ProducerState aState = producer(admin, tp, a0).orElseThrow(() -> new AssertionError(
                    "describeProducers(" + tp + ") lists A (" + a0 + ")"));
            assertEquals(OptionalLong.of(0), aState.currentTransactionStartOffset(),
                    "A's open transaction starts at offset 0: " + aState);
            Map<TopicPartition, Long> hw = endOffsets(admin, List.of(tp), IsolationLevel.READ_UNCOMMITTED);
            Map<TopicPartition, Long> lso = endOffsets(admin, List.of(tp), IsolationLevel.READ_COMMITTED);
            assertEquals(10L, hw.get(tp), "high watermark: A's 3, B's 3, B's commit marker, 3 plain " + hw);
            assertEquals(0L, lso.get(tp), "the last stable offset stays at A's first offset while A is open");
            // A bounded look: the live read_committed consumer gets nothing while A is open.
            List<String> early = new ArrayList<>();
            long until = System.nanoTime() + Duration.ofSeconds(1).toNanos();
            while (System.nanoTime() < until) {
                live.poll(Duration.ofMillis(100)).forEach(r -> early.add(r.value()));
            }
            assertEquals(List.of(), early, "read_committed records before the LSO moved");
            assertEquals(0L, live.position(tp), "the read_committed consumer's position while A is open");

            sendAcked(a, topic, 0, values("a-late", 3));
            a.abortTransaction();
            awaitNoOpenTransaction(admin, List.of(tp));

            List<String> want = new ArrayList<>(values("b-committed", 3));
            want.addAll(values("c-plain", 3));
            List<String> got = new ArrayList<>();
            Wait.untilTrue(WAIT, "the live read_committed consumer to get B's and the plain records", () -> {
                live.poll(Duration.ofMillis(200)).forEach(r -> got.add(r.value()));
                return got.size() >= want.size();
            }, () -> "got " + got);
            long end = endOffsets(admin, List.of(tp), IsolationLevel.READ_UNCOMMITTED).get(tp);
            Wait.untilTrue(WAIT, "the live consumer's position to reach the end " + end
                    + " (past A's late records and its abort marker)", () -> {
                        live.poll(Duration.ofMillis(100)).forEach(r -> got.add(r.value()));
                        return live.position(tp) >= end;
                    }, () -> "position " + live.position(tp) + ", got " + got);
            assertEquals(want, got, "what the live read_committed consumer got");
            assertEquals(want, valuesOf(read(bs, List.of(tp), "read_committed")), "a fresh read_committed read");
            List<String> all = new ArrayList<>(values("a-open", 3));
            all.addAll(values("b-committed", 3));
            all.addAll(values("c-plain", 3));
            all.addAll(values("a-late", 3));
            assertEquals(all, valuesOf(read(bs, List.of(tp), "read_uncommitted")), "read_uncommitted, offset order");
            Wait.untilTrue(WAIT, "describeProducers to show no open transaction for A",
                    () -> {
                        try {
                            return producer(admin, tp, a0).map(s -> s.currentTransactionStartOffset().isEmpty())
                                    .orElse(true);
                        } catch (ExecutionException e) {
                            return false;
                        }
                    }, () -> {
                        try {
                            return producers(admin, tp).toString();
                        } catch (ExecutionException e) {
                            return e.toString();
                        }
                    });
        }
    }

    /**
     * A second producer with the same transactional.id fences the first: its open
     * transaction is aborted (its acked records never become visible to read_committed),
     * and the first producer's next send (to a partition not yet in its transaction, so
     * only the leader's KIP-890 check with the coordinator can refuse it) or its commit
     * fails with ProducerFencedException or InvalidProducerEpochException. The second
     * producer's transaction commits.
     */
    @Test
    void aSecondProducerWithTheSameTransactionalIdFencesTheFirst() throws Exception {
        String bs = strata.bootstrap();
        String topic = Clients.uniqueTopic("java-txn-fence");
        String txnId = Clients.uniqueTopic("java-txn-fence-id");
        List<TopicPartition> tps = Clients.partitions(topic, 2);
        try (Admin admin = Clients.admin(bs)) {
            Clients.createTopic(admin, topic, 2, 1, Map.of());
            KafkaProducer<String, String> p1 = txProducer(bs, txnId);
            try (KafkaProducer<String, String> p2 = txProducer(bs, txnId)) {
                p1.initTransactions();
                p1.beginTransaction();
                sendAcked(p1, topic, 0, values("p1-open", 5));
                TransactionDescription before = describeTxn(admin, txnId);
                assertEquals(TransactionState.ONGOING, before.state(), "p1's transaction: " + before);

                p2.initTransactions(); // fences p1 and aborts its open transaction
                TransactionDescription after = describeTxn(admin, txnId);
                System.out.println("[txn] fencing: before " + before + "; after p2's initTransactions " + after);
                assertEquals(before.producerId(), after.producerId(), "same producer id for the same transactional.id");
                assertTrue(after.producerEpoch() > before.producerEpoch(), "p2's epoch is above p1's: " + after);

                Throwable fenced = null;
                String where = null;
                try {
                    p1.send(new ProducerRecord<>(topic, 1, "k", "p1-after-fence")).get(30, TimeUnit.SECONDS);
                } catch (Exception e) {
                    fenced = e;
                    where = "send";
                }
                if (fenced == null || !chainHas(fenced, ProducerFencedException.class)) {
                    try {
                        p1.commitTransaction();
                        if (fenced == null) {
                            fail("the fenced producer's send and commit both succeeded");
                        }
                    } catch (Exception e) {
                        if (fenced == null) {
                            fenced = e;
                            where = "commitTransaction";
                        } else {
                            System.out.println("[txn] fenced p1's commit after the failed send: " + chain(e));
                        }
                    }
                }
                System.out.println("[txn] fenced p1 (" + where + "): " + chain(fenced));
                assertTrue(chainHas(fenced, ProducerFencedException.class, InvalidProducerEpochException.class),
                        "ProducerFencedException or InvalidProducerEpochException from p1's " + where + ": "
                                + chain(fenced));

                p2.beginTransaction();
                sendAcked(p2, topic, 0, values("p2-p0", 3));
                sendAcked(p2, topic, 1, values("p2-p1", 3));
                p2.commitTransaction();
            } finally {
                p1.close(Duration.ZERO);
            }
            awaitNoOpenTransaction(admin, tps);
            List<String> want = new ArrayList<>(values("p2-p0", 3));
            want.addAll(values("p2-p1", 3));
            assertEquals(want, valuesOf(read(bs, tps, "read_committed")),
                    "read_committed: only p2's records (p1's were aborted when it was fenced)");
            List<String> uncommitted = valuesOf(read(bs, tps, "read_uncommitted"));
            assertTrue(uncommitted.containsAll(values("p1-open", 5)), "p1's acked records are in the log: "
                    + uncommitted);
            assertFalse(uncommitted.contains("p1-after-fence"), "the fenced send was not written: " + uncommitted);
            assertEquals(TransactionState.COMPLETE_COMMIT, awaitTxnState(admin, txnId,
                    TransactionState.COMPLETE_COMMIT).state());
        }
    }

    /**
     * Consume-transform-produce: offsets sent with {@code sendOffsetsToTransaction(offsets,
     * consumer.groupMetadata())} (a real group member, generation checked) are pending
     * until the commit: listConsumerGroupOffsets shows the previous offsets, with
     * requireStable the partitions are answered UNSTABLE_OFFSET_COMMIT, and a
     * read_committed consumer's committed() keeps retrying; after the commit they are
     * the group's offsets. An aborted transaction's offsets never become the group's; a
     * new member resumes at the last committed ones and gets the aborted batch's input
     * again. The output topic shows only the committed transaction's records.
     */
    @Test
    void sendOffsetsToTransactionCommitsOffsetsOnlyWithTheTransaction() throws Exception {
        String bs = strata.bootstrap();
        String in = Clients.uniqueTopic("java-txn-in");
        String out = Clients.uniqueTopic("java-txn-out");
        String group = Clients.uniqueTopic("java-txn-group");
        String txnId = Clients.uniqueTopic("java-txn-ctp");
        List<TopicPartition> inTps = Clients.partitions(in, 2);
        List<TopicPartition> outTps = Clients.partitions(out, 2);
        try (Admin admin = Clients.admin(bs)) {
            Clients.createTopic(admin, in, 2, 1, Map.of());
            Clients.createTopic(admin, out, 2, 1, Map.of());
            for (int part = 0; part < 2; part++) {
                producePlain(bs, in, part, values("in1-p" + part, 10));
            }
            Properties cp = Clients.consumerProps(bs, group);
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            Properties stableProps = Clients.consumerProps(bs, group);
            stableProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            Map<TopicPartition, Long> first = offsetsMap(Map.of(inTps.get(0), 10L, inTps.get(1), 10L));
            Map<TopicPartition, Long> none = new TreeMap<>(TP_ORDER);
            none.put(inTps.get(0), null);
            none.put(inTps.get(1), null);
            List<String> wantOut = new ArrayList<>();
            try (KafkaConsumer<String, String> c = stringConsumer(cp);
                 KafkaConsumer<String, String> stable = stringConsumer(stableProps); // never subscribes
                 KafkaProducer<String, String> p = txProducer(bs, txnId)) {
                c.subscribe(List.of(in));
                p.initTransactions();

                // Transaction 1: 20 records in, 20 out, offsets 10/10; committed.
                List<ConsumerRecord<String, String>> batch1 = pollExactly(c, 20);
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : batch1) {
                    p.send(new ProducerRecord<>(out, r.partition(), r.key(), "out-" + r.value()));
                    wantOut.add("out-" + r.value());
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                assertEquals(first, offsetsMap(offsets.entrySet().stream()
                        .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()))));
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                assertEquals(none, groupOffsets(admin, group, inTps, false),
                        "pending transactional offsets are not the group's offsets before the commit");
                assertEquals(Map.of(), groupOffsets(admin, group, inTps, true),
                        "with requireStable the pending partitions are answered UNSTABLE_OFFSET_COMMIT");
                Throwable unstable = assertThrows(TimeoutException.class,
                        () -> stable.committed(new HashSet<>(inTps), Duration.ofSeconds(3)),
                        "a read_committed consumer's committed() (requireStable) while offsets are pending");
                System.out.println("[txn] committed() with pending offsets: " + unstable);
                p.commitTransaction();
                Wait.until(WAIT, "the group's offsets to be " + first + " after the commit", () -> {
                    try {
                        Map<TopicPartition, Long> got = groupOffsets(admin, group, inTps, true);
                        return got.equals(first) ? Wait.Check.done(got) : Wait.Check.notYet(got.toString());
                    } catch (ExecutionException e) {
                        return Wait.Check.notYet(e.getCause().toString());
                    }
                });
                assertEquals(first, groupOffsets(admin, group, inTps, false), "committed offsets (not requireStable)");
                Map<TopicPartition, OffsetAndMetadata> viaConsumer = stable.committed(new HashSet<>(inTps),
                        Duration.ofSeconds(10));
                assertEquals(first, offsetsMap(viaConsumer.entrySet().stream()
                                .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()))),
                        "committed() of a read_committed consumer after the commit");

                // Transaction 2: 10 more in, 10 out, offsets 15/15; aborted.
                for (int part = 0; part < 2; part++) {
                    producePlain(bs, in, part, values("in2-p" + part, 5));
                }
                List<ConsumerRecord<String, String>> batch2 = pollExactly(c, 10);
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets2 = new HashMap<>();
                for (ConsumerRecord<String, String> r : batch2) {
                    p.send(new ProducerRecord<>(out, r.partition(), r.key(), "out-" + r.value()));
                    offsets2.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                p.sendOffsetsToTransaction(offsets2, c.groupMetadata());
                assertEquals(first, groupOffsets(admin, group, inTps, false),
                        "the group's offsets while the second transaction's are pending");
                assertEquals(Map.of(), groupOffsets(admin, group, inTps, true),
                        "requireStable while the second transaction's offsets are pending");
                p.abortTransaction();
                Wait.until(WAIT, "requireStable offsets to be answered again after the abort", () -> {
                    try {
                        Map<TopicPartition, Long> got = groupOffsets(admin, group, inTps, true);
                        return got.size() == 2 ? Wait.Check.done(got) : Wait.Check.notYet(got.toString());
                    } catch (ExecutionException e) {
                        return Wait.Check.notYet(e.getCause().toString());
                    }
                });
                assertEquals(first, groupOffsets(admin, group, inTps, true), "offsets after the abort (requireStable)");
                assertEquals(first, groupOffsets(admin, group, inTps, false), "offsets after the abort");
            }

            awaitNoOpenTransaction(admin, outTps);
            List<String> gotOut = new ArrayList<>(valuesOf(read(bs, outTps, "read_committed")));
            assertEquals(wantOut.stream().sorted().toList(), gotOut.stream().sorted().toList(),
                    "read_committed output: the first transaction's 20 records, each once");

            // A new member of the group starts at the committed offsets (10/10): the input
            // of the aborted transaction again.
            try (KafkaConsumer<String, String> c2 = stringConsumer(cp)) {
                c2.subscribe(List.of(in));
                List<String> again = pollExactly(c2, 10).stream().map(ConsumerRecord::value).sorted().toList();
                List<String> want = new ArrayList<>(values("in2-p0", 5));
                want.addAll(values("in2-p1", 5));
                assertEquals(want.stream().sorted().toList(), again,
                        "a new member resumes at the last committed offsets");
            }
        }
    }

    /**
     * Admin listTransactions / describeTransactions / describeProducers (and strata's
     * GET /v1/transactions) during and after two transactions of one producer; ApiVersions
     * finalizes transaction.version=2 (which is what makes the Java client use
     * transactions v2).
     */
    @Test
    void adminListsAndDescribesTransactionsAndProducers() throws Exception {
        String bs = strata.bootstrap();
        String topic = Clients.uniqueTopic("java-txn-admin");
        String txnId = Clients.uniqueTopic("java-txn-admin-id");
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        try (Admin admin = Clients.admin(bs)) {
            FeatureMetadata features = Clients.get(admin.describeFeatures().featureMetadata());
            FinalizedVersionRange tv = features.finalizedFeatures().get("transaction.version");
            System.out.println("[txn] features: " + features);
            assertNotNull(tv, "ApiVersions finalizes transaction.version: " + features);
            assertEquals(2, tv.maxVersionLevel(), "finalized transaction.version: " + features);

            Clients.createTopic(admin, topic, 2, 1, Map.of());
            Properties props = txProps(bs, txnId);
            props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "45000");
            try (KafkaProducer<String, String> p = producer(props)) {
                p.initTransactions();
                TransactionDescription empty = describeTxn(admin, txnId);
                assertEquals(TransactionState.EMPTY, empty.state(), "after initTransactions: " + empty);

                p.beginTransaction();
                sendAcked(p, topic, 0, values("x", 3));
                sendAcked(p, topic, 1, values("y", 2));
                TransactionDescription d = describeTxn(admin, txnId);
                System.out.println("[txn] open: " + d);
                assertEquals(TransactionState.ONGOING, d.state(), "state while open: " + d);
                assertEquals(Set.of(tp0, tp1), d.topicPartitions(), "partitions of the open transaction");
                assertEquals(45000L, d.transactionTimeoutMs(), "transaction.timeout.ms");
                assertTrue(d.transactionStartTimeMs().isPresent(), "start time while open: " + d);
                long now = System.currentTimeMillis();
                assertTrue(Math.abs(now - d.transactionStartTimeMs().getAsLong()) < 60_000,
                        "start time " + d.transactionStartTimeMs() + " near now " + now);
                Set<Integer> nodes = Clients.get(admin.describeCluster().nodes()).stream()
                        .map(org.apache.kafka.common.Node::id).collect(Collectors.toSet());
                assertTrue(nodes.contains(d.coordinatorId()), "coordinator " + d.coordinatorId() + " in " + nodes);
                long pid = d.producerId();
                int epoch = d.producerEpoch();
                assertEquals(empty.producerId(), pid, "producer id");

                TransactionListing mine = new TransactionListing(txnId, pid, TransactionState.ONGOING);
                Collection<TransactionListing> all = Clients.get(admin.listTransactions().all());
                assertTrue(all.contains(mine), "listTransactions() has " + mine + ": " + all);
                Collection<TransactionListing> ongoing = Clients.get(admin.listTransactions(
                        new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING))).all());
                assertTrue(ongoing.contains(mine), "listTransactions(ONGOING) has it: " + ongoing);
                assertTrue(ongoing.stream().allMatch(l -> l.state() == TransactionState.ONGOING),
                        "the state filter: " + ongoing);
                Collection<TransactionListing> byPid = Clients.get(admin.listTransactions(
                        new ListTransactionsOptions().filterProducerIds(List.of(pid))).all());
                assertEquals(List.of(mine), List.copyOf(byPid), "listTransactions(producer id " + pid + ")");
                Collection<TransactionListing> committedOnes = Clients.get(admin.listTransactions(
                        new ListTransactionsOptions().filterStates(List.of(TransactionState.COMPLETE_COMMIT))).all());
                assertFalse(committedOnes.stream().anyMatch(l -> l.transactionalId().equals(txnId)),
                        "listTransactions(COMPLETE_COMMIT) while open: " + committedOnes);

                for (TopicPartition tp : List.of(tp0, tp1)) {
                    List<ProducerState> ps = producers(admin, tp);
                    ProducerState s = ps.stream().filter(x -> x.producerId() == pid).findFirst()
                            .orElseThrow(() -> new AssertionError("describeProducers(" + tp + ") lists " + pid
                                    + ": " + ps));
                    assertEquals(OptionalLong.of(0), s.currentTransactionStartOffset(), tp + ": " + s);
                    assertEquals(epoch, s.producerEpoch(), tp + " producer epoch: " + s);
                    assertEquals(tp.equals(tp0) ? 2 : 1, s.lastSequence(), tp + " last sequence: " + s);
                    assertTrue(s.lastTimestamp() > 0, tp + " last timestamp: " + s);
                }

                HttpResponse<String> http = HTTP.send(HttpRequest.newBuilder(
                                URI.create(strata.agent().httpUrl() + "/v1/transactions"))
                        .timeout(Duration.ofSeconds(5)).GET().build(), HttpResponse.BodyHandlers.ofString());
                System.out.println("[txn] GET /v1/transactions: " + http.statusCode() + " "
                        + (http.body().length() > 2000 ? http.body().substring(0, 2000) + "..." : http.body()));
                assertEquals(200, http.statusCode(), "GET /v1/transactions: " + http.body());
                assertTrue(http.body().contains(txnId), "GET /v1/transactions lists " + txnId + ": " + http.body());

                p.commitTransaction();
                TransactionDescription done = awaitTxnState(admin, txnId, TransactionState.COMPLETE_COMMIT);
                System.out.println("[txn] committed: " + done);
                assertEquals(Set.of(), done.topicPartitions(), "no partitions after the commit");
                assertEquals(pid, done.producerId());
                assertTrue(done.producerEpoch() > epoch, "transactions v2: the epoch is bumped at the commit: " + done);
                for (TopicPartition tp : List.of(tp0, tp1)) {
                    Wait.untilTrue(WAIT, "describeProducers(" + tp + ") to show no open transaction", () -> {
                        try {
                            return producer(admin, tp, pid).map(s -> s.currentTransactionStartOffset().isEmpty())
                                    .orElse(false);
                        } catch (ExecutionException e) {
                            return false;
                        }
                    }, () -> {
                        try {
                            return producers(admin, tp).toString();
                        } catch (ExecutionException e) {
                            return e.toString();
                        }
                    });
                }
                assertFalse(Clients.get(admin.listTransactions(new ListTransactionsOptions()
                                .filterStates(List.of(TransactionState.ONGOING))).all()).stream()
                                .anyMatch(l -> l.transactionalId().equals(txnId)),
                        "listTransactions(ONGOING) after the commit");

                // The second transaction runs at the bumped epoch; it starts at offset 4
                // of partition 0 (3 records and the commit marker before it).
                p.beginTransaction();
                sendAcked(p, topic, 0, values("z", 2));
                TransactionDescription d2 = describeTxn(admin, txnId);
                assertEquals(TransactionState.ONGOING, d2.state(), "second transaction: " + d2);
                assertEquals(Set.of(tp0), d2.topicPartitions(), "second transaction's partitions");
                assertEquals(done.producerEpoch(), d2.producerEpoch(), "the second transaction's epoch");
                ProducerState s2 = producer(admin, tp0, pid).orElseThrow();
                assertEquals(OptionalLong.of(4), s2.currentTransactionStartOffset(), "second transaction: " + s2);
                p.abortTransaction();
                TransactionDescription aborted = awaitTxnState(admin, txnId, TransactionState.COMPLETE_ABORT);
                assertTrue(aborted.producerEpoch() > d2.producerEpoch(), "epoch bumped at the abort: " + aborted);
                assertEquals(Set.of(), aborted.topicPartitions(), "no partitions after the abort");
            }
        }
    }

    /** Rows of a kafka-transactions.sh table: header name -> value, per row. */
    static List<Map<String, String>> table(String stdout) {
        List<Map<String, String>> rows = new ArrayList<>();
        String[] header = null;
        for (String line : stdout.split("\\R")) {
            String t = line.trim();
            if (t.isEmpty()) {
                continue;
            }
            String[] cells = t.split("\\s+");
            if (header == null) {
                header = cells;
                continue;
            }
            Map<String, String> row = new LinkedHashMap<>();
            for (int i = 0; i < header.length; i++) {
                row.put(header[i], i < cells.length ? cells[i] : "");
            }
            rows.add(row);
        }
        return rows;
    }

    /**
     * Kafka's kafka-transactions.sh (org.apache.kafka.tools.TransactionsCommand) as a
     * child JVM: {@code list}, {@code describe --transactional-id} and
     * {@code describe-producers} show an open transaction.
     */
    @Test
    void kafkaTransactionsToolListsAndDescribesAnOpenTransaction() throws Exception {
        String bs = strata.bootstrap();
        String topic = Clients.uniqueTopic("java-txn-tool");
        String txnId = Clients.uniqueTopic("java-txn-tool-id");
        Duration toolTimeout = Duration.ofSeconds(40);
        try (Admin admin = Clients.admin(bs)) {
            Clients.createTopic(admin, topic, 2, 1, Map.of());
            try (KafkaProducer<String, String> p = txProducer(bs, txnId)) {
                p.initTransactions();
                p.beginTransaction();
                sendAcked(p, topic, 0, values("tool-p0", 2));
                sendAcked(p, topic, 1, values("tool-p1", 2));
                long pid = describeTxn(admin, txnId).producerId();

                KafkaTool.Result list = KafkaTool.ok(toolTimeout, null, KafkaTool.TRANSACTIONS,
                        "--bootstrap-server", bs, "list");
                System.out.println("[txn] kafka-transactions list:\n" + list.stdout());
                Map<String, String> listed = table(list.stdout()).stream()
                        .filter(r -> txnId.equals(r.get("TransactionalId"))).findFirst()
                        .orElseThrow(() -> new AssertionError("list shows " + txnId + "\n" + list.describe()));
                assertEquals(String.valueOf(pid), listed.get("ProducerId"), list.describe());
                assertEquals("ongoing", listed.get("TransactionState").toLowerCase(), list.describe());

                KafkaTool.Result desc = KafkaTool.ok(toolTimeout, null, KafkaTool.TRANSACTIONS,
                        "--bootstrap-server", bs, "describe", "--transactional-id", txnId);
                System.out.println("[txn] kafka-transactions describe:\n" + desc.stdout());
                List<Map<String, String>> rows = table(desc.stdout());
                assertEquals(1, rows.size(), desc.describe());
                Map<String, String> row = rows.get(0);
                assertEquals(txnId, row.get("TransactionalId"), desc.describe());
                assertEquals(String.valueOf(pid), row.get("ProducerId"), desc.describe());
                assertEquals("ongoing", row.get("TransactionState").toLowerCase(), desc.describe());
                assertEquals(Set.of(topic + "-0", topic + "-1"), Set.of(row.get("TopicPartitions").split(",")),
                        desc.describe());

                KafkaTool.Result prods = KafkaTool.ok(toolTimeout, null, KafkaTool.TRANSACTIONS,
                        "--bootstrap-server", bs, "describe-producers", "--topic", topic, "--partition", "1");
                System.out.println("[txn] kafka-transactions describe-producers:\n" + prods.stdout());
                Map<String, String> prow = table(prods.stdout()).stream()
                        .filter(r -> String.valueOf(pid).equals(r.get("ProducerId"))).findFirst()
                        .orElseThrow(() -> new AssertionError("describe-producers shows " + pid + "\n"
                                + prods.describe()));
                assertEquals("0", prow.get("CurrentTransactionStartOffset"), prods.describe());
                assertEquals("1", prow.get("LastSequence"), prods.describe());
                p.abortTransaction();
            }
            awaitTxnState(admin, txnId, TransactionState.COMPLETE_ABORT);
        }
    }

    /**
     * A transaction left open past its transaction.timeout.ms (3 s) is aborted by the
     * broker (the 500 ms timed-out-transaction check): the last stable offset moves past
     * it without the producer doing anything, its records stay hidden from read_committed,
     * and the producer's late commit fails. A transaction.timeout.ms above
     * --transaction-max-timeout-ms is refused at initTransactions.
     */
    @Test
    void aTimedOutTransactionIsAbortedByTheBrokerAndTooLongATimeoutIsRefused() throws Exception {
        String bs = strata.bootstrap();
        String topic = Clients.uniqueTopic("java-txn-timeout");
        String txnId = Clients.uniqueTopic("java-txn-timeout-id");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Clients.admin(bs)) {
            Clients.createTopic(admin, topic, 1, 1, Map.of());
            Properties props = txProps(bs, txnId);
            props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "3000");
            try (KafkaProducer<String, String> p = producer(props)) {
                p.initTransactions();
                p.beginTransaction();
                sendAcked(p, topic, 0, values("abandoned", 4));
                long t0 = System.nanoTime();
                assertEquals(0L, endOffsets(admin, List.of(tp), IsolationLevel.READ_COMMITTED).get(tp),
                        "LSO while the transaction is open");
                awaitNoOpenTransaction(admin, List.of(tp));
                long ms = (System.nanoTime() - t0) / 1_000_000;
                TransactionDescription d = awaitTxnState(admin, txnId, TransactionState.COMPLETE_ABORT);
                System.out.println("[txn] timed-out transaction aborted after ~" + ms + " ms: " + d);
                assertEquals(List.of(), read(bs, List.of(tp), "read_committed"), "read_committed after the timeout");
                assertEquals(values("abandoned", 4), valuesOf(read(bs, List.of(tp), "read_uncommitted")));
                Throwable late = assertThrows(Exception.class, p::commitTransaction,
                        "commitTransaction() of a transaction the broker aborted");
                System.out.println("[txn] late commit: " + chain(late));
                assertTrue(chainHas(late, ProducerFencedException.class, InvalidProducerEpochException.class,
                                InvalidTxnStateException.class, TransactionAbortableException.class),
                        "the late commit's error: " + chain(late));
            }
            assertEquals(List.of(), read(bs, List.of(tp), "read_committed"), "read_committed after the late commit");

            Properties tooLong = txProps(bs, Clients.uniqueTopic("java-txn-too-long"));
            tooLong.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(MAX_TIMEOUT_MS + 1));
            try (KafkaProducer<String, String> p = producer(tooLong)) {
                Throwable e = assertThrows(Exception.class, p::initTransactions,
                        "initTransactions() with transaction.timeout.ms above the broker's maximum");
                System.out.println("[txn] too long a timeout: " + chain(e));
                // The 4.1 client wraps INVALID_TRANSACTION_TIMEOUT in a KafkaException
                // ("Unexpected error in InitProducerIdResponse; <the error's message>"), as
                // against Kafka.
                assertTrue(chainHas(e, InvalidTxnTimeoutException.class) || causes(e).stream().anyMatch(c ->
                                String.valueOf(c.getMessage()).contains(
                                        "transaction timeout is larger than the maximum value allowed")),
                        "INVALID_TRANSACTION_TIMEOUT: " + chain(e));
            }
        }
    }

    /**
     * SIGKILL and restart on the same data dir: committed and aborted transactions read
     * back the same (read_committed still skips the aborted records), a transaction left
     * open across the restart is aborted by its timeout afterwards (its state survived),
     * and the transactional id goes on at a higher epoch.
     */
    @Test
    void transactionStateAndAbortedRecordsSurviveARestart() throws Exception {
        String bs = strata.bootstrap();
        String topic = Clients.uniqueTopic("java-txn-restart");
        String idA = Clients.uniqueTopic("java-txn-restart-a");
        String idQ = Clients.uniqueTopic("java-txn-restart-q");
        TopicPartition tp = new TopicPartition(topic, 0);
        List<String> committed = new ArrayList<>(values("a-committed", 5));
        TransactionDescription beforeA;
        try (Admin admin = Clients.admin(bs)) {
            Clients.createTopic(admin, topic, 1, 1, Map.of());
            try (KafkaProducer<String, String> a = txProducer(bs, idA)) {
                a.initTransactions();
                a.beginTransaction();
                sendAcked(a, topic, 0, values("a-committed", 5));
                a.commitTransaction();
                a.beginTransaction();
                sendAcked(a, topic, 0, values("a-aborted", 5));
                a.abortTransaction();
            }
            beforeA = awaitTxnState(admin, idA, TransactionState.COMPLETE_ABORT);
            awaitNoOpenTransaction(admin, List.of(tp));
            Properties qp = txProps(bs, idQ);
            qp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "5000");
            KafkaProducer<String, String> q = producer(qp);
            try {
                q.initTransactions();
                q.beginTransaction();
                sendAcked(q, topic, 0, values("q-open", 3));
            } finally {
                q.close(Duration.ZERO); // a forced close leaves the transaction open
            }
            assertEquals(TransactionState.ONGOING, describeTxn(admin, idQ).state(), "Q before the restart");
        }

        StrataAgent agent = strata.agent();
        agent.kill();
        agent.start();

        try (Admin admin = Clients.admin(bs)) {
            awaitNoOpenTransaction(admin, List.of(tp));
            TransactionDescription q = awaitTxnState(admin, idQ, TransactionState.COMPLETE_ABORT);
            System.out.println("[txn] after the restart: Q " + q + "; A " + describeTxn(admin, idA));
            assertEquals(committed, valuesOf(read(bs, List.of(tp), "read_committed")),
                    "read_committed after the restart");
            List<String> all = new ArrayList<>(committed);
            all.addAll(values("a-aborted", 5));
            all.addAll(values("q-open", 3));
            assertEquals(all, valuesOf(read(bs, List.of(tp), "read_uncommitted")),
                    "read_uncommitted after the restart");
            TransactionDescription a = describeTxn(admin, idA);
            assertEquals(beforeA.producerId(), a.producerId(), "A's producer id survived the restart");
            assertEquals(beforeA.state(), a.state(), "A's state survived the restart");

            try (KafkaProducer<String, String> a2 = txProducer(bs, idA)) {
                a2.initTransactions();
                a2.beginTransaction();
                sendAcked(a2, topic, 0, values("a2-committed", 2));
                a2.commitTransaction();
            }
            TransactionDescription after = awaitTxnState(admin, idA, TransactionState.COMPLETE_COMMIT);
            assertEquals(beforeA.producerId(), after.producerId(), "A's producer id after the restart");
            assertTrue(after.producerEpoch() > beforeA.producerEpoch(), "A's epoch went on from " + beforeA
                    + ": " + after);
            awaitNoOpenTransaction(admin, List.of(tp));
            committed.addAll(values("a2-committed", 2));
            assertEquals(committed, valuesOf(read(bs, List.of(tp), "read_committed")),
                    "read_committed with the new transaction");
        }
    }

    /**
     * Three agents on a shared metastore, a topic with 6 partitions and replication
     * factor 3: one transactional producer writes every partition (led by different
     * agents than, in general, its transaction coordinator, so the markers go out as
     * WriteTxnMarkers to other agents) and commits its consumed offsets for a group
     * (whose coordinator may be yet another agent): commit, abort, commit. read_committed
     * sees exactly the committed records, the group's offsets are the committed ones.
     */
    @Test
    void threeAgentsMarkersReachEveryLeaderAndOffsetsCommitAcrossAgents() throws Exception {
        List<StrataAgent> agents = ClusterTest.startCluster(cluster);
        String all = ClusterTest.servers(agents);
        String topic = Clients.uniqueTopic("java-txn-cluster");
        String in = Clients.uniqueTopic("java-txn-cluster-in");
        String group = Clients.uniqueTopic("java-txn-cluster-group");
        String txnId = Clients.uniqueTopic("java-txn-cluster-id");
        int partitions = 6;
        List<TopicPartition> tps = Clients.partitions(topic, partitions);
        TopicPartition inTp = new TopicPartition(in, 0);
        try (Admin admin = Clients.admin(all)) {
            Clients.createTopic(admin, topic, partitions, 3, Map.of("min.insync.replicas", "2"));
            Clients.createTopic(admin, in, 1, 3, Map.of());
            TopicDescription d = Clients.waitForLeaders(admin, topic, partitions);
            Map<Integer, Integer> leaders = new TreeMap<>();
            for (TopicPartitionInfo p : d.partitions()) {
                leaders.put(p.partition(), p.leader().id());
            }
            try (KafkaProducer<String, String> p = txProducer(all, txnId)) {
                p.initTransactions();
                // c1 commits offset 5, a2's offset 99 is aborted, c3 commits offset 10
                String[] txns = {"c1", "a2", "c3"};
                long[] sentOffsets = {5, 99, 10};
                long[] groupOffsetAfter = {5, 5, 10};
                Integer coordinator = null;
                for (int i = 0; i < txns.length; i++) {
                    String t = txns[i];
                    p.beginTransaction();
                    for (int part = 0; part < partitions; part++) {
                        sendAcked(p, topic, part, values(t + "-p" + part, 4));
                    }
                    p.sendOffsetsToTransaction(Map.of(inTp, new OffsetAndMetadata(sentOffsets[i])),
                            new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group));
                    TransactionDescription open = describeTxn(admin, txnId);
                    coordinator = open.coordinatorId();
                    assertEquals(TransactionState.ONGOING, open.state(), t + ": " + open);
                    assertTrue(open.topicPartitions().containsAll(tps),
                            t + ": the open transaction's partitions include every partition written: " + open);
                    if (t.startsWith("a")) {
                        p.abortTransaction();
                    } else {
                        p.commitTransaction();
                    }
                    Map<TopicPartition, Long> wantOffsets = offsetsMap(Map.of(inTp, groupOffsetAfter[i]));
                    Wait.until(WAIT, "the group's offset to be " + wantOffsets + " after " + t, () -> {
                        try {
                            Map<TopicPartition, Long> got = groupOffsets(admin, group, List.of(inTp), true);
                            return got.equals(wantOffsets) ? Wait.Check.done(got) : Wait.Check.notYet(got.toString());
                        } catch (ExecutionException e) {
                            return Wait.Check.notYet(e.getCause().toString());
                        }
                    });
                }
                System.out.println("[txn-cluster] transaction coordinator " + coordinator + ", leaders " + leaders);
                if (leaders.values().stream().allMatch(coordinator::equals)) {
                    System.out.println("[txn-cluster] NOTE: every partition is led by the transaction coordinator;"
                            + " markers were not sent to other agents");
                }
                Map<TopicPartition, Long> hw = awaitNoOpenTransaction(admin, tps);
                for (TopicPartition tp : tps) {
                    assertEquals(15L, hw.get(tp), "high watermark of " + tp + ": 12 data records, 3 markers");
                }
                List<Rec> rc = read(all, tps, "read_committed");
                List<String> wantValues = new ArrayList<>();
                for (int part = 0; part < partitions; part++) {
                    wantValues.addAll(values("c1-p" + part, 4));
                    wantValues.addAll(values("c3-p" + part, 4));
                }
                assertEquals(wantValues, valuesOf(rc), "read_committed across the three agents");
                assertEquals(TransactionState.COMPLETE_COMMIT, awaitTxnState(admin, txnId,
                        TransactionState.COMPLETE_COMMIT).state());
            }
        }
    }
}
