package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.Signature;
import java.security.interfaces.RSAPublicKey;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;

import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** SASL/OAUTHBEARER with the Java client: a login callback handler hands the client RS256
 *  JWTs signed here, which the agent validates against the JWKS file written here; the
 *  producer, a group consumer and the admin client work with a good token, and an
 *  expired one is a SaslAuthenticationException naming the reason. */
class OAuthTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    static final String ISSUER = "https://idp.strata.test";
    static KeyPair key;
    static int saslPort;

    @BeforeAll
    static void start() throws Exception {
        KeyPairGenerator g = KeyPairGenerator.getInstance("RSA");
        g.initialize(2048);
        key = g.generateKeyPair();
        RSAPublicKey pub = (RSAPublicKey) key.getPublic();
        Path jwks = Files.createTempFile("strata-java-jwks-", ".json");
        Files.writeString(jwks, "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"java-1\",\"alg\":\"RS256\",\"n\":\""
                + b64(unsigned(pub.getModulus())) + "\",\"e\":\"" + b64(unsigned(pub.getPublicExponent())) + "\"}]}");
        saslPort = StrataAgent.freePorts(1)[0];
        strata.add(StrataAgent.create("strata-java-oauth-", List.of(
                "--listeners", "SASL_PLAINTEXT://127.0.0.1:" + saslPort,
                "--sasl-enabled-mechanisms", "OAUTHBEARER",
                "--sasl-oauthbearer-jwks-location", jwks.toString(),
                "--sasl-oauthbearer-expected-issuer", ISSUER,
                "--sasl-oauthbearer-expected-audience", "strata",
                "--connection-failed-authentication-delay-ms", "10",
                "--group-initial-rebalance-delay-ms", StrataExtension.GROUP_DELAY_MS), Map.of())).start();
    }

    static String b64(byte[] b) {
        return Base64.getUrlEncoder().withoutPadding().encodeToString(b);
    }

    static byte[] unsigned(BigInteger n) {
        byte[] b = n.toByteArray();
        return b[0] == 0 ? java.util.Arrays.copyOfRange(b, 1, b.length) : b;
    }

    /** An RS256 JWT for {@code sub} expiring {@code lifetimeSeconds} from now. */
    static String jwt(String sub, long lifetimeSeconds) throws Exception {
        long now = System.currentTimeMillis() / 1000;
        String header = b64("{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"java-1\"}".getBytes(StandardCharsets.UTF_8));
        String claims = b64(("{\"iss\":\"" + ISSUER + "\",\"aud\":\"strata\",\"sub\":\"" + sub + "\",\"iat\":" + now
                + ",\"exp\":" + (now + lifetimeSeconds) + "}").getBytes(StandardCharsets.UTF_8));
        Signature s = Signature.getInstance("SHA256withRSA");
        s.initSign(key.getPrivate());
        s.update((header + "." + claims).getBytes(StandardCharsets.US_ASCII));
        return header + "." + claims + "." + b64(s.sign());
    }

    /** The client's login callback: a token for the principal and lifetime in its JAAS options. */
    public static class TokenHandler implements AuthenticateCallbackHandler {
        private String sub;
        private long lifetime;

        @Override
        public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> jaas) {
            Map<String, ?> options = jaas.get(0).getOptions();
            sub = (String) options.get("sub");
            lifetime = Long.parseLong((String) options.get("lifetimeSeconds"));
        }

        @Override
        public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
            for (Callback c : callbacks) {
                if (!(c instanceof OAuthBearerTokenCallback t)) {
                    throw new UnsupportedCallbackException(c);
                }
                try {
                    String value = jwt(sub, lifetime);
                    long now = System.currentTimeMillis();
                    t.token(new OAuthBearerToken() {
                        public String value() { return value; }
                        public Set<String> scope() { return Set.of(); }
                        public long lifetimeMs() { return now + lifetime * 1000; }
                        public String principalName() { return sub; }
                        public Long startTimeMs() { return now; }
                    });
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }
        }

        @Override
        public void close() {}
    }

    static Properties oauth(Properties p, String sub, long lifetimeSeconds) {
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        p.put(SaslConfigs.SASL_MECHANISM, "OAUTHBEARER");
        p.put(SaslConfigs.SASL_LOGIN_CALLBACK_HANDLER_CLASS, TokenHandler.class.getName());
        p.put(SaslConfigs.SASL_JAAS_CONFIG, "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                + "sub=\"" + sub + "\" lifetimeSeconds=\"" + lifetimeSeconds + "\";");
        return p;
    }

    static Admin admin(String sub, long lifetimeSeconds) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, sasl());
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(oauth(p, sub, lifetimeSeconds));
    }

    static String sasl() {
        return "127.0.0.1:" + saslPort;
    }

    @Test
    void javaClientsAuthenticateWithATokenAndUseAGroup() throws Exception {
        String topic = Clients.uniqueTopic("java-oauth");
        try (Admin admin = admin("svc-java", 300)) {
            Clients.get(admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
        }
        assertTrue(strata.agent().logText().contains(
                "principal=User:svc-java action=\"topic.create\" resource=\"topic:" + topic + "\""),
                "the topic was created by the token's subject");
        List<String> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer =
                     Clients.producer(oauth(Clients.producerProps(sasl()), "svc-producer", 300))) {
            for (int i = 0; i < 20; i++) {
                String v = "v" + i;
                producer.send(new ProducerRecord<>(topic, i % 2, null, v.getBytes(StandardCharsets.UTF_8))).get();
                sent.add(v);
            }
        }
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                     Clients.consumer(oauth(Clients.consumerProps(sasl(), "g-" + topic), "svc-consumer", 300))) {
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
    }

    @Test
    void anExpiredTokenIsASaslAuthenticationExceptionWithTheReason() {
        try (Admin admin = admin("svc-late", -120)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> admin.describeCluster().nodes().get());
            assertInstanceOf(SaslAuthenticationException.class, e.getCause(), e.toString());
            assertTrue(e.getCause().getMessage().contains("expired"), e.getCause().getMessage());
        }
    }
}
