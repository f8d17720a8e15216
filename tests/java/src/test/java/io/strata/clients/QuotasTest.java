package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.admin.AlterClientQuotasResult;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Client quotas (KIP-546: DescribeClientQuotas and AlterClientQuotas) with Kafka's
 * kafka-configs ({@code kafka.admin.ConfigCommand}, still in Kafka 4.1's core jar) and the
 * Java Admin, and their enforcement (KIP-219: an over-quota Produce answer carries
 * {@code throttle_time_ms} and the client holds its connection back) seen through the Java
 * producer's {@code produce-throttle-time-max}. Quotas are cluster-wide and each test checks
 * every quota the agent holds, so each test starts its own agent.
 */
class QuotasTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    static final Duration TOOL_TIMEOUT = Duration.ofSeconds(90);
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

    static final String USER = ClientQuotaEntity.USER;
    static final String CLIENT_ID = ClientQuotaEntity.CLIENT_ID;
    static final String IP = ClientQuotaEntity.IP;

    static StrataAgent startAgent(String name, String... extraArgs) {
        return strata.add(StrataAgent.create("strata-java-quotas-" + name + "-", List.of(extraArgs), Map.of()))
                .start();
    }

    // ------------------------------------------------------------------ kafka-configs

    static KafkaTool.Result configs(String bootstrap, String... args) {
        return KafkaTool.ok(TOOL_TIMEOUT, null, KafkaTool.CONFIGS, withBootstrap(bootstrap, args));
    }

    /** kafka-configs that must fail (exit code 1). */
    static KafkaTool.Result configsFail(String bootstrap, String... args) {
        KafkaTool.Result r = KafkaTool.run(TOOL_TIMEOUT, null, KafkaTool.CONFIGS, withBootstrap(bootstrap, args));
        assertEquals(1, r.exitCode(), "kafka-configs should fail\n" + r.describe());
        return r;
    }

    static String[] withBootstrap(String bootstrap, String... args) {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", bootstrap));
        all.addAll(List.of(args));
        return all.toArray(new String[0]);
    }

    static final Pattern QUOTA_LINE = Pattern.compile("^Quota configs for (.+) are (.*)$");

    /** The "Quota configs for ENTITY are k=v, k=v" lines of kafka-configs --describe, as
     *  entity -> key -> value (the tool prints a response's values in hash order). */
    static Map<String, Map<String, String>> described(KafkaTool.Result r) {
        Map<String, Map<String, String>> out = new TreeMap<>();
        for (String line : r.lines()) {
            Matcher m = QUOTA_LINE.matcher(line);
            if (!m.matches()) {
                continue;
            }
            Map<String, String> values = new TreeMap<>();
            for (String kv : m.group(2).split(", ")) {
                String[] p = kv.split("=", 2);
                assertEquals(2, p.length, "not key=value: " + kv + "\n" + r.describe());
                values.put(p[0], p[1]);
            }
            assertEquals(null, out.put(m.group(1), values), "entity printed twice\n" + r.describe());
        }
        return out;
    }

    static Map<String, Map<String, String>> describeWithTool(String a, String... entityArgs) {
        List<String> args = new ArrayList<>(List.of("--describe"));
        args.addAll(List.of(entityArgs));
        return described(configs(a, args.toArray(new String[0])));
    }

    static void assertCompleted(KafkaTool.Result r, String line) {
        assertTrue(r.lines().contains(line), "expected \"" + line + "\"\n" + r.describe());
    }

    /** kafka-configs --alter and --describe on clients, users (a name, the default, a user's
     *  client), ips; --delete-config; refusals by the tool and by the broker; the audit log. */
    @Test
    void kafkaConfigsAltersAndDescribesQuotas() throws Exception {
        StrataAgent a = startAgent("tool");
        try {
            kafkaConfigsScenario(a.bootstrap());

            // The audit log: one quota.alter entry per entity changed, refusals with ok=false.
            List<JsonNode> alters = audit(a, "quota.alter");
            JsonNode set = find(alters, "quota:client-id=app", true, e -> e.path("request").path("set")
                    .path("producer_byte_rate").asDouble() == 1048576.0);
            assertEquals(2097152.0, set.path("request").path("set").path("consumer_byte_rate").asDouble(), set.toString());
            find(alters, "quota:user=<default>", true,
                    e -> e.path("request").path("set").path("request_percentage").asDouble() == 50.0);
            find(alters, "quota:ip=127.0.0.9", true,
                    e -> e.path("request").path("set").path("connection_creation_rate").asDouble() == 10.0);
            find(alters, "quota:client-id=app", true,
                    e -> e.path("request").path("set").has("producer_byte_rate")
                            && e.path("request").path("set").get("producer_byte_rate").isNull());
            find(alters, "quota:user=<default>", true,
                    e -> e.path("request").path("set").has("request_percentage")
                            && e.path("request").path("set").get("request_percentage").isNull());
            JsonNode refused = find(alters, "quota:client-id=app", false, e -> true);
            assertTrue(refused.path("outcome").asText().startsWith("INVALID_REQUEST"), refused.toString());
            assertTrue(alters.stream().anyMatch(e -> e.path("ok").asBoolean()
                            && (e.path("resource").asText().equals("quota:user=alice,client-id=app")
                                || e.path("resource").asText().equals("quota:client-id=app,user=alice"))),
                    "an entry for (alice, app): " + alters);
        } finally {
            a.kill();
        }
    }

    /** The kafka-configs steps and what they print (nothing strata-specific in them). */
    static void kafkaConfigsScenario(String bs) {
        assertCompleted(configs(bs, "--alter", "--add-config",
                "producer_byte_rate=1048576,consumer_byte_rate=2097152", "--entity-type", "clients",
                "--entity-name", "app"), "Completed updating config for client app.");
        assertCompleted(configs(bs, "--alter", "--add-config", "request_percentage=50",
                "--entity-type", "users", "--entity-default"),
                "Completed updating default config for users in the cluster.");
        assertCompleted(configs(bs, "--alter", "--add-config", "producer_byte_rate=4096,request_percentage=12.5",
                "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                "--entity-name", "app"), "Completed updating config for user alice.");
        assertCompleted(configs(bs, "--alter", "--add-config", "connection_creation_rate=10",
                "--entity-type", "ips", "--entity-name", "127.0.0.9"),
                "Completed updating config for ip 127.0.0.9.");

        Map<String, String> app = Map.of("producer_byte_rate", "1048576.0", "consumer_byte_rate", "2097152.0");
        Map<String, String> usersDefault = Map.of("request_percentage", "50.0");
        assertEquals(Map.of("client-id 'app'", app),
                describeWithTool(bs, "--entity-type", "clients", "--entity-name", "app"));
        // Every entity of only the user type, the default one included (containsOnly with
        // ofEntityType(user)); alice's quota is on (alice, app), so not here.
        assertEquals(Map.of("the default user-principal", usersDefault),
                describeWithTool(bs, "--entity-type", "users"));
        assertEquals(Map.of("the default user-principal", usersDefault),
                describeWithTool(bs, "--entity-type", "users", "--entity-default"));
        assertEquals(Map.of("user-principal 'alice', client-id 'app'",
                        Map.of("producer_byte_rate", "4096.0", "request_percentage", "12.5")),
                describeWithTool(bs, "--entity-type", "users", "--entity-name", "alice",
                        "--entity-type", "clients", "--entity-name", "app"));
        assertEquals(Map.of("client-id 'app'", app), describeWithTool(bs, "--entity-type", "clients"));
        assertEquals(Map.of(), describeWithTool(bs, "--entity-type", "clients", "--entity-name", "nobody"));
        assertEquals(Map.of(), describeWithTool(bs, "--entity-type", "users", "--entity-name", "alice"),
                "alice alone has no quota");
        Map<String, Map<String, String>> ip = Map.of("ip '127.0.0.9'", Map.of("connection_creation_rate", "10.0"));
        assertEquals(ip, describeWithTool(bs, "--entity-type", "ips", "--entity-name", "127.0.0.9"));
        assertEquals(ip, describeWithTool(bs, "--entity-type", "ips"));

        // --delete-config: the value gone, the other one kept.
        assertCompleted(configs(bs, "--alter", "--delete-config", "producer_byte_rate",
                "--entity-type", "clients", "--entity-name", "app"), "Completed updating config for client app.");
        assertEquals(Map.of("client-id 'app'", Map.of("consumer_byte_rate", "2097152.0")),
                describeWithTool(bs, "--entity-type", "clients", "--entity-name", "app"));
        // The tool checks (by describing) that a key to delete is set.
        KafkaTool.Result notSet = configsFail(bs, "--alter", "--delete-config", "producer_byte_rate",
                "--entity-type", "clients", "--entity-name", "app");
        assertTrue(notSet.stderr().contains("Invalid config(s): producer_byte_rate"), notSet.describe());
        // The default user's only quota deleted: the entity is gone.
        assertCompleted(configs(bs, "--alter", "--delete-config", "request_percentage",
                "--entity-type", "users", "--entity-default"),
                "Completed updating default config for users in the cluster.");
        assertEquals(Map.of(), describeWithTool(bs, "--entity-type", "users", "--entity-default"));
        assertEquals(Map.of(), describeWithTool(bs, "--entity-type", "users"));

        // Refused: an unknown key (by the tool itself, before any request: the Admin API
        // check is in adminAltersAndDescribesQuotasWithFilters) and a fractional byte rate
        // (by the broker: INVALID_REQUEST).
        KafkaTool.Result bogus = configsFail(bs, "--alter", "--add-config", "bogus=1",
                "--entity-type", "clients", "--entity-name", "app");
        assertTrue(bogus.stderr().contains("Only quota configs can be added for 'clients'"), bogus.describe());
        KafkaTool.Result fractional = configsFail(bs, "--alter", "--add-config", "producer_byte_rate=1.5",
                "--entity-type", "clients", "--entity-name", "app");
        assertTrue(fractional.stderr().contains("InvalidRequestException"), fractional.describe());
        assertEquals(Map.of("client-id 'app'", Map.of("consumer_byte_rate", "2097152.0")),
                describeWithTool(bs, "--entity-type", "clients", "--entity-name", "app"),
                "unchanged by the refusals");
    }

    // ------------------------------------------------------------------ the Java Admin

    /** An entity of (type, name) pairs; a null name is the type's default. */
    static ClientQuotaEntity entity(String... typesAndNames) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < typesAndNames.length; i += 2) {
            m.put(typesAndNames[i], typesAndNames[i + 1]);
        }
        return new ClientQuotaEntity(m);
    }

    /** An alteration of (key, value) pairs; a null value removes the key. */
    static ClientQuotaAlteration alteration(ClientQuotaEntity e, Object... keysAndValues) {
        List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            Number v = (Number) keysAndValues[i + 1];
            ops.add(new ClientQuotaAlteration.Op((String) keysAndValues[i], v == null ? null : v.doubleValue()));
        }
        return new ClientQuotaAlteration(e, ops);
    }

    static AlterClientQuotasResult alter(Admin admin, boolean validateOnly, ClientQuotaAlteration... alterations) {
        return admin.alterClientQuotas(List.of(alterations), new AlterClientQuotasOptions().validateOnly(validateOnly));
    }

    static Map<ClientQuotaEntity, Map<String, Double>> describe(Admin admin, ClientQuotaFilter filter)
            throws ExecutionException {
        return Clients.get(admin.describeClientQuotas(filter).entities());
    }

    static Map<ClientQuotaEntity, Map<String, Double>> only(Map<ClientQuotaEntity, Map<String, Double>> all,
                                                            ClientQuotaEntity... entities) {
        Map<ClientQuotaEntity, Map<String, Double>> out = new HashMap<>();
        for (ClientQuotaEntity e : entities) {
            out.put(e, all.get(e));
        }
        return out;
    }

    static ClientQuotaFilterComponent ofEntity(String type, String name) {
        return ClientQuotaFilterComponent.ofEntity(type, name);
    }

    /** alterClientQuotas (set, change and remove in one alteration, remove an absent key,
     *  remove an entity's last key, validateOnly, refusals per entry with INVALID_REQUEST)
     *  and describeClientQuotas with contains/containsOnly filters of each match type. */
    @Test
    void adminAltersAndDescribesQuotasWithFilters() throws Exception {
        StrataAgent a = startAgent("admin");
        try (Admin admin = Clients.admin(a.bootstrap())) {
            adminScenario(admin);

            // Audited: validateOnly as quota.validate, refusals with ok=false.
            find(audit(a, "quota.validate"), "quota:client-id=ghost", true, e -> true);
            List<JsonNode> alters = audit(a, "quota.alter");
            JsonNode refused = find(alters, "quota:client-id=bogus-key", false, e -> true);
            assertTrue(refused.path("outcome").asText().startsWith("INVALID_REQUEST"), refused.toString());
            find(alters, "quota:client-id=fine", true, e -> true);
            find(alters, "quota:ip=<default>", true, e -> e.path("request").path("set")
                    .path("connection_creation_rate").isNull());
        } finally {
            a.kill();
        }
    }

    /** The Admin steps (nothing strata-specific in them). */
    static void adminScenario(Admin admin) throws ExecutionException {
        ClientQuotaEntity client = entity(CLIENT_ID, "app-x");
        ClientQuotaEntity clientDefault = entity(CLIENT_ID, null);
        ClientQuotaEntity alice = entity(USER, "alice");
        ClientQuotaEntity userDefault = entity(USER, null);
        ClientQuotaEntity aliceClient = entity(USER, "alice", CLIENT_ID, "app-x");
        ClientQuotaEntity defaultUserClient = entity(USER, null, CLIENT_ID, "app-x");
        ClientQuotaEntity ip = entity(IP, "127.0.0.2");
        ClientQuotaEntity ipDefault = entity(IP, null);
        Clients.get(alter(admin, false,
                alteration(client, "producer_byte_rate", 1000, "consumer_byte_rate", 2000),
                alteration(clientDefault, "producer_byte_rate", 5000),
                alteration(alice, "request_percentage", 25),
                alteration(userDefault, "consumer_byte_rate", 4000),
                alteration(aliceClient, "producer_byte_rate", 3000),
                alteration(defaultUserClient, "request_percentage", 10.5),
                alteration(ip, "connection_creation_rate", 7),
                alteration(ipDefault, "connection_creation_rate", 100)).all());

        Map<ClientQuotaEntity, Map<String, Double>> all = new HashMap<>();
        all.put(client, Map.of("producer_byte_rate", 1000.0, "consumer_byte_rate", 2000.0));
        all.put(clientDefault, Map.of("producer_byte_rate", 5000.0));
        all.put(alice, Map.of("request_percentage", 25.0));
        all.put(userDefault, Map.of("consumer_byte_rate", 4000.0));
        all.put(aliceClient, Map.of("producer_byte_rate", 3000.0));
        all.put(defaultUserClient, Map.of("request_percentage", 10.5));
        all.put(ip, Map.of("connection_creation_rate", 7.0));
        all.put(ipDefault, Map.of("connection_creation_rate", 100.0));

        assertEquals(all, describe(admin, ClientQuotaFilter.all()));
        assertEquals(Map.of(), describe(admin, ClientQuotaFilter.containsOnly(List.of())));
        // ofEntity
        assertEquals(only(all, client),
                describe(admin, ClientQuotaFilter.containsOnly(List.of(ofEntity(CLIENT_ID, "app-x")))));
        assertEquals(only(all, client, aliceClient, defaultUserClient),
                describe(admin, ClientQuotaFilter.contains(List.of(ofEntity(CLIENT_ID, "app-x")))));
        assertEquals(only(all, alice),
                describe(admin, ClientQuotaFilter.containsOnly(List.of(ofEntity(USER, "alice")))));
        assertEquals(only(all, alice, aliceClient),
                describe(admin, ClientQuotaFilter.contains(List.of(ofEntity(USER, "alice")))));
        assertEquals(Map.of(), describe(admin, ClientQuotaFilter.contains(List.of(ofEntity(USER, "nobody")))));
        assertEquals(only(all, ip), describe(admin, ClientQuotaFilter.containsOnly(List.of(ofEntity(IP, "127.0.0.2")))));
        // ofDefaultEntity
        assertEquals(only(all, userDefault), describe(admin,
                ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofDefaultEntity(USER)))));
        assertEquals(only(all, userDefault, defaultUserClient), describe(admin,
                ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofDefaultEntity(USER)))));
        assertEquals(only(all, clientDefault), describe(admin,
                ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofDefaultEntity(CLIENT_ID)))));
        assertEquals(only(all, ipDefault), describe(admin,
                ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofDefaultEntity(IP)))));
        // ofEntityType: any name of the type, the default included (as in Kafka's
        // ClientQuotasRequestTest and ClientQuotasImage)
        assertEquals(only(all, alice, userDefault), describe(admin,
                ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntityType(USER)))));
        assertEquals(only(all, alice, userDefault, aliceClient, defaultUserClient), describe(admin,
                ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType(USER)))));
        assertEquals(only(all, client, clientDefault), describe(admin,
                ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntityType(CLIENT_ID)))));
        assertEquals(only(all, client, clientDefault, aliceClient, defaultUserClient), describe(admin,
                ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType(CLIENT_ID)))));
        assertEquals(only(all, ip, ipDefault), describe(admin,
                ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntityType(IP)))));
        // two components
        assertEquals(only(all, aliceClient), describe(admin, ClientQuotaFilter.containsOnly(List.of(
                ofEntity(USER, "alice"), ClientQuotaFilterComponent.ofEntityType(CLIENT_ID)))));
        assertEquals(only(all, defaultUserClient), describe(admin, ClientQuotaFilter.containsOnly(List.of(
                ClientQuotaFilterComponent.ofDefaultEntity(USER), ofEntity(CLIENT_ID, "app-x")))));
        assertEquals(only(all, aliceClient, defaultUserClient), describe(admin, ClientQuotaFilter.contains(List.of(
                ClientQuotaFilterComponent.ofEntityType(USER), ClientQuotaFilterComponent.ofEntityType(CLIENT_ID)))));
        // Filters Kafka refuses: ip with user or client-id, a type twice.
        assertInstanceOf(InvalidRequestException.class, Clients.failure(admin.describeClientQuotas(
                ClientQuotaFilter.contains(List.of(ofEntity(IP, "127.0.0.2"), ofEntity(USER, "alice")))).entities()));
        assertInstanceOf(InvalidRequestException.class, Clients.failure(admin.describeClientQuotas(
                ClientQuotaFilter.contains(List.of(ofEntity(USER, "alice"),
                        ClientQuotaFilterComponent.ofDefaultEntity(USER)))).entities()));

        // Change one value and remove another in one alteration; removing an absent key
        // is no error and changes nothing; removing an entity's last key removes it.
        Clients.get(alter(admin, false,
                alteration(client, "producer_byte_rate", 1500, "consumer_byte_rate", null),
                alteration(alice, "producer_byte_rate", null),
                alteration(ipDefault, "connection_creation_rate", null)).all());
        all.put(client, Map.of("producer_byte_rate", 1500.0));
        all.remove(ipDefault);
        assertEquals(all, describe(admin, ClientQuotaFilter.all()));
        assertEquals(Map.of(), describe(admin,
                ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofDefaultEntity(IP)))));

        // validateOnly: checked, answered, not stored.
        ClientQuotaEntity ghost = entity(CLIENT_ID, "ghost");
        Clients.get(alter(admin, true,
                alteration(client, "consumer_byte_rate", 9, "producer_byte_rate", null),
                alteration(ghost, "producer_byte_rate", 1)).all());
        assertEquals(all, describe(admin, ClientQuotaFilter.all()), "validateOnly stored nothing");
        assertInstanceOf(InvalidRequestException.class, Clients.failure(
                alter(admin, true, alteration(ghost, "bogus", 1)).all()), "validateOnly still validates");

        // Refusals, each entry on its own (INVALID_REQUEST); a valid entry in the same
        // request is done.
        ClientQuotaEntity userAndIp = entity(USER, "alice", IP, "127.0.0.2");
        ClientQuotaEntity bogusKey = entity(CLIENT_ID, "bogus-key");
        ClientQuotaEntity ipKeyOnClient = entity(CLIENT_ID, "ip-key");
        ClientQuotaEntity clientKeyOnIp = entity(IP, "127.0.0.3");
        ClientQuotaEntity fractionalLong = entity(CLIENT_ID, "fractional");
        ClientQuotaEntity fractionalInt = entity(IP, "127.0.0.4");
        ClientQuotaEntity zero = entity(USER, "zero");
        ClientQuotaEntity negative = entity(IP, "127.0.0.5");
        ClientQuotaEntity emptyName = entity(USER, "");
        ClientQuotaEntity empty = entity();
        ClientQuotaEntity fine = entity(CLIENT_ID, "fine");
        AlterClientQuotasResult mixed = alter(admin, false,
                alteration(userAndIp, "producer_byte_rate", 100),
                alteration(bogusKey, "bogus", 1),
                alteration(ipKeyOnClient, "connection_creation_rate", 5),
                alteration(clientKeyOnIp, "producer_byte_rate", 100),
                alteration(fractionalLong, "producer_byte_rate", 1.5),
                alteration(fractionalInt, "connection_creation_rate", 2.5),
                alteration(zero, "request_percentage", 0),
                alteration(negative, "connection_creation_rate", -5),
                alteration(emptyName, "producer_byte_rate", 100),
                alteration(empty, "producer_byte_rate", 100),
                alteration(fine, "producer_byte_rate", 42));
        Map<String, ClientQuotaEntity> refusedEntities = new LinkedHashMap<>();
        refusedEntities.put("user+ip", userAndIp);
        refusedEntities.put("unknown key", bogusKey);
        refusedEntities.put("connection_creation_rate on a client id", ipKeyOnClient);
        refusedEntities.put("producer_byte_rate on an ip", clientKeyOnIp);
        refusedEntities.put("fractional producer_byte_rate", fractionalLong);
        refusedEntities.put("fractional connection_creation_rate", fractionalInt);
        refusedEntities.put("request_percentage 0", zero);
        refusedEntities.put("negative connection_creation_rate", negative);
        refusedEntities.put("empty user name", emptyName);
        refusedEntities.put("empty entity", empty);
        for (Map.Entry<String, ClientQuotaEntity> e : refusedEntities.entrySet()) {
            Throwable t = Clients.failure(mixed.values().get(e.getValue()));
            assertInstanceOf(InvalidRequestException.class, t, e.getKey() + ": " + t);
        }
        Clients.get(mixed.values().get(fine));
        all.put(fine, Map.of("producer_byte_rate", 42.0));
        assertEquals(all, describe(admin, ClientQuotaFilter.all()), "only the valid entry stored");
    }

    // ------------------------------------------------------------------ enforcement

    static final int RECORDS = 300;
    static final int RECORD_BYTES = 10 * 1024;

    record Sent(long elapsedMs, double throttleMax, double throttleAvg, List<Long> offsets) {
    }

    static double producerMetric(KafkaProducer<?, ?> p, String name) {
        for (Map.Entry<MetricName, ? extends Metric> e : p.metrics().entrySet()) {
            if (e.getKey().group().equals("producer-metrics") && e.getKey().name().equals(name)) {
                return ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        throw new AssertionError("no producer-metrics " + name + " in " + p.metrics().keySet());
    }

    static byte[] value(String clientId, int i) {
        byte[] v = new byte[RECORD_BYTES];
        Arrays.fill(v, (byte) (i + clientId.length()));
        return v;
    }

    /** ~3 MB as 300 records of 10 KiB with acks=1 under {@code client.id}; each acknowledged. */
    static Sent produce(String bootstrap, String topic, String clientId) throws Exception {
        Properties p = Clients.producerProps(bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ProducerConfig.ACKS_CONFIG, "1");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        try (KafkaProducer<byte[], byte[]> producer = Clients.producer(p)) {
            long start = System.nanoTime();
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                acks.add(producer.send(new ProducerRecord<>(topic, 0,
                        (clientId + "-" + i).getBytes(StandardCharsets.UTF_8), value(clientId, i))));
            }
            producer.flush();
            List<Long> offsets = new ArrayList<>();
            for (Future<RecordMetadata> f : acks) {
                offsets.add(f.get().offset());
            }
            long elapsedMs = (System.nanoTime() - start) / 1_000_000;
            return new Sent(elapsedMs, producerMetric(producer, "produce-throttle-time-max"),
                    producerMetric(producer, "produce-throttle-time-avg"), offsets);
        }
    }

    /** producer_byte_rate=262144 for client id "throttled": a producer under that id
     *  sending ~3 MB is throttled (produce-throttle-time-max > 0: the broker answered with
     *  throttle_time_ms) and everything is delivered; another client id is not throttled. */
    @Test
    void aProducerOverItsByteRateIsThrottled() throws Exception {
        StrataAgent a = startAgent("enforce", "--quota-window-num", "3");
        try (Admin admin = Clients.admin(a.bootstrap())) {
            String topic = Clients.uniqueTopic("java-quota");
            Clients.createTopic(admin, topic, 1, 1, Map.of());
            ClientQuotaEntity throttledId = entity(CLIENT_ID, "throttled");
            Clients.get(alter(admin, false, alteration(throttledId, "producer_byte_rate", 262144)).all());
            assertEquals(Map.of(throttledId, Map.of("producer_byte_rate", 262144.0)),
                    describe(admin, ClientQuotaFilter.all()));

            Sent throttled = produce(a.bootstrap(), topic, "throttled");
            System.out.println("[quotas] client.id=throttled: " + RECORDS + " x " + RECORD_BYTES + " bytes in "
                    + throttled.elapsedMs() + " ms, produce-throttle-time-max " + throttled.throttleMax()
                    + " ms, avg " + throttled.throttleAvg() + " ms");
            assertTrue(throttled.throttleMax() > 0, "the producer over its quota saw throttle_time_ms: " + throttled);
            Sent free = produce(a.bootstrap(), topic, "unthrottled");
            System.out.println("[quotas] client.id=unthrottled: " + free.elapsedMs() + " ms, produce-throttle-time-max "
                    + free.throttleMax());
            assertFalse(free.throttleMax() > 0, "no quota for this client id: " + free);

            List<Long> expected = new ArrayList<>();
            for (long o = 0; o < 2 * RECORDS; o++) {
                expected.add(o);
            }
            List<Long> acked = new ArrayList<>(throttled.offsets());
            acked.addAll(free.offsets());
            assertEquals(expected, acked, "every record acknowledged once, in order");
            List<ConsumerRecord<byte[], byte[]>> read = Clients.readAll(a.bootstrap(), topic, 1);
            assertEquals(2 * RECORDS, read.size());
            for (int i = 0; i < 2 * RECORDS; i++) {
                String clientId = i < RECORDS ? "throttled" : "unthrottled";
                ConsumerRecord<byte[], byte[]> r = read.get(i);
                assertEquals(clientId + "-" + (i % RECORDS), new String(r.key(), StandardCharsets.UTF_8));
                assertArrayEquals(value(clientId, i % RECORDS), r.value(), "value of record " + i);
            }
        } finally {
            a.kill();
        }
    }

    // ------------------------------------------------------------------ audit

    /** This agent's audit entries with {@code action} (GET /v1/audit). */
    static List<JsonNode> audit(StrataAgent a, String action) {
        try {
            HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(a.httpUrl() + "/v1/audit?limit=1000"))
                    .timeout(Duration.ofSeconds(10)).GET().build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, r.statusCode(), r.body());
            List<JsonNode> out = new ArrayList<>();
            for (JsonNode e : JSON.readTree(r.body()).path("entries")) {
                if (e.path("action").asText().equals(action)) {
                    out.add(e);
                }
            }
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }

    /** The entry for {@code resource} with {@code ok} that {@code also} accepts (fails if none). */
    static JsonNode find(List<JsonNode> entries, String resource, boolean ok,
                         java.util.function.Predicate<JsonNode> also) {
        return entries.stream()
                .filter(e -> e.path("resource").asText().equals(resource) && e.path("ok").asBoolean() == ok)
                .filter(also)
                .findFirst()
                .orElseThrow(() -> new AssertionError("no audit entry for " + resource + " with ok=" + ok
                        + " as expected among " + entries.stream().map(JsonNode::toString)
                        .collect(Collectors.joining("\n  ", "\n  ", ""))));
    }
}
