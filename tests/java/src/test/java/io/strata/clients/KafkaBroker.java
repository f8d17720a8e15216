package io.strata.clients;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.Uuid;

/**
 * One Apache Kafka 4.1 broker (the reference DifferentialTest compares strata with): a
 * single child JVM in KRaft combined mode ({@code process.roles=broker,controller},
 * node 1), a PLAINTEXT listener and a CONTROLLER listener on free loopback ports, its
 * log dir in a temp dir, formatted first with {@code kafka.tools.StorageTool format
 * --standalone} (what {@code kafka-storage.sh format} runs).
 *
 * <p>The broker's jars: the test classpath (kafka-clients, kafka-tools and with them
 * kafka-server, kafka-metadata, kafka-raft, ...) plus the jars the pom copies to
 * {@code target/kafka-broker-lib} (kafka_2.13 and Scala), which the test JVM itself
 * does not load. Logs (log4j2.xml of the test resources: WARN and up) go to
 * {@code <root>/kafka.log}.
 */
public final class KafkaBroker {
    private static final Set<KafkaBroker> LIVE = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (KafkaBroker b : LIVE) {
                b.proc.destroyForcibly();
            }
        }, "kafka-broker-reaper"));
    }

    public final Path root;
    public final Path logPath;
    public final int port;
    public final int controllerPort;
    private Process proc;

    private KafkaBroker(Path root, int port, int controllerPort) {
        this.root = root;
        this.logPath = root.resolve("kafka.log");
        this.port = port;
        this.controllerPort = controllerPort;
    }

    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    static Path libDir() {
        String p = System.getProperty("strata.kafkaBrokerLib");
        if (p != null && !p.isEmpty()) {
            return Paths.get(p);
        }
        return Paths.get(System.getProperty("basedir", ".")).toAbsolutePath().resolve("target/kafka-broker-lib");
    }

    static String classpath() {
        Path lib = libDir();
        List<String> cp = new ArrayList<>();
        cp.add(System.getProperty("java.class.path"));
        try (Stream<Path> jars = Files.list(lib)) {
            jars.filter(j -> j.toString().endsWith(".jar")).sorted().forEach(j -> cp.add(j.toString()));
        } catch (IOException e) {
            throw new UncheckedIOException("no Kafka broker jars in " + lib
                    + " (the pom's maven-dependency-plugin copies them there: run through Maven)", e);
        }
        if (cp.stream().noneMatch(j -> j.contains("kafka_2.13"))) {
            throw new IllegalStateException("kafka_2.13 jar not found in " + lib);
        }
        return String.join(java.io.File.pathSeparator, cp);
    }

    static List<String> javaCommand(String mainClass, String... args) {
        List<String> cmd = new ArrayList<>(List.of(
                Paths.get(System.getProperty("java.home"), "bin", "java").toString(),
                "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true",
                "-cp", classpath(), mainClass));
        cmd.addAll(List.of(args));
        return cmd;
    }

    /** Formats a fresh log dir and starts the broker; returns once it answers Metadata. */
    public static KafkaBroker start(Duration timeout) {
        try {
            Path root = Files.createTempDirectory("kafka-ref-");
            int[] ports = StrataAgent.freePorts(2);
            KafkaBroker b = new KafkaBroker(root, ports[0], ports[1]);
            b.format();
            b.launch();
            b.waitReady(timeout);
            return b;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private Path writeProperties() throws IOException {
        Properties p = new Properties();
        p.setProperty("process.roles", "broker,controller");
        p.setProperty("node.id", "1");
        p.setProperty("listeners", "PLAINTEXT://127.0.0.1:" + port + ",CONTROLLER://127.0.0.1:" + controllerPort);
        p.setProperty("advertised.listeners", "PLAINTEXT://127.0.0.1:" + port);
        p.setProperty("controller.listener.names", "CONTROLLER");
        p.setProperty("inter.broker.listener.name", "PLAINTEXT");
        p.setProperty("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
        p.setProperty("controller.quorum.bootstrap.servers", "127.0.0.1:" + controllerPort);
        p.setProperty("log.dirs", root.resolve("logs").toString());
        p.setProperty("offsets.topic.replication.factor", "1");
        p.setProperty("offsets.topic.num.partitions", "3");
        p.setProperty("transaction.state.log.replication.factor", "1");
        p.setProperty("transaction.state.log.min.isr", "1");
        p.setProperty("share.coordinator.state.topic.replication.factor", "1");
        p.setProperty("share.coordinator.state.topic.min.isr", "1");
        p.setProperty("group.initial.rebalance.delay.ms", StrataExtension.GROUP_DELAY_MS);
        p.setProperty("auto.create.topics.enable", "true");
        p.setProperty("num.partitions", "1");
        Path file = root.resolve("server.properties");
        try (var w = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
            p.store(w, "written by io.strata.clients.KafkaBroker");
        }
        return file;
    }

    private void format() throws IOException {
        Path props = writeProperties();
        List<String> cmd = javaCommand("kafka.tools.StorageTool", "format",
                "-t", Uuid.randomUuid().toString(), "-c", props.toString(), "--standalone");
        Path out = root.resolve("format.log");
        Process p = new ProcessBuilder(cmd)
                .redirectInput(ProcessBuilder.Redirect.from(Paths.get("/dev/null").toFile()))
                .redirectOutput(out.toFile()).redirectErrorStream(true).start();
        try {
            if (!p.waitFor(60, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new AssertionError("kafka-storage format still running after 60 s\n" + Files.readString(out));
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
        if (p.exitValue() != 0) {
            throw new AssertionError("kafka-storage format failed (exit " + p.exitValue() + ")\n" + Files.readString(out));
        }
    }

    private void launch() throws IOException {
        List<String> cmd = javaCommand("kafka.Kafka", root.resolve("server.properties").toString());
        proc = new ProcessBuilder(cmd)
                .redirectInput(ProcessBuilder.Redirect.from(Paths.get("/dev/null").toFile()))
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logPath.toFile()))
                .redirectErrorStream(true).start();
        LIVE.add(this);
    }

    private void waitReady(Duration timeout) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "2000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "3000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "200");
        try (Admin a = Admin.create(p)) {
            Wait.until(timeout, Duration.ofMillis(200), "Kafka at " + bootstrap() + " to answer Metadata", () -> {
                if (!proc.isAlive()) {
                    throw new AssertionError("Kafka exited with code " + proc.exitValue() + "\n" + logTail());
                }
                try {
                    // listTopics is a Metadata request.
                    a.listTopics().names().get(3, TimeUnit.SECONDS);
                    return Wait.Check.done(Boolean.TRUE);
                } catch (Exception e) {
                    return Wait.Check.notYet(e.toString());
                }
            });
        } catch (AssertionError e) {
            kill();
            throw new AssertionError(e.getMessage() + "\n" + logTail(), e);
        }
    }

    public void kill() {
        if (proc != null && proc.isAlive()) {
            proc.destroyForcibly();
            try {
                proc.waitFor(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        LIVE.remove(this);
    }

    public String logTail() {
        String t;
        try {
            t = Files.readString(logPath, StandardCharsets.UTF_8);
        } catch (IOException e) {
            t = "<no log: " + e + ">";
        }
        if (t.length() > StrataAgent.LOG_TAIL_BYTES) {
            t = "<... cut ...>\n" + t.substring(t.length() - StrataAgent.LOG_TAIL_BYTES);
        }
        return "----- Kafka log (" + logPath + ") -----\n" + t;
    }

    public void deleteFiles() {
        Files2.deleteTree(root);
    }

    @Override
    public String toString() {
        return "Apache Kafka " + bootstrap() + " (" + root + ")";
    }
}
