package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreateAclsResult;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** ACL authorization with the Java client and Kafka's own kafka-acls
 *  ({@code org.apache.kafka.tools.AclCommand} in Kafka 4) against one agent started with
 *  {@code --authorizer acl}, a SASL_PLAINTEXT listener and the super users
 *  {@code User:admin} (SCRAM, on the SASL listener) and {@code User:ANONYMOUS} (the
 *  PLAINTEXT listener, through which the SCRAM users are created). kafka-acls runs with
 *  {@code --command-config} authenticating as admin; the Java producer and consumer run
 *  as alice (allowed) and bob (refused with Kafka's exceptions); the Java Admin creates,
 *  describes and deletes bindings. */
class AclsTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.manual();

    /** kafka-acls.sh; in Kafka 4 the tool moved from core (kafka.admin.AclCommand) to tools. */
    static final String ACLS = "org.apache.kafka.tools.AclCommand";
    static final Duration TOOL_TIMEOUT = Duration.ofSeconds(90);
    static final Map<String, String> PASSWORDS = Map.of(
            "admin", "admin-secret", "alice", "alice-secret", "bob", "bob-secret");
    static int saslPort;
    static Path adminConfig;

    @BeforeAll
    static void start() throws Exception {
        try {
            saslPort = StrataAgent.freePorts(1)[0];
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        StrataAgent agent = strata.add(StrataAgent.create("strata-java-acls-", List.of(
                "--listeners", "SASL_PLAINTEXT://127.0.0.1:" + saslPort,
                "--authorizer", "acl",
                "--super-users", "User:admin;User:ANONYMOUS",
                "--group-initial-rebalance-delay-ms", StrataExtension.GROUP_DELAY_MS), Map.of()));
        agent.start();
        List<UserScramCredentialAlteration> users = new ArrayList<>();
        for (Map.Entry<String, String> u : PASSWORDS.entrySet()) {
            users.add(new UserScramCredentialUpsertion(u.getKey(),
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), u.getValue()));
        }
        try (Admin anonymous = Clients.admin(strata.bootstrap())) {
            Clients.get(anonymous.alterUserScramCredentials(users).all());
        }
        adminConfig = agent.root.resolve("admin.properties");
        Files.writeString(adminConfig, "security.protocol=SASL_PLAINTEXT\n"
                + "sasl.mechanism=SCRAM-SHA-512\n"
                + "sasl.jaas.config=" + jaas("admin") + "\n", StandardCharsets.UTF_8);
    }

    static String sasl() {
        return "127.0.0.1:" + saslPort;
    }

    static String jaas(String user) {
        return "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"" + user
                + "\" password=\"" + PASSWORDS.get(user) + "\";";
    }

    static Properties as(Properties p, String user) {
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        p.put(SaslConfigs.SASL_MECHANISM, "SCRAM-SHA-512");
        p.put(SaslConfigs.SASL_JAAS_CONFIG, jaas(user));
        return p;
    }

    static Admin admin(String user) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, sasl());
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(as(p, user));
    }

    static Properties producerProps(String user) {
        Properties p = as(Clients.producerProps(sasl()), user);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        return p;
    }

    /** kafka-acls with --bootstrap-server on the SASL listener and --command-config as admin. */
    static KafkaTool.Result acls(String... args) {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", sasl(),
                "--command-config", adminConfig.toString()));
        all.addAll(List.of(args));
        return KafkaTool.ok(TOOL_TIMEOUT, null, ACLS, all.toArray(new String[0]));
    }

    static final Pattern RESOURCE = Pattern.compile(
            "ResourcePattern\\(resourceType=(\\w+), name=(.*?), patternType=(\\w+)\\)");
    static final Pattern ENTRY = Pattern.compile(
            "\\(principal=(.*?), host=(.*?), operation=(\\w+), permissionType=(\\w+)\\)");

    /** The bindings kafka-acls --list printed, as "TYPE:name:PATTERN principal host OPERATION PERMISSION". */
    static Set<String> listed(KafkaTool.Result r) {
        Set<String> out = new HashSet<>();
        String resource = null;
        for (String line : r.lines()) {
            Matcher m = RESOURCE.matcher(line);
            if (m.find()) {
                resource = m.group(1) + ":" + m.group(2) + ":" + m.group(3);
                continue;
            }
            Matcher e = ENTRY.matcher(line);
            if (e.find()) {
                assertTrue(resource != null, "an entry before any resource\n" + r.describe());
                out.add(resource + " " + e.group(1) + " " + e.group(2) + " " + e.group(3) + " " + e.group(4));
            }
        }
        return out;
    }

    static Set<String> named(Set<String> bindings, String... names) {
        Set<String> wanted = Set.of(names);
        return bindings.stream().filter(b -> wanted.contains(b.split(":")[1]))
                .collect(Collectors.toSet());
    }

    static Set<AclBinding> describe(Admin admin, AclBindingFilter filter) throws ExecutionException {
        return new HashSet<>(Clients.get(admin.describeAcls(filter).values()));
    }

    static AclBinding allow(ResourceType type, String name, PatternType pattern, String principal, AclOperation op) {
        return new AclBinding(new ResourcePattern(type, name, pattern),
                new AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW));
    }

    static List<String> values(List<ConsumerRecord<byte[], byte[]>> records) {
        return records.stream().map(r -> new String(r.value(), StandardCharsets.UTF_8)).collect(Collectors.toList());
    }

    /** Sends each value and waits for its acknowledgement; the first failure's cause is thrown. */
    static void sendAll(String user, String topic, List<String> values, Properties extra) throws Throwable {
        Properties p = producerProps(user);
        p.putAll(extra);
        try (KafkaProducer<byte[], byte[]> producer = Clients.producer(p)) {
            for (String v : values) {
                try {
                    producer.send(new ProducerRecord<>(topic, v.getBytes(StandardCharsets.UTF_8))).get();
                } catch (ExecutionException e) {
                    throw e.getCause();
                }
            }
        }
    }

    /** kafka-acls --add (a topic, a group, a prefixed pattern), --list, --remove --force; the
     *  Java clients as alice are allowed by what it added and refused once it is removed. */
    @Test
    void kafkaAclsAddsListsAndRemovesBindingsThatTheClientsObey() throws Throwable {
        String topic = Clients.uniqueTopic("java-acl-tool");
        String group = Clients.uniqueTopic("java-acl-tool-group");
        String prefix = Clients.uniqueTopic("java-acl-pfx") + "-";
        String prefixed = prefix + "orders";
        Clients.createTopic(strata.bootstrap(), topic, 1);
        Clients.createTopic(strata.bootstrap(), prefixed, 1);

        acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write",
                "--topic", topic);
        acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", group);
        acls("--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", prefix,
                "--resource-pattern-type", "prefixed");

        KafkaTool.Result list = acls("--list");
        assertEquals(Set.of(
                "TOPIC:" + topic + ":LITERAL User:alice * READ ALLOW",
                "TOPIC:" + topic + ":LITERAL User:alice * WRITE ALLOW",
                "GROUP:" + group + ":LITERAL User:alice * READ ALLOW",
                "TOPIC:" + prefix + ":PREFIXED User:alice * WRITE ALLOW"),
                named(listed(list), topic, group, prefix), list.describe());
        KafkaTool.Result one = acls("--list", "--topic", topic);
        assertEquals(Set.of(
                "TOPIC:" + topic + ":LITERAL User:alice * READ ALLOW",
                "TOPIC:" + topic + ":LITERAL User:alice * WRITE ALLOW"), listed(one), one.describe());
        KafkaTool.Result matching = acls("--list", "--topic", prefixed, "--resource-pattern-type", "match");
        assertEquals(Set.of("TOPIC:" + prefix + ":PREFIXED User:alice * WRITE ALLOW"), listed(matching),
                matching.describe());

        // alice writes both topics (idempotent: InitProducerId allowed by WRITE on a topic)
        // and reads hers in the group.
        sendAll("alice", topic, List.of("a0", "a1", "a2"), new Properties());
        sendAll("alice", prefixed, List.of("p0"), new Properties());
        Properties cp = as(Clients.consumerProps(sasl(), group), "alice");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = Clients.consumer(cp)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (got.size() < 3 && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    got.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
            consumer.commitSync();
        }
        assertEquals(List.of("a0", "a1", "a2"), got);

        // Her WRITE on the topic removed: READ stays, writing is refused.
        acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic);
        KafkaTool.Result after = acls("--list", "--topic", topic);
        assertEquals(Set.of("TOPIC:" + topic + ":LITERAL User:alice * READ ALLOW"), listed(after), after.describe());
        Properties plain = new Properties();
        plain.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        Wait.until(Duration.ofSeconds(20), "alice refused writing once her WRITE is removed", () -> {
            try {
                sendAll("alice", topic, List.of("refused"), plain);
                return Wait.Check.notYet("the write was acknowledged");
            } catch (TopicAuthorizationException e) {
                return Wait.Check.done(e);
            } catch (Throwable t) {
                return Wait.Check.notYet(t.toString());
            }
        });
        // Everything on the prefixed pattern removed.
        acls("--remove", "--force", "--topic", prefix, "--resource-pattern-type", "prefixed");
        assertEquals(Set.of(), named(listed(acls("--list")), prefix));
        TopicAuthorizationException refused = assertThrows(TopicAuthorizationException.class,
                () -> sendAll("alice", prefixed, List.of("refused"), plain));
        assertTrue(refused.unauthorizedTopics().contains(prefixed), refused.toString());

        assertEquals(List.of("a0", "a1", "a2"),
                values(Clients.readAll(strata.bootstrap(), topic, 1)), "nothing refused was written");
        assertEquals(List.of("p0"), values(Clients.readAll(strata.bootstrap(), prefixed, 1)));
    }

    /** bob may read a topic but not use the group, and may not write: Kafka's exceptions. */
    @Test
    void bobGetsTopicAndGroupAuthorizationExceptions() throws Throwable {
        String topic = Clients.uniqueTopic("java-acl-bob");
        String unseen = Clients.uniqueTopic("java-acl-unseen");
        String group = Clients.uniqueTopic("java-acl-bob-group");
        Clients.createTopic(strata.bootstrap(), topic, 1);
        Clients.createTopic(strata.bootstrap(), unseen, 1);
        try (Admin admin = admin("admin")) {
            Clients.get(admin.createAcls(List.of(
                    allow(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:alice", AclOperation.WRITE),
                    allow(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:bob", AclOperation.READ),
                    allow(ResourceType.GROUP, group, PatternType.LITERAL, "User:alice", AclOperation.READ))).all());
        }
        sendAll("alice", topic, List.of("x0", "x1"), new Properties());

        // A topic bob may not describe (default, idempotent producer): refused on Metadata.
        TopicAuthorizationException e1 = assertThrows(TopicAuthorizationException.class,
                () -> sendAll("bob", unseen, List.of("b"), new Properties()));
        assertEquals(Set.of(unseen), e1.unauthorizedTopics());
        // A topic he may describe but not write: refused on Produce.
        Properties plain = new Properties();
        plain.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        TopicAuthorizationException e2 = assertThrows(TopicAuthorizationException.class,
                () -> sendAll("bob", topic, List.of("b"), plain));
        assertTrue(e2.unauthorizedTopics().contains(topic), e2.toString());

        // The group: GroupAuthorizationException from poll.
        Properties cp = as(Clients.consumerProps(sasl(), group), "bob");
        try (KafkaConsumer<byte[], byte[]> consumer = Clients.consumer(cp)) {
            consumer.subscribe(List.of(topic));
            GroupAuthorizationException g = assertThrows(GroupAuthorizationException.class, () -> {
                long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
                while (System.nanoTime() < deadline) {
                    consumer.poll(Duration.ofMillis(200));
                }
            });
            assertEquals(group, g.groupId());
        }
        // Without a group he reads it.
        Properties assign = as(Clients.consumerProps(sasl(), null), "bob");
        assertEquals(List.of("x0", "x1"), values(Clients.readAll(sasl(), List.of(new TopicPartition(topic, 0)), assign)));
        assertEquals(List.of("x0", "x1"), values(Clients.readAll(strata.bootstrap(), topic, 1)),
                "nothing of bob's was written");
    }

    /** The Java Admin: createAcls (an invalid binding refused, the others created),
     *  describeAcls with filters, deleteAcls; a non-admin gets ClusterAuthorizationException. */
    @Test
    void adminCreatesDescribesAndDeletesAcls() throws Exception {
        String topic = Clients.uniqueTopic("java-acl-admin");
        String prefix = topic.substring(0, 12);
        AclBinding literal = allow(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:carol", AclOperation.READ);
        AclBinding prefixed = allow(ResourceType.TOPIC, prefix, PatternType.PREFIXED, "User:carol", AclOperation.WRITE);
        AclBinding cluster = allow(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:carol",
                AclOperation.IDEMPOTENT_WRITE);
        AclBinding wrongCluster = allow(ResourceType.CLUSTER, "my-cluster", PatternType.LITERAL, "User:carol",
                AclOperation.ALTER);
        AclBindingFilter carols = new AclBindingFilter(ResourcePatternFilter.ANY,
                new AccessControlEntryFilter("User:carol", null, AclOperation.ANY, AclPermissionType.ANY));
        try (Admin admin = admin("admin"); Admin bob = admin("bob")) {
            CreateAclsResult created = admin.createAcls(List.of(literal, wrongCluster, prefixed, cluster));
            assertInstanceOf(InvalidRequestException.class, Clients.failure(created.values().get(wrongCluster)));
            Clients.get(created.values().get(literal));
            Clients.get(created.values().get(prefixed));
            Clients.get(created.values().get(cluster));

            assertEquals(Set.of(literal, prefixed, cluster), describe(admin, carols));
            assertEquals(Set.of(literal, prefixed), describe(admin, new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH),
                    AccessControlEntryFilter.ANY)));
            assertEquals(Set.of(prefixed), describe(admin, new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, null, PatternType.PREFIXED),
                    new AccessControlEntryFilter("User:carol", null, AclOperation.ANY, AclPermissionType.ANY))));
            assertEquals(Set.of(cluster), describe(admin, new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.CLUSTER, null, PatternType.ANY),
                    new AccessControlEntryFilter("User:carol", null, AclOperation.ANY, AclPermissionType.ANY))));

            AclBinding bobs = allow(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:bob", AclOperation.ALL);
            assertInstanceOf(ClusterAuthorizationException.class,
                    Clients.failure(bob.createAcls(List.of(bobs)).all()));
            assertInstanceOf(ClusterAuthorizationException.class, Clients.failure(bob.describeAcls(carols).values()));
            assertInstanceOf(ClusterAuthorizationException.class,
                    Clients.failure(bob.deleteAcls(List.of(carols)).all()));
            assertEquals(Set.of(literal, prefixed, cluster), describe(admin, carols));

            AclBindingFilter topicsOfCarol = new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, null, PatternType.ANY),
                    new AccessControlEntryFilter("User:carol", null, AclOperation.ANY, AclPermissionType.ANY));
            assertEquals(Set.of(literal, prefixed),
                    new HashSet<>(Clients.get(admin.deleteAcls(List.of(topicsOfCarol)).all())));
            assertEquals(Set.of(cluster), describe(admin, carols));
            assertEquals(Set.of(cluster), new HashSet<>(Clients.get(admin.deleteAcls(List.of(carols)).all())));
            assertEquals(Set.of(), describe(admin, carols));
        }
    }
}
