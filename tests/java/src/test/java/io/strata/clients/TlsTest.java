package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** TLS with the Java client: PEM trust and key stores (KIP-651) made by the openssl CLI,
 *  a producer, a group consumer and the admin client with a client certificate on an
 *  SSL listener that requires one, and SCRAM over a SASL_SSL listener; a certificate
 *  from an authority the agent does not trust is an SslAuthenticationException. */
class TlsTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    static final Duration TOOL_TIMEOUT = Duration.ofSeconds(90);
    static final String PASSWORD = "carol-secret";
    static Path certs;
    static int sslPort;
    static int saslSslPort;

    static void openssl(String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>(List.of("openssl"));
        command.addAll(List.of(args));
        Process p = new ProcessBuilder(command).directory(certs.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0, String.join(" ", command) + ": " + out);
    }

    static void ca(String name) throws Exception {
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", "/CN=" + name);
    }

    static void issue(String ca, String name, String subject, String extensions, long serial) throws Exception {
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", name + ".key", "-out", name + ".csr", "-subj", subject);
        Files.writeString(certs.resolve(name + ".ext"), extensions);
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                "-set_serial", Long.toString(serial), "-days", "2", "-out", name + ".pem", "-extfile", name + ".ext");
        // Kafka's PEM key store takes the private key and its certificate in one file.
        Files.writeString(certs.resolve(name + "-keystore.pem"),
                Files.readString(certs.resolve(name + ".key")) + Files.readString(certs.resolve(name + ".pem")));
    }

    @BeforeAll
    static void start() throws Exception {
        certs = Files.createTempDirectory("strata-java-tls-");
        ca("ca");
        ca("other-ca");
        String client = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
        issue("ca", "server", "/O=strata/CN=localhost",
                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n", 1);
        issue("ca", "java", "/O=strata/OU=eng/CN=Java", client, 2);
        issue("other-ca", "stranger", "/O=strata/OU=eng/CN=Stranger", client, 3);
        int[] ports = StrataAgent.freePorts(2);
        sslPort = ports[0];
        saslSslPort = ports[1];
        strata.add(StrataAgent.create("strata-java-tls-", List.of(
                "--listeners", "SSL://127.0.0.1:" + sslPort + ",SASL_SSL://127.0.0.1:" + saslSslPort,
                "--ssl-certificate-location", certs.resolve("server.pem").toString(),
                "--ssl-key-location", certs.resolve("server.key").toString(),
                "--ssl-truststore-location", certs.resolve("ca.pem").toString(),
                "--ssl-client-auth", "required",
                "--ssl-principal-mapping-rules", "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT",
                "--group-initial-rebalance-delay-ms", StrataExtension.GROUP_DELAY_MS), Map.of())).start();
        KafkaTool.ok(TOOL_TIMEOUT, null, KafkaTool.CONFIGS, "--bootstrap-server", strata.bootstrap(),
                "--entity-type", "users", "--entity-name", "carol", "--alter", "--add-config",
                "SCRAM-SHA-512=[password=" + PASSWORD + "]");
    }

    static Properties trust(Properties p, String protocol, String ca) {
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, protocol);
        p.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, certs.resolve(ca + ".pem").toString());
        return p;
    }

    static Properties mtls(Properties p, String client) {
        trust(p, "SSL", "ca");
        p.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG, certs.resolve(client + "-keystore.pem").toString());
        return p;
    }

    static Properties scram(Properties p) {
        trust(p, "SASL_SSL", "ca");
        p.put(SaslConfigs.SASL_MECHANISM, "SCRAM-SHA-512");
        p.put(SaslConfigs.SASL_JAAS_CONFIG, "org.apache.kafka.common.security.scram.ScramLoginModule required "
                + "username=\"carol\" password=\"" + PASSWORD + "\";");
        return p;
    }

    static Properties adminProps(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    static String ssl() {
        return "127.0.0.1:" + sslPort;
    }

    static String saslSsl() {
        return "127.0.0.1:" + saslSslPort;
    }

    @Test
    void javaClientsWithACertificateProduceAndConsumeInAGroup() throws Exception {
        String topic = Clients.uniqueTopic("java-mtls");
        try (Admin admin = Admin.create(mtls(adminProps(ssl()), "java"))) {
            Clients.get(admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
            List<Node> nodes = new ArrayList<>(Clients.get(admin.describeCluster().nodes()));
            assertEquals(1, nodes.size());
            assertEquals(sslPort, nodes.get(0).port(), "the SSL listener's own address is advertised on it");
        }
        List<String> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = Clients.producer(mtls(Clients.producerProps(ssl()), "java"))) {
            for (int i = 0; i < 20; i++) {
                String v = "v" + i;
                producer.send(new ProducerRecord<>(topic, i % 2, null, v.getBytes(StandardCharsets.UTF_8))).get();
                sent.add(v);
            }
        }
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                     Clients.consumer(mtls(Clients.consumerProps(ssl(), "g-" + topic), "java"))) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (got.size() < sent.size() && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
            consumer.commitSync();
        }
        assertEquals(sent.stream().sorted().toList(), got.stream().sorted().toList());
        String log = strata.agent().logText();
        assertTrue(log.contains("principal=User:java action=\"topic.create\" resource=\"topic:" + topic + "\""),
                "the topic was created by the certificate's mapped principal");
    }

    @Test
    void javaAdminAuthenticatesWithScramOverTls() throws Exception {
        String topic = Clients.uniqueTopic("java-sasl-ssl");
        try (Admin admin = Admin.create(scram(adminProps(saslSsl())))) {
            Clients.get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
            List<Node> nodes = new ArrayList<>(Clients.get(admin.describeCluster().nodes()));
            assertEquals(saslSslPort, nodes.get(0).port(), "the SASL_SSL listener's own address is advertised on it");
        }
        assertTrue(strata.agent().logText().contains(
                "principal=User:carol action=\"topic.create\" resource=\"topic:" + topic + "\""));
    }

    @Test
    void aCertificateFromAnotherAuthorityIsAnSslAuthenticationException() {
        try (Admin admin = Admin.create(mtls(adminProps(ssl()), "stranger"))) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> admin.describeCluster().nodes().get());
            assertTrue(e.getCause() instanceof SslAuthenticationException, e.toString());
        }
    }
}
