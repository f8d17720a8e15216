package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * Kafka Streams 4.1 against one agent: a word count (source topic, repartition through
 * an internal topic, a RocksDB count store with its compacted changelog, a sink topic)
 * with {@code at_least_once}, stopped cleanly and resumed twice (once on its local state,
 * once restoring the store from the changelog); and the same with {@code exactly_once_v2}
 * (transactions: each task's output, changelog and repartition writes and its input
 * offsets commit together), checked with read_committed consumers.
 *
 * <p>Streams creates its internal topics itself (Admin: Metadata, CreateTopics with
 * {@code cleanup.policy=compact} for the changelog and replication factor -1, i.e. the
 * broker's default), runs a classic consumer group with its own assignor (FindCoordinator,
 * JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch), produces with an
 * idempotent producer (InitProducerId, Produce) and reads end offsets for the restore
 * (ListOffsets). Under exactly_once_v2 it uses one transactional producer per stream
 * thread (InitProducerId with a transactional.id, transactions v2 Produce,
 * TxnOffsetCommit, EndTxn) and reads with isolation.level=read_committed (restores too).
 */
class StreamsTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.singleNode();

    static final int PARTITIONS = 3;
    static final Duration STREAMS_TIMEOUT = Duration.ofSeconds(90);
    static final List<String> VOCABULARY = List.of(
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
            "juliett", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
            "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
            "strata", "kafka", "log", "stream");

    /** Where the count store lives, and so the names of the internal topics:
     *  {@code <application.id>-word-counts-changelog} and {@code <application.id>-by-word-repartition}. */
    static final String STORE = "word-counts";
    static final String REPARTITION = "by-word";

    @TempDir
    Path tmp;

    /** {@code n} lines of 1 to 8 words of the vocabulary (a skewed choice, so that counts differ). */
    static List<String> lines(long seed, int n) {
        Random r = new Random(seed);
        List<String> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            int words = 1 + r.nextInt(8);
            StringBuilder sb = new StringBuilder();
            for (int w = 0; w < words; w++) {
                // the square favours the front of the vocabulary
                double x = r.nextDouble();
                String word = VOCABULARY.get((int) (x * x * VOCABULARY.size()));
                if (w > 0) {
                    sb.append(' ');
                }
                sb.append(r.nextBoolean() ? word : word.toUpperCase());
            }
            out.add(sb.toString());
        }
        return out;
    }

    static void addCounts(List<String> lines, Map<String, Long> counts) {
        for (String l : lines) {
            for (String w : l.toLowerCase().split(" ")) {
                counts.merge(w, 1L, Long::sum);
            }
        }
    }

    static Topology wordCount(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase().split(" ")))
                .groupBy((key, word) -> word, Grouped.with(REPARTITION, Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(STORE)
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return b.build();
    }

    static Properties streamsProps(String appId, Path stateDir, String guarantee) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, strata.bootstrap());
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        // no record cache: every update of a count goes to the output topic
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        // A closed Streams client does not send LeaveGroup (its consumers keep their
        // membership for a quick restart), so the next instance's rebalance waits for the
        // old member's session to expire: keep that short.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), "6000");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), "500");
        p.put(StreamsConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return p;
    }

    /** A running Streams client and what it went through. */
    static final class App implements AutoCloseable {
        final KafkaStreams streams;
        final List<KafkaStreams.State> states = new CopyOnWriteArrayList<>();
        final AtomicReference<Throwable> uncaught = new AtomicReference<>();
        final AtomicLong restored = new AtomicLong();
        final Map<TopicPartition, Long> restoredByPartition = new ConcurrentHashMap<>();

        App(Topology topology, Properties props) {
            streams = new KafkaStreams(topology, props);
            streams.setStateListener((now, before) -> states.add(now));
            streams.setUncaughtExceptionHandler(e -> {
                uncaught.compareAndSet(null, e);
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.setGlobalStateRestoreListener(new StateRestoreListener() {
                @Override
                public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                }

                @Override
                public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
                }

                @Override
                public void onRestoreEnd(TopicPartition tp, String store, long total) {
                    restored.addAndGet(total);
                    restoredByPartition.merge(tp, total, Long::sum);
                }
            });
        }

        App start() {
            streams.start();
            return this;
        }

        void awaitRunning() {
            Wait.untilTrue(STREAMS_TIMEOUT, "the Streams client to be RUNNING",
                    () -> {
                        if (uncaught.get() != null) {
                            throw new AssertionError("the stream thread died", uncaught.get());
                        }
                        return streams.state() == KafkaStreams.State.RUNNING;
                    },
                    () -> "state " + streams.state() + ", transitions " + states);
        }

        void assertHealthy() {
            if (uncaught.get() != null) {
                throw new AssertionError("the stream thread died", uncaught.get());
            }
            assertTrue(streams.state() == KafkaStreams.State.RUNNING
                            || streams.state() == KafkaStreams.State.REBALANCING,
                    "state " + streams.state() + ", transitions " + states);
        }

        @Override
        public void close() {
            assertTrue(streams.close(Duration.ofSeconds(60)), "Streams closed within 60 s");
            assertEquals(KafkaStreams.State.NOT_RUNNING, streams.state(), "state after close, transitions " + states);
            assertEquals(null, uncaught.get(), "no stream thread died");
        }
    }

    static void produceLines(String topic, List<String> lines, int firstIndex) {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(Clients.producerProps(strata.bootstrap()),
                new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < lines.size(); i++) {
                p.send(new ProducerRecord<>(topic, "line-" + (firstIndex + i), lines.get(i)));
            }
            p.flush();
        }
    }

    /** Reads the output topic from the beginning, keeping every value seen for each word in
     *  offset order (a word's updates all go to one partition). */
    static final class OutputReader implements AutoCloseable {
        final KafkaConsumer<String, Long> consumer;
        final Map<String, List<Long>> updates = new TreeMap<>();

        OutputReader(String topic) {
            this(topic, "read_uncommitted");
        }

        OutputReader(String topic, String isolation) {
            Properties p = Clients.consumerProps(strata.bootstrap(), null);
            p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
            consumer = new KafkaConsumer<>(p, new StringDeserializer(), new LongDeserializer());
            List<TopicPartition> tps = Clients.partitions(topic, PARTITIONS);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
        }

        Map<String, Long> latest() {
            Map<String, Long> out = new TreeMap<>();
            updates.forEach((w, vs) -> out.put(w, vs.get(vs.size() - 1)));
            return out;
        }

        /** Polls until the latest count of every word is {@code expected}; fails after STREAMS_TIMEOUT. */
        void awaitCounts(Map<String, Long> expected, App app) {
            Map<String, Long> want = new TreeMap<>(expected);
            Wait.untilTrue(STREAMS_TIMEOUT, "the output topic's latest count per word to be " + want,
                    () -> {
                        app.assertHealthy();
                        for (ConsumerRecord<String, Long> r : consumer.poll(Duration.ofMillis(200))) {
                            updates.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r.value());
                        }
                        return latest().equals(want);
                    },
                    () -> "latest " + latest() + ", Streams state " + app.streams.state());
            // A moment more, in case a count went past the expected one (double counting).
            long quietUntil = System.nanoTime() + Duration.ofSeconds(1).toNanos();
            while (System.nanoTime() < quietUntil) {
                for (ConsumerRecord<String, Long> r : consumer.poll(Duration.ofMillis(200))) {
                    updates.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r.value());
                }
            }
            assertEquals(want, latest(), "latest count per word");
        }

        /** Without a cache and with no crash, each word's updates are exactly 1, 2, ..., n:
         *  nothing counted twice, nothing skipped. */
        void assertEveryUpdateOnce(Map<String, Long> expected) {
            for (Map.Entry<String, Long> e : expected.entrySet()) {
                List<Long> seen = updates.get(e.getKey());
                assertNotNull(seen, "updates of " + e.getKey());
                List<Long> want = new ArrayList<>();
                for (long i = 1; i <= e.getValue(); i++) {
                    want.add(i);
                }
                if (!want.equals(seen)) {
                    fail("updates of '" + e.getKey() + "' should be 1.." + e.getValue() + ", got " + seen.size()
                            + " updates: " + summarize(seen));
                }
            }
        }

        @Override
        public void close() {
            consumer.close();
        }
    }

    static String summarize(List<Long> vs) {
        if (vs.size() <= 40) {
            return vs.toString();
        }
        return vs.subList(0, 20) + " ... " + vs.subList(vs.size() - 20, vs.size());
    }

    static Map<TopicPartition, Long> endOffsets(Admin admin, String topic) throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicPartition tp : Clients.partitions(topic, PARTITIONS)) {
            req.put(tp, OffsetSpec.latest());
        }
        return Clients.get(admin.listOffsets(req).all()).entrySet().stream()
                .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
    }

    static Map<TopicPartition, Long> committed(Admin admin, String group, String topic) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> all =
                Clients.get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        Map<TopicPartition, Long> out = new HashMap<>();
        all.forEach((tp, om) -> {
            if (tp.topic().equals(topic) && om != null) {
                out.put(tp, om.offset());
            }
        });
        return out;
    }

    /**
     * Word count with at_least_once: 2,000 lines counted exactly; the client closed
     * cleanly (its group's committed offsets are then the input's end offsets); 1,000 more
     * lines produced while it is down; a new client with the same application.id and state
     * dir resumes from the committed offsets; then once more with an empty state dir, so
     * that the count store is restored from its compacted changelog. After each phase the
     * latest count per word is exact, and each word's updates are exactly 1, 2, ..., n.
     */
    @Test
    void wordCountAtLeastOnceIsExactAndResumesAfterACleanRestart() throws Exception {
        String appId = Clients.uniqueTopic("java-streams-wc");
        String input = appId + "-lines";
        String output = appId + "-counts";
        String changelog = appId + "-" + STORE + "-changelog";
        String repartition = appId + "-" + REPARTITION + "-repartition";
        Path stateDir = Files.createDirectories(tmp.resolve("state-1"));
        long t0 = System.nanoTime();

        try (Admin admin = Clients.admin(strata.bootstrap())) {
            Clients.createTopic(admin, input, PARTITIONS, 1, Map.of());
            Clients.createTopic(admin, output, PARTITIONS, 1, Map.of());
            Map<String, Long> expected = new TreeMap<>();

            // Phase 1: 2,000 lines
            List<String> first = lines(14, 2_000);
            addCounts(first, expected);
            produceLines(input, first, 0);
            try (OutputReader out = new OutputReader(output);
                 App app = new App(wordCount(input, output), streamsProps(appId, stateDir, "at_least_once"))) {
                app.start().awaitRunning();
                out.awaitCounts(expected, app);
                out.assertEveryUpdateOnce(expected);
                System.out.println("[streams] phase 1: " + expected.values().stream().mapToLong(Long::longValue).sum()
                        + " words counted after " + (System.nanoTime() - t0) / 1_000_000 + " ms");
            }

            // The internal topics Streams created through the Admin client.
            Set<String> topics = Clients.listTopics(admin);
            assertTrue(topics.contains(changelog), "changelog topic " + changelog + " in " + topics);
            assertTrue(topics.contains(repartition), "repartition topic " + repartition + " in " + topics);
            Map<String, TopicDescription> described =
                    Clients.get(admin.describeTopics(List.of(changelog, repartition)).allTopicNames());
            assertEquals(PARTITIONS, described.get(changelog).partitions().size(), "changelog partitions");
            assertEquals(PARTITIONS, described.get(repartition).partitions().size(), "repartition partitions");
            ConfigResource changelogRes = new ConfigResource(ConfigResource.Type.TOPIC, changelog);
            ConfigResource repartitionRes = new ConfigResource(ConfigResource.Type.TOPIC, repartition);
            Map<ConfigResource, Config> configs =
                    Clients.get(admin.describeConfigs(List.of(changelogRes, repartitionRes)).all());
            assertEquals("compact", configs.get(changelogRes).get("cleanup.policy").value(),
                    "changelog cleanup.policy");
            assertEquals("delete", configs.get(repartitionRes).get("cleanup.policy").value(),
                    "repartition cleanup.policy");

            // A clean close commits what was processed.
            assertEquals(endOffsets(admin, input), committed(admin, appId, input),
                    "the group's committed offsets on the input after a clean close");
            assertEquals(endOffsets(admin, repartition), committed(admin, appId, repartition),
                    "the group's committed offsets on the repartition topic after a clean close");

            // Phase 2: 1,000 more lines while the application is down; same state dir.
            List<String> second = lines(15, 1_000);
            addCounts(second, expected);
            produceLines(input, second, first.size());
            try (OutputReader out = new OutputReader(output);
                 App app = new App(wordCount(input, output), streamsProps(appId, stateDir, "at_least_once"))) {
                app.start().awaitRunning();
                out.awaitCounts(expected, app);
                out.assertEveryUpdateOnce(expected);
                System.out.println("[streams] phase 2 (same state dir): restored " + app.restored.get()
                        + " changelog records; " + (System.nanoTime() - t0) / 1_000_000 + " ms");
            }
            assertEquals(endOffsets(admin, input), committed(admin, appId, input),
                    "committed offsets on the input after the second close");

            // Phase 3: 1,000 more lines; an empty state dir, so the store comes back from
            // the changelog (Fetch from offset 0 of a compacted topic up to its end offset).
            List<String> third = lines(16, 1_000);
            addCounts(third, expected);
            produceLines(input, third, first.size() + second.size());
            Path stateDir2 = Files.createDirectories(tmp.resolve("state-2"));
            try (OutputReader out = new OutputReader(output);
                 App app = new App(wordCount(input, output), streamsProps(appId, stateDir2, "at_least_once"))) {
                app.start().awaitRunning();
                out.awaitCounts(expected, app);
                out.assertEveryUpdateOnce(expected);
                System.out.println("[streams] phase 3 (empty state dir): restored " + app.restored.get()
                        + " changelog records " + new TreeMap<>(app.restoredByPartition.entrySet().stream()
                        .collect(Collectors.toMap(e -> e.getKey().toString(), Map.Entry::getValue)))
                        + "; " + (System.nanoTime() - t0) / 1_000_000 + " ms");
                assertTrue(app.restored.get() >= expected.size(),
                        "restored at least one changelog record per word (" + expected.size() + "), got "
                                + app.restored.get());
            }
            assertEquals(endOffsets(admin, input), committed(admin, appId, input),
                    "committed offsets on the input after the third close");
            System.out.println("[streams] " + expected.size() + " words, "
                    + expected.values().stream().mapToLong(Long::longValue).sum() + " counted in "
                    + (first.size() + second.size() + third.size()) + " lines: " + expected);
        }
    }

    static Map<TopicPartition, Long> earliestOffsets(Admin admin, String topic) throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicPartition tp : Clients.partitions(topic, PARTITIONS)) {
            req.put(tp, OffsetSpec.earliest());
        }
        return Clients.get(admin.listOffsets(req).all()).entrySet().stream()
                .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
    }

    /**
     * Streams purges what it has committed from its repartition topics (Admin
     * deleteRecords, i.e. DeleteRecords, every {@code repartition.purge.interval.ms}), so a
     * repartition topic's log start offsets follow the group's committed offsets, as
     * against Kafka; the counts stay exact. First the Admin call on its own:
     * {@code deleteRecords(beforeOffset(5))} answers low watermark 5, and earliest is 5.
     */
    @Test
    void repartitionTopicsArePurgedUpToTheCommittedOffsets() throws Exception {
        String appId = Clients.uniqueTopic("java-streams-purge");
        String input = appId + "-lines";
        String output = appId + "-counts";
        String repartition = appId + "-" + REPARTITION + "-repartition";
        String scratch = appId + "-scratch";
        Path stateDir = Files.createDirectories(tmp.resolve("state-purge"));
        try (Admin admin = Clients.admin(strata.bootstrap())) {
            Clients.createTopic(admin, scratch, 1, 1, Map.of());
            produceLines(scratch, lines(18, 10), 0);
            TopicPartition tp = new TopicPartition(scratch, 0);
            long low = Clients.get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(5)))
                    .lowWatermarks().get(tp)).lowWatermark();
            assertEquals(5L, low, "the low watermark deleteRecords answers");
            long start = Clients.get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all())
                    .get(tp).offset();
            assertEquals(5L, start, "the log start after deleteRecords");

            Clients.createTopic(admin, input, PARTITIONS, 1, Map.of());
            Clients.createTopic(admin, output, PARTITIONS, 1, Map.of());
            List<String> text = lines(19, 500);
            Map<String, Long> expected = new TreeMap<>();
            addCounts(text, expected);
            produceLines(input, text, 0);
            Properties props = streamsProps(appId, stateDir, "at_least_once");
            props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, "500");
            try (OutputReader out = new OutputReader(output);
                 App app = new App(wordCount(input, output), props)) {
                app.start().awaitRunning();
                out.awaitCounts(expected, app);
                Map<TopicPartition, Long> end = endOffsets(admin, repartition);
                assertTrue(end.values().stream().anyMatch(o -> o > 0), "the repartition topic has records: " + end);
                Map<TopicPartition, Long> purged = Wait.until(STREAMS_TIMEOUT, Duration.ofMillis(200),
                        "the repartition topic purged up to its end", () -> {
                            try {
                                Map<TopicPartition, Long> starts = earliestOffsets(admin, repartition);
                                return starts.equals(end) && committed(admin, appId, repartition).equals(end)
                                        ? Wait.Check.done(starts)
                                        : Wait.Check.notYet("log starts " + starts + ", committed "
                                                + committed(admin, appId, repartition) + ", end " + end);
                            } catch (Exception e) {
                                return Wait.Check.notYet(e.toString());
                            }
                        });
                System.out.println("[streams] repartition topic purged: log starts " + purged);
                app.assertHealthy();
            }
        }
    }

    static Map<TopicPartition, Long> lastStableOffsets(Admin admin, String topic) throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (TopicPartition tp : Clients.partitions(topic, PARTITIONS)) {
            req.put(tp, OffsetSpec.latest());
        }
        return Clients.get(admin.listOffsets(req, new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all())
                .entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
    }

    /** Waits until no transaction is open on the topic (LSO == high watermark per partition). */
    static Map<TopicPartition, Long> awaitNoOpenTransaction(Admin admin, String topic) {
        return Wait.until(Duration.ofSeconds(30), Duration.ofMillis(100), "no open transaction on " + topic, () -> {
            try {
                Map<TopicPartition, Long> hw = endOffsets(admin, topic);
                Map<TopicPartition, Long> lso = lastStableOffsets(admin, topic);
                return hw.equals(lso) ? Wait.Check.done(hw)
                        : Wait.Check.notYet("high watermarks " + hw + ", last stable offsets " + lso);
            } catch (Exception e) {
                return Wait.Check.notYet(e.toString());
            }
        });
    }

    /** Waits until the group's committed offsets on the topic are its end offsets (under
     *  exactly_once_v2 they are committed in the transaction, and become the group's
     *  when its markers are written). */
    static void awaitCommittedAtEnd(Admin admin, String group, String topic) throws Exception {
        Map<TopicPartition, Long> end = endOffsets(admin, topic);
        Wait.until(STREAMS_TIMEOUT, "the group's offsets on " + topic + " to be its end offsets " + end, () -> {
            try {
                Map<TopicPartition, Long> c = committed(admin, group, topic);
                return c.equals(end) ? Wait.Check.done(c) : Wait.Check.notYet(c.toString());
            } catch (Exception e) {
                return Wait.Check.notYet(e.toString());
            }
        });
    }

    static Topology mapValues(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .mapValues(v -> "mapped-" + v)
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    /**
     * exactly_once_v2, a stateless map: 3,000 input records, and a read_committed
     * consumer reads exactly 3,000 output records, each input's mapped value exactly
     * once; the group's committed offsets (committed in the transactions) are the
     * input's end offsets; the output topic holds transaction markers besides the
     * records (so the writes really were transactional), and the Streams producer's
     * transactional id is listed by the broker.
     */
    @Test
    void exactlyOnceV2MapsEveryInputRecordToExactlyOneCommittedOutputRecord() throws Exception {
        String appId = Clients.uniqueTopic("java-streams-eos-map");
        String input = appId + "-in";
        String output = appId + "-out";
        int n = 3_000;
        Path stateDir = Files.createDirectories(tmp.resolve("state-eos-map"));
        try (Admin admin = Clients.admin(strata.bootstrap())) {
            Clients.createTopic(admin, input, PARTITIONS, 1, Map.of());
            Clients.createTopic(admin, output, PARTITIONS, 1, Map.of());
            Map<String, String> expected = new TreeMap<>();
            try (KafkaProducer<String, String> p = new KafkaProducer<>(Clients.producerProps(strata.bootstrap()),
                    new StringSerializer(), new StringSerializer())) {
                for (int i = 0; i < n; i++) {
                    p.send(new ProducerRecord<>(input, "key-" + i, "value-" + i));
                    expected.put("key-" + i, "mapped-value-" + i);
                }
                p.flush();
            }
            long t0 = System.nanoTime();
            Properties rc = Clients.consumerProps(strata.bootstrap(), null);
            rc.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            Map<String, List<String>> seen = new TreeMap<>();
            try (KafkaConsumer<String, String> out = new KafkaConsumer<>(rc, new StringDeserializer(),
                    new StringDeserializer());
                 App app = new App(mapValues(input, output), streamsProps(appId, stateDir, "exactly_once_v2"))) {
                List<TopicPartition> outTps = Clients.partitions(output, PARTITIONS);
                out.assign(outTps);
                out.seekToBeginning(outTps);
                app.start().awaitRunning();
                long[] count = {0};
                Wait.untilTrue(STREAMS_TIMEOUT, n + " committed output records", () -> {
                    app.assertHealthy();
                    for (ConsumerRecord<String, String> r : out.poll(Duration.ofMillis(200))) {
                        seen.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r.value());
                        count[0]++;
                    }
                    return count[0] >= n;
                }, () -> count[0] + " records, Streams state " + app.streams.state());
                System.out.println("[streams] exactly_once_v2 map: " + count[0] + " committed records after "
                        + (System.nanoTime() - t0) / 1_000_000 + " ms");
                awaitCommittedAtEnd(admin, appId, input);
                List<String> ids = Clients.get(admin.listTransactions().all()).stream()
                        .map(l -> l.transactionalId()).filter(id -> id.startsWith(appId + "-")).toList();
                System.out.println("[streams] exactly_once_v2 transactional ids: " + ids);
                assertEquals(1, ids.size(), "one transactional id (one stream thread) of " + appId + ": " + ids);
                app.assertHealthy();
            }
            // Once the client is closed, nothing is open; read everything once more.
            Map<TopicPartition, Long> hw = awaitNoOpenTransaction(admin, output);
            List<String> dup = seen.entrySet().stream().filter(e -> e.getValue().size() != 1)
                    .map(e -> e.getKey() + "=" + e.getValue()).limit(20).toList();
            assertEquals(List.of(), dup, "keys seen more than once by the live read_committed consumer");
            Map<String, String> live = new TreeMap<>();
            seen.forEach((k, vs) -> live.put(k, vs.get(0)));
            assertEquals(expected, live, "what the live read_committed consumer saw");
            Properties extra = new Properties();
            extra.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            List<ConsumerRecord<byte[], byte[]>> all = Clients.readAll(strata.bootstrap(),
                    Clients.partitions(output, PARTITIONS), extra);
            Map<String, List<String>> again = new TreeMap<>();
            for (ConsumerRecord<byte[], byte[]> r : all) {
                again.computeIfAbsent(new String(r.key(), StandardCharsets.UTF_8), k -> new ArrayList<>())
                        .add(new String(r.value(), StandardCharsets.UTF_8));
            }
            assertEquals(n, all.size(), "read_committed output records after the close");
            assertEquals(expected.keySet(), again.keySet(), "keys of the output");
            assertTrue(again.entrySet().stream().allMatch(e -> e.getValue().equals(List.of(expected.get(e.getKey())))),
                    "each key once with its mapped value");
            long end = hw.values().stream().mapToLong(Long::longValue).sum();
            System.out.println("[streams] exactly_once_v2 map: output end offsets " + hw + " for " + n + " records");
            assertTrue(end > n, "the output has transaction markers besides its " + n + " records: end offsets " + hw);
            awaitCommittedAtEnd(admin, appId, input);
        }
    }

    /**
     * The word count with exactly_once_v2, checked with read_committed: 1,000 lines
     * counted exactly, each word's updates exactly 1, 2, ..., n; the client closed; 300
     * more lines; a new client with an empty state dir restores the count store from the
     * transactional changelog (a read_committed restore up to the last stable offset,
     * past the markers) and goes on counting exactly.
     */
    @Test
    void exactlyOnceV2WordCountIsExactAndRestoresFromTheTransactionalChangelog() throws Exception {
        String appId = Clients.uniqueTopic("java-streams-eos-wc");
        String input = appId + "-lines";
        String output = appId + "-counts";
        String changelog = appId + "-" + STORE + "-changelog";
        long t0 = System.nanoTime();
        try (Admin admin = Clients.admin(strata.bootstrap())) {
            Clients.createTopic(admin, input, PARTITIONS, 1, Map.of());
            Clients.createTopic(admin, output, PARTITIONS, 1, Map.of());
            Map<String, Long> expected = new TreeMap<>();
            List<String> first = lines(27, 1_000);
            addCounts(first, expected);
            produceLines(input, first, 0);
            Path stateDir = Files.createDirectories(tmp.resolve("state-eos-wc-1"));
            try (OutputReader out = new OutputReader(output, "read_committed");
                 App app = new App(wordCount(input, output), streamsProps(appId, stateDir, "exactly_once_v2"))) {
                app.start().awaitRunning();
                out.awaitCounts(expected, app);
                out.assertEveryUpdateOnce(expected);
                System.out.println("[streams] exactly_once_v2 word count, phase 1: "
                        + (System.nanoTime() - t0) / 1_000_000 + " ms");
            }
            awaitCommittedAtEnd(admin, appId, input);
            Map<TopicPartition, Long> changelogEnd = awaitNoOpenTransaction(admin, changelog);
            System.out.println("[streams] exactly_once_v2 changelog end offsets " + changelogEnd);

            List<String> second = lines(28, 300);
            addCounts(second, expected);
            produceLines(input, second, first.size());
            Path stateDir2 = Files.createDirectories(tmp.resolve("state-eos-wc-2"));
            try (OutputReader out = new OutputReader(output, "read_committed");
                 App app = new App(wordCount(input, output), streamsProps(appId, stateDir2, "exactly_once_v2"))) {
                app.start().awaitRunning();
                out.awaitCounts(expected, app);
                out.assertEveryUpdateOnce(expected);
                System.out.println("[streams] exactly_once_v2 word count, phase 2 (empty state dir): restored "
                        + app.restored.get() + " changelog records; " + (System.nanoTime() - t0) / 1_000_000 + " ms");
                assertTrue(app.restored.get() > 0, "restored the store from the changelog");
            }
            awaitCommittedAtEnd(admin, appId, input);
            awaitNoOpenTransaction(admin, output);
        }
    }
}
