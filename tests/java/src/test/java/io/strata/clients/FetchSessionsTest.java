package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The Java clients' fast paths: incremental fetch sessions (KIP-227), and topics named by
 *  id in Fetch v13+ and Produce v13 (KIP-516), which kafka-clients uses whenever the
 *  broker offers them. */
class FetchSessionsTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.singleNode();

    /** The sum of the /metrics samples of {@code series} whose labels contain {@code labels}. */
    static double metric(String series, String labels) throws Exception {
        HttpResponse<String> r = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create(strata.agent().httpUrl() + "/metrics")).build(),
                HttpResponse.BodyHandlers.ofString());
        double total = 0;
        for (String line : r.body().split("\n")) {
            if (line.startsWith(series + "{") && line.contains(labels)) {
                total += Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
            }
        }
        return total;
    }

    @Test
    void aConsumerOfManyPartitionsGetsEveryRecordInOrderThroughItsSession() throws Exception {
        String topic = Clients.uniqueTopic("sessions");
        int partitions = 8;
        try (Admin admin = Clients.admin(strata.bootstrap())) {
            Clients.get(admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all());
        }
        double incrementalBefore = metric("strata_fetch_requests_total", "session=\"incremental\"");
        List<TopicPartition> all = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            all.add(new TopicPartition(topic, p));
        }
        Map<Integer, List<String>> sent = new TreeMap<>();
        Map<Integer, List<String>> got = new TreeMap<>();
        try (KafkaProducer<byte[], byte[]> producer = Clients.producer(Clients.producerProps(strata.bootstrap()));
                KafkaConsumer<byte[], byte[]> consumer = Clients.consumer(Clients.consumerProps(strata.bootstrap(), null))) {
            consumer.assign(all);
            consumer.seekToBeginning(all);
            // Each round writes to one or two partitions only, so most of the session has
            // nothing new: an incremental answer must still bring every record, in order.
            for (int round = 0; round < 40; round++) {
                int[] targets = round % 5 == 0 ? new int[] {round % partitions, (round + 3) % partitions}
                        : new int[] {(round * 3) % partitions};
                int expected = 0;
                for (int p : targets) {
                    for (int i = 0; i < 5; i++) {
                        String v = "r" + round + "-p" + p + "-" + i;
                        producer.send(new ProducerRecord<>(topic, p, null, v.getBytes(StandardCharsets.UTF_8))).get();
                        sent.computeIfAbsent(p, k -> new ArrayList<>()).add(v);
                        expected++;
                    }
                }
                int want = expected;
                int[] seen = {0};
                Wait.untilTrue(Duration.ofSeconds(30), "round " + round + " consumed", () -> {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        got.computeIfAbsent(r.partition(), k -> new ArrayList<>())
                                .add(new String(r.value(), StandardCharsets.UTF_8));
                        seen[0]++;
                    }
                    return seen[0] >= want;
                }, () -> seen[0] + " of " + want);
                assertEquals(want, seen[0], "round " + round + ": no record twice");
            }
        }
        assertEquals(sent, got, "every record, once, in each partition's order");
        double incremental = metric("strata_fetch_requests_total", "session=\"incremental\"") - incrementalBefore;
        assertTrue(incremental >= 40, "the consumer fetched through a session: " + incremental + " incremental fetches");
        assertEquals(0.0, metric("strata_request_errors_total", "FETCH_SESSION"),
                "no fetch refused for its session");
        assertEquals(0.0, metric("strata_request_errors_total", "UNKNOWN_TOPIC_ID"),
                "every topic id the clients sent was known");
    }
}
