package io.strata.clients;

import static io.strata.clients.TransactionsTest.awaitNoOpenTransaction;
import static io.strata.clients.TransactionsTest.awaitTxnState;
import static io.strata.clients.TransactionsTest.describeTxn;
import static io.strata.clients.TransactionsTest.endOffsets;
import static io.strata.clients.TransactionsTest.producers;
import static io.strata.clients.TransactionsTest.read;
import static io.strata.clients.TransactionsTest.sendAcked;
import static io.strata.clients.TransactionsTest.table;
import static io.strata.clients.TransactionsTest.txProps;
import static io.strata.clients.TransactionsTest.values;
import static io.strata.clients.TransactionsTest.valuesOf;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The hanging-transaction drill of docs/transactions.md, done as an operator would:
 * with Kafka's own {@code kafka-transactions.sh} (org.apache.kafka.tools.TransactionsCommand)
 * and with strata's {@code /v1/transactions} HTTP API.
 *
 * <p>One agent with {@code STRATA_FAILPOINT_LOSE_MARKER=<topic>:0}: the coordinator skips
 * the commit/abort marker of partition 0 of that topic and completes the transaction
 * anyway, which is how a transaction hangs in Kafka (a lost marker). Partition 0's last
 * stable offset then stays at the transaction's first offset for good: read_committed
 * consumers stop there, while the coordinator reports the transaction CompleteCommit.
 * The agent also runs the 500 ms timed-out-transaction check, which cannot help (the
 * coordinator has nothing open to time out).
 *
 * <p>{@code find-hanging} (Kafka 4.1.1) takes the open transactions that
 * describeProducers reports whose last write is older than {@code --max-transaction-timeout}
 * minutes (default 15) and keeps those whose producer id has no transactional id
 * (listTransactions), no description, or whose description (describeTransactions) does
 * not list the partition. {@code --max-transaction-timeout 0} keeps every open one, so
 * no wait is needed; the coordinator's CompleteCommit (no partitions) then makes it
 * hanging. {@code abort --topic --partition --start-offset} finds the producer whose
 * open transaction starts there (describeProducers) and sends the partition's leader an
 * abort marker (Admin abortTransaction = WriteTxnMarkers, KIP-664).
 *
 * <p>The two tests share the agent and the topic (the failpoint names it when the agent
 * starts) and take their offsets from where the partitions are when they begin; each
 * leaves no transaction hanging (an {@code @AfterEach} aborts any a failure left).
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class HangingTransactionTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    static final Duration WAIT = Duration.ofSeconds(30);
    static final Duration TOOL_TIMEOUT = Duration.ofSeconds(40);
    static final String TOPIC = Clients.uniqueTopic("java-txn-hang");
    static final TopicPartition P0 = new TopicPartition(TOPIC, 0);
    static final TopicPartition P1 = new TopicPartition(TOPIC, 1);
    static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    static final ObjectMapper JSON = new ObjectMapper();

    @BeforeAll
    static void startAgent() throws Exception {
        strata.add(StrataAgent.create("strata-java-txn-hang-", List.of(
                        "--group-initial-rebalance-delay-ms", StrataExtension.GROUP_DELAY_MS,
                        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "500"),
                Map.of("STRATA_FAILPOINT_LOSE_MARKER", TOPIC + ":0"))).start();
        try (Admin admin = Clients.admin(strata.bootstrap())) {
            Clients.createTopic(admin, TOPIC, 2, 1, Map.of());
        }
    }

    // ----- helpers -----

    static KafkaProducer<String, String> txProducer(String bootstrap, String transactionalId) {
        Properties p = txProps(bootstrap, transactionalId);
        // Short, so that the stuck LSO checked seconds later (after the tools ran) is not
        // the coordinator's timeout still to come.
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "3000");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> readCommittedConsumer(String bootstrap) {
        Properties p = Clients.consumerProps(bootstrap, null);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static long hw(Admin admin, TopicPartition tp) throws ExecutionException {
        return endOffsets(admin, List.of(tp), IsolationLevel.READ_UNCOMMITTED).get(tp);
    }

    static long lso(Admin admin, TopicPartition tp) throws ExecutionException {
        return endOffsets(admin, List.of(tp), IsolationLevel.READ_COMMITTED).get(tp);
    }

    static Optional<ProducerState> producerOn(Admin admin, TopicPartition tp, long pid) throws ExecutionException {
        return producers(admin, tp).stream().filter(s -> s.producerId() == pid).findFirst();
    }

    /** Waits until describeProducers shows no open transaction of {@code pid} on {@code tp}. */
    static void awaitNoOpenProducerTransaction(Admin admin, TopicPartition tp, long pid) {
        Wait.until(WAIT, "describeProducers(" + tp + ") to show no open transaction of " + pid, () -> {
            try {
                List<ProducerState> ps = producers(admin, tp);
                boolean open = ps.stream().anyMatch(s -> s.producerId() == pid
                        && s.currentTransactionStartOffset().isPresent());
                return open ? Wait.Check.notYet(ps.toString()) : Wait.Check.done(ps);
            } catch (ExecutionException e) {
                return Wait.Check.notYet(e.getCause().toString());
            }
        });
    }

    /** GET /v1/transactions, parsed. */
    static JsonNode getTransactions() {
        HttpResponse<String> r = http(HttpRequest.newBuilder(URI.create(strata.agent().httpUrl() + "/v1/transactions"))
                .timeout(Duration.ofSeconds(5)).GET().build());
        assertEquals(200, r.statusCode(), "GET /v1/transactions: " + r.body());
        try {
            return JSON.readTree(r.body());
        } catch (IOException e) {
            throw new AssertionError("GET /v1/transactions is not JSON: " + r.body(), e);
        }
    }

    /** The entries of GET /v1/transactions' "open" for partition {@code p} of the topic. */
    static List<JsonNode> openOn(JsonNode all, int p) {
        JsonNode open = all.get("open");
        assertTrue(open != null && open.isArray(), "GET /v1/transactions has an \"open\" array: " + all);
        List<JsonNode> out = new ArrayList<>();
        for (JsonNode e : open) {
            if (TOPIC.equals(e.path("topic").asText()) && e.path("partition").asInt(-1) == p) {
                out.add(e);
            }
        }
        return out;
    }

    /** Waits until GET /v1/transactions lists no entry under "open" (nothing else in
     *  this class's agent leaves a transaction open). */
    static void awaitNothingOpenOverHttp() {
        Wait.untilTrue(WAIT, "GET /v1/transactions to list nothing under \"open\"", () -> {
            JsonNode open = getTransactions().get("open");
            return open != null && open.isArray() && open.isEmpty();
        }, () -> getTransactions().toString());
    }

    static HttpResponse<String> postAbort(String body) {
        return http(HttpRequest.newBuilder(URI.create(strata.agent().httpUrl() + "/v1/transactions/abort"))
                .timeout(Duration.ofSeconds(15)).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body)).build());
    }

    static HttpResponse<String> http(HttpRequest req) {
        try {
            return HTTP.send(req, HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new UncheckedIOException(req.method() + " " + req.uri(), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }

    static KafkaTool.Result transactionsTool(String... args) {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", strata.bootstrap()));
        all.addAll(List.of(args));
        KafkaTool.Result r = KafkaTool.ok(TOOL_TIMEOUT, null, KafkaTool.TRANSACTIONS, all.toArray(String[]::new));
        System.out.println("[hang] kafka-transactions " + String.join(" ", args) + ":\n" + r.stdout());
        return r;
    }

    /** Polls until partition 1 is stable at {@code p1End} and the consumer's positions are
     *  at least {@code p0At} / {@code p1End}; returns what it polled. */
    static List<ConsumerRecord<String, String>> pollUntilPositions(KafkaConsumer<String, String> c, long p0At,
                                                                   long p1End) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        Wait.untilTrue(WAIT, "the read_committed consumer's positions to reach " + P0 + "@" + p0At + " and "
                + P1 + "@" + p1End, () -> {
                    c.poll(Duration.ofMillis(200)).forEach(got::add);
                    return c.position(P0) >= p0At && c.position(P1) >= p1End;
                }, () -> "positions " + c.position(P0) + " / " + c.position(P1) + ", got "
                        + got.stream().map(r -> r.partition() + ":" + r.offset() + ":" + r.value()).toList());
        return got;
    }

    static List<String> valuesFrom(Collection<ConsumerRecord<String, String>> recs, int partition, String prefix) {
        return recs.stream().filter(r -> r.partition() == partition && r.value().startsWith(prefix))
                .map(ConsumerRecord::value).toList();
    }

    /** Checks the coordinator's view: the transaction is CompleteCommit with no partitions,
     *  in describeTransactions and in listTransactions. */
    static TransactionDescription assertCoordinatorThinksItCommitted(Admin admin, String txnId, long pid)
            throws ExecutionException {
        TransactionDescription d = awaitTxnState(admin, txnId, TransactionState.COMPLETE_COMMIT);
        assertEquals(pid, d.producerId(), "describeTransactions: " + d);
        assertEquals(java.util.Set.of(), d.topicPartitions(), "a complete transaction names no partitions: " + d);
        Collection<TransactionListing> byPid = Clients.get(admin.listTransactions(
                new ListTransactionsOptions().filterProducerIds(List.of(pid))).all());
        assertEquals(List.of(new TransactionListing(txnId, pid, TransactionState.COMPLETE_COMMIT)),
                List.copyOf(byPid), "listTransactions(producer id " + pid + ")");
        return d;
    }

    /** Whatever a failed test left hanging on the topic is aborted, so that the other
     *  test starts from stable partitions. */
    @AfterEach
    void abortWhatIsLeftHanging() {
        try {
            for (int p = 0; p < 2; p++) {
                for (JsonNode e : openOn(getTransactions(), p)) {
                    ObjectNode body = JSON.createObjectNode().put("topic", TOPIC).put("partition", p)
                            .put("producer_id", e.get("producer_id").asLong())
                            .put("producer_epoch", e.get("producer_epoch").asInt());
                    HttpResponse<String> r = postAbort(body.toString());
                    System.out.println("[hang] cleanup: aborted " + e + ": " + r.statusCode() + " " + r.body());
                }
            }
        } catch (RuntimeException | AssertionError e) {
            System.out.println("[hang] cleanup failed: " + e);
        }
    }

    // ----- tests -----

    /**
     * The drill with Kafka's tool. A transaction over partitions 0 and 1 commits, but
     * partition 0 never gets its marker: partition 1 is readable with read_committed,
     * partition 0 is not (its LSO stays at the transaction's first offset, a live
     * read_committed consumer stops there), describeProducers shows the producer's
     * transaction open on partition 0, and the coordinator says CompleteCommit.
     * {@code kafka-transactions describe-producers} shows the start offset,
     * {@code find-hanging --topic T --max-transaction-timeout 0} lists exactly that
     * transaction (topic, partition 0, producer id, epoch, start offset), and
     * {@code abort --topic T --partition 0 --start-offset N} ends it: the LSO moves past
     * the abort marker, the live consumer goes past the aborted records without getting
     * any, describeProducers and GET /v1/transactions show nothing open, and
     * find-hanging for the broker finds nothing.
     */
    @Test
    @Order(1)
    void kafkaTransactionsToolFindsAndAbortsAHangingTransaction() throws Exception {
        String bs = strata.bootstrap();
        String txnId = Clients.uniqueTopic("java-txn-hang-tool");
        try (Admin admin = Clients.admin(bs);
             KafkaProducer<String, String> p = txProducer(bs, txnId);
             KafkaConsumer<String, String> live = readCommittedConsumer(bs)) {
            live.assign(List.of(P0, P1));
            live.seekToBeginning(List.of(P0, P1));
            long start0 = hw(admin, P0);
            long start1 = hw(admin, P1);

            p.initTransactions();
            p.beginTransaction();
            List<RecordMetadata> m0 = sendAcked(p, TOPIC, 0, values("tool-p0", 3));
            sendAcked(p, TOPIC, 1, values("tool-p1", 3));
            long first = m0.get(0).offset();
            assertEquals(start0, first, "the transaction's first offset on " + P0);
            TransactionDescription open = describeTxn(admin, txnId);
            assertEquals(TransactionState.ONGOING, open.state(), "before the commit: " + open);
            long pid = open.producerId();
            int openEpoch = open.producerEpoch();
            p.commitTransaction();
            long committedAt = System.nanoTime();

            // ----- the hang -----
            TransactionDescription done = assertCoordinatorThinksItCommitted(admin, txnId, pid);
            System.out.println("[hang] committed (coordinator): " + done);
            Map<TopicPartition, Long> p1End = awaitNoOpenTransaction(admin, List.of(P1));
            assertEquals(start1 + 4, p1End.get(P1), P1 + ": 3 records and the commit marker");
            assertEquals(first + 3, hw(admin, P0), P0 + "'s high watermark: 3 records and no marker");
            assertEquals(first, lso(admin, P0), P0 + "'s last stable offset stays at the transaction's first offset");
            ProducerState ps = producerOn(admin, P0, pid).orElseThrow(() -> new AssertionError(
                    "describeProducers(" + P0 + ") lists " + pid));
            assertEquals(OptionalLong.of(first), ps.currentTransactionStartOffset(), P0 + ": " + ps);
            assertEquals(openEpoch, ps.producerEpoch(), P0 + " producer epoch: " + ps);
            awaitNoOpenProducerTransaction(admin, P1, pid);

            List<String> rc = valuesOf(read(bs, List.of(P0, P1), "read_committed"));
            assertEquals(values("tool-p1", 3), rc.stream().filter(v -> v.startsWith("tool-")).toList(),
                    "a fresh read_committed read: partition 1's records, none of partition 0's");
            List<ConsumerRecord<String, String>> got = pollUntilPositions(live, first, p1End.get(P1));
            // A bounded look: nothing more comes from partition 0 while it hangs.
            long until = System.nanoTime() + Duration.ofSeconds(1).toNanos();
            while (System.nanoTime() < until) {
                live.poll(Duration.ofMillis(100)).forEach(got::add);
            }
            assertEquals(values("tool-p1", 3), valuesFrom(got, 1, "tool-"), "the live consumer got partition 1's");
            assertEquals(List.of(), valuesFrom(got, 0, "tool-"), "the live consumer got nothing from " + P0);
            assertEquals(first, live.position(P0), "the live read_committed consumer stops at the hanging "
                    + "transaction's first offset");

            // ----- found with the tool -----
            KafkaTool.Result prods = transactionsTool("describe-producers", "--topic", TOPIC, "--partition", "0");
            Map<String, String> prow = table(prods.stdout()).stream()
                    .filter(r -> String.valueOf(pid).equals(r.get("ProducerId"))).findFirst()
                    .orElseThrow(() -> new AssertionError("describe-producers shows " + pid + "\n" + prods.describe()));
            assertEquals(String.valueOf(first), prow.get("CurrentTransactionStartOffset"), prods.describe());

            KafkaTool.Result hanging = transactionsTool("find-hanging", "--topic", TOPIC,
                    "--max-transaction-timeout", "0");
            List<Map<String, String>> rows = table(hanging.stdout());
            assertEquals(1, rows.size(), "one hanging transaction on " + TOPIC + "\n" + hanging.describe());
            Map<String, String> row = rows.get(0);
            assertEquals(TOPIC, row.get("Topic"), hanging.describe());
            assertEquals("0", row.get("Partition"), hanging.describe());
            assertEquals(String.valueOf(pid), row.get("ProducerId"), hanging.describe());
            assertEquals(String.valueOf(openEpoch), row.get("ProducerEpoch"), hanging.describe());
            assertEquals(String.valueOf(first), row.get("StartOffset"), hanging.describe());
            long startOffset = Long.parseLong(row.get("StartOffset"));

            // Still stuck after the tools ran: neither the coordinator's timeout check nor
            // anything else ends it.
            long sinceCommitMs = (System.nanoTime() - committedAt) / 1_000_000;
            System.out.println("[hang] " + P0 + " still checked " + sinceCommitMs + " ms after the commit "
                    + "(transaction.timeout.ms 3000, timeout check every 500 ms)");
            assertEquals(first, lso(admin, P0), P0 + "'s LSO " + sinceCommitMs + " ms after the commit");
            assertEquals(TransactionState.COMPLETE_COMMIT, describeTxn(admin, txnId).state());

            // ----- ended with the tool -----
            transactionsTool("abort", "--topic", TOPIC, "--partition", "0", "--start-offset",
                    String.valueOf(startOffset));
            Map<TopicPartition, Long> p0End = awaitNoOpenTransaction(admin, List.of(P0));
            assertEquals(first + 4, p0End.get(P0), P0 + ": the 3 records and the operator's abort marker");
            assertTrue(lso(admin, P0) > first + 3, P0 + "'s LSO moved past the marker");
            got.addAll(pollUntilPositions(live, p0End.get(P0), p1End.get(P1)));
            assertEquals(List.of(), valuesFrom(got, 0, "tool-"),
                    "the live read_committed consumer got none of the aborted records");
            assertEquals(List.of(), valuesOf(read(bs, List.of(P0), "read_committed")).stream()
                    .filter(v -> v.startsWith("tool-")).toList(), "a fresh read_committed read of " + P0);
            assertTrue(valuesOf(read(bs, List.of(P0), "read_uncommitted")).containsAll(values("tool-p0", 3)),
                    "the aborted records are in the log (read_uncommitted)");
            awaitNoOpenProducerTransaction(admin, P0, pid);
            awaitNothingOpenOverHttp();
            assertEquals(TransactionState.COMPLETE_COMMIT, describeTxn(admin, txnId).state(),
                    "the coordinator's record is untouched by the operator's abort");

            int brokerId = Clients.get(admin.describeCluster().nodes()).iterator().next().id();
            KafkaTool.Result none = transactionsTool("find-hanging", "--broker-id", String.valueOf(brokerId),
                    "--max-transaction-timeout", "0");
            assertEquals(List.of(), table(none.stdout()), "nothing hanging on broker " + brokerId + "\n"
                    + none.describe());
        }
    }

    /**
     * The drill with strata's HTTP API: another committed transaction hangs on partition
     * 0; GET /v1/transactions lists it under "open" with {@code hanging: true} (its
     * producer id and epoch as describeProducers shows them, its first offset), a POST
     * /v1/transactions/abort with a body missing fields (or not JSON) is refused with 400
     * and a problem-details (RFC 9457) "detail" and changes nothing, and the right body answers 200
     * {@code {"marker_offset": N}} with N the partition's high watermark before it; the
     * LSO then moves to N + 1 and nothing is listed open.
     */
    @Test
    @Order(2)
    void httpAbortEndsAHangingTransaction() throws Exception {
        String bs = strata.bootstrap();
        String txnId = Clients.uniqueTopic("java-txn-hang-http");
        try (Admin admin = Clients.admin(bs);
             KafkaProducer<String, String> p = txProducer(bs, txnId)) {
            long start1 = hw(admin, P1);
            p.initTransactions();
            p.beginTransaction();
            List<RecordMetadata> m0 = sendAcked(p, TOPIC, 0, values("http-p0", 3));
            sendAcked(p, TOPIC, 1, values("http-p1", 2));
            long first = m0.get(0).offset();
            long pid = describeTxn(admin, txnId).producerId();
            p.commitTransaction();

            assertCoordinatorThinksItCommitted(admin, txnId, pid);
            Map<TopicPartition, Long> p1End = awaitNoOpenTransaction(admin, List.of(P1));
            assertEquals(start1 + 3, p1End.get(P1), P1 + ": 2 records and the commit marker");
            long hw0 = hw(admin, P0);
            assertEquals(first + 3, hw0, P0 + ": 3 records and no marker");
            assertEquals(first, lso(admin, P0), P0 + "'s LSO stays at the hanging transaction's first offset");
            ProducerState ps = producerOn(admin, P0, pid).orElseThrow(() -> new AssertionError(
                    "describeProducers(" + P0 + ") lists " + pid));
            assertEquals(OptionalLong.of(first), ps.currentTransactionStartOffset(), P0 + ": " + ps);

            JsonNode entry = Wait.until(WAIT, "GET /v1/transactions to list producer " + pid + " open on " + P0
                    + " with hanging: true", () -> {
                        JsonNode all = getTransactions();
                        return openOn(all, 0).stream()
                                .filter(e -> e.path("producer_id").asLong() == pid && e.path("hanging").asBoolean())
                                .findFirst().map(Wait.Check::done)
                                .orElseGet(() -> Wait.Check.notYet(all.toString()));
                    });
            System.out.println("[hang] GET /v1/transactions open entry: " + entry);
            assertEquals(first, entry.path("first_offset").asLong(-1), "first_offset: " + entry);
            assertEquals(ps.producerEpoch(), entry.path("producer_epoch").asInt(-1), "producer_epoch: " + entry);
            JsonNode all = getTransactions();
            assertTrue(all.path("transactions").isArray(), "\"transactions\" array: " + all);
            boolean listed = false;
            for (JsonNode t : all.path("transactions")) {
                if (txnId.equals(t.path("transactional_id").asText())) {
                    listed = true;
                    assertEquals("CompleteCommit", t.path("state").asText(), "the coordinator's record: " + t);
                }
            }
            assertTrue(listed, "GET /v1/transactions lists " + txnId + ": " + all);
            assertEquals(List.of(), openOn(all, 1), "nothing open on " + P1 + ": " + all);

            for (String bad : List.of(
                    JSON.createObjectNode().put("topic", TOPIC).put("partition", 0).toString(),
                    JSON.createObjectNode().put("topic", TOPIC).put("partition", 0).put("producer_id", pid).toString(),
                    "not json")) {
                HttpResponse<String> r = postAbort(bad);
                System.out.println("[hang] POST /v1/transactions/abort " + bad + ": " + r.statusCode() + " " + r.body());
                assertEquals(400, r.statusCode(), "POST " + bad + ": " + r.body());
                JsonNode err = JSON.readTree(r.body());
                assertFalse(err.path("detail").asText().isEmpty(), "a problem-details \"detail\" (RFC 9457): " + r.body());
            }
            assertEquals(first, lso(admin, P0), "the refused aborts changed nothing");
            assertEquals(hw0, hw(admin, P0), "the refused aborts wrote nothing");

            ObjectNode body = JSON.createObjectNode().put("topic", TOPIC).put("partition", 0)
                    .put("producer_id", entry.get("producer_id").asLong())
                    .put("producer_epoch", entry.get("producer_epoch").asInt());
            HttpResponse<String> r = postAbort(body.toString());
            System.out.println("[hang] POST /v1/transactions/abort " + body + ": " + r.statusCode() + " " + r.body());
            assertEquals(200, r.statusCode(), "POST " + body + ": " + r.body());
            long marker = JSON.readTree(r.body()).path("marker_offset").asLong(-1);
            assertEquals(hw0, marker, "the abort marker's offset: " + r.body());

            Map<TopicPartition, Long> p0End = awaitNoOpenTransaction(admin, List.of(P0));
            assertEquals(marker + 1, p0End.get(P0), P0 + "'s LSO and high watermark just past the marker");
            awaitNoOpenProducerTransaction(admin, P0, pid);
            awaitNothingOpenOverHttp();
            List<String> rc = valuesOf(read(bs, List.of(P0, P1), "read_committed"));
            assertEquals(values("http-p1", 2), rc.stream().filter(v -> v.startsWith("http-")).toList(),
                    "read_committed after the abort: partition 1's records, none of partition 0's aborted ones");
        }
    }
}
