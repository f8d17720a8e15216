package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** SASL/SCRAM with the Java client and Kafka's own kafka-configs: users created with
 *  {@code kafka-configs --entity-type users --alter --add-config SCRAM-SHA-512=[...]} over
 *  the PLAINTEXT listener, then a Java producer, a group consumer and the admin client
 *  authenticating on the SASL_PLAINTEXT listener, with sessions short enough
 *  ({@code --connections-max-reauth-ms}) that the clients re-authenticate (KIP-368)
 *  while they work. */
class SaslTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    static final String PASSWORD = "alice-secret";
    static final Duration TOOL_TIMEOUT = Duration.ofSeconds(90);
    static int saslPort;

    @BeforeAll
    static void start() {
        try {
            saslPort = StrataAgent.freePorts(1)[0];
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        strata.add(StrataAgent.create("strata-java-sasl-", List.of(
                "--listeners", "CLIENT://127.0.0.1:" + saslPort,
                "--listener-security-protocol-map", "CLIENT:SASL_PLAINTEXT",
                "--connections-max-reauth-ms", "2000",
                "--group-initial-rebalance-delay-ms", StrataExtension.GROUP_DELAY_MS), Map.of())).start();
        KafkaTool.ok(TOOL_TIMEOUT, null, KafkaTool.CONFIGS, "--bootstrap-server", strata.bootstrap(),
                "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
                "SCRAM-SHA-512=[iterations=8192,password=" + PASSWORD + "],SCRAM-SHA-256=[password=" + PASSWORD + "]");
    }

    static String sasl() {
        return "127.0.0.1:" + saslPort;
    }

    static Properties auth(Properties p, String mechanism, String password) {
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        p.put(SaslConfigs.SASL_MECHANISM, mechanism);
        p.put(SaslConfigs.SASL_JAAS_CONFIG, "org.apache.kafka.common.security.scram.ScramLoginModule required "
                + "username=\"alice\" password=\"" + password + "\";");
        return p;
    }

    static Admin saslAdmin(String password) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, sasl());
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(auth(p, "SCRAM-SHA-512", password));
    }

    /** kafka-configs created them; its --describe (DescribeUserScramCredentials and
     *  DescribeClientQuotas) and the admin client describe them. */
    @Test
    void theCredentialsKafkaConfigsCreatedAreDescribed() throws Exception {
        String described = KafkaTool.ok(TOOL_TIMEOUT, null, KafkaTool.CONFIGS, "--bootstrap-server",
                strata.bootstrap(), "--describe", "--entity-type", "users", "--entity-name", "alice").stdout();
        assertTrue(described.contains("SCRAM-SHA-512=iterations=8192"), described);
        assertTrue(described.contains("SCRAM-SHA-256=iterations=4096"), described);
        try (Admin admin = Clients.admin(strata.bootstrap())) {
            UserScramCredentialsDescription alice = Clients.get(admin.describeUserScramCredentials(List.of("alice"))
                    .description("alice"));
            assertEquals(2, alice.credentialInfos().size());
            assertTrue(alice.credentialInfos().stream().anyMatch(
                    i -> i.mechanism() == ScramMechanism.SCRAM_SHA_512 && i.iterations() == 8192), alice.toString());
            assertTrue(alice.credentialInfos().stream().anyMatch(
                    i -> i.mechanism() == ScramMechanism.SCRAM_SHA_256 && i.iterations() == 4096), alice.toString());
        }
    }

    @Test
    void javaClientsAuthenticateAndReauthenticateWhileTheyWork() throws Exception {
        String topic = Clients.uniqueTopic("java-sasl");
        Clients.createTopic(strata.bootstrap(), topic, 2);
        try (Admin admin = saslAdmin(PASSWORD)) {
            List<Node> nodes = new ArrayList<>(Clients.get(admin.describeCluster().nodes()));
            assertEquals(1, nodes.size());
            assertEquals(saslPort, nodes.get(0).port(), "the SASL listener's own address is advertised on it");
        }
        List<String> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer =
                     Clients.producer(auth(Clients.producerProps(sasl()), "SCRAM-SHA-512", PASSWORD))) {
            // Across more than two session lifetimes: the producer must re-authenticate
            // on its connections, not lose them.
            long until = System.nanoTime() + Duration.ofMillis(5000).toNanos();
            for (int i = 0; System.nanoTime() < until; i++) {
                String v = "v" + i;
                producer.send(new ProducerRecord<>(topic, i % 2, null, v.getBytes(StandardCharsets.UTF_8))).get();
                sent.add(v);
            }
        }
        Properties cp = auth(Clients.consumerProps(sasl(), "g-" + topic), "SCRAM-SHA-256", PASSWORD);
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = Clients.consumer(cp)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (got.size() < sent.size() && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
            consumer.commitSync();
        }
        assertEquals(sent.stream().sorted().collect(Collectors.toList()),
                got.stream().sorted().collect(Collectors.toList()));
        String log = strata.agent().logText();
        assertTrue(!log.contains("SASL session expired"), "no connection outlived its session");
        assertTrue(reauthentications() >= 2, "the clients re-authenticated on their connections");
    }

    /** strata_sasl_authentications_total of successful re-authentications. */
    static double reauthentications() throws Exception {
        java.net.http.HttpResponse<String> r = java.net.http.HttpClient.newHttpClient().send(
                java.net.http.HttpRequest.newBuilder(java.net.URI.create(strata.agent().httpUrl() + "/metrics")).build(),
                java.net.http.HttpResponse.BodyHandlers.ofString());
        double total = 0;
        for (String line : r.body().split("\n")) {
            if (line.startsWith("strata_sasl_authentications_total{") && line.contains("outcome=\"ok\"")
                    && line.contains("reauthentication=\"true\"")) {
                total += Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
            }
        }
        return total;
    }

    @Test
    void aWrongPasswordIsASaslAuthenticationException() {
        try (Admin admin = saslAdmin("wrong")) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> admin.describeCluster().nodes().get());
            assertInstanceOf(SaslAuthenticationException.class, e.getCause(), e.toString());
        }
    }
}
