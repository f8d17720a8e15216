package io.strata.clients;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * One {@code strata agent} process on free loopback ports with its own data dir;
 * restartable (after {@link #kill()}) on the same dir and ports.
 *
 * <p>Environment: {@code STRATA_BIN} (default {@code <repo>/target/debug/strata}, i.e.
 * {@code ../../target/debug/strata} from tests/java), {@code STRATA_READY_TIMEOUT}
 * (seconds, default 60). Other {@code STRATA_*} variables are not passed to the agent,
 * except {@code STRATA_LOG} (its tracing filter) and what {@code extraEnv} sets.
 */
public final class StrataAgent {
    private static final Set<StrataAgent> LIVE = ConcurrentHashMap.newKeySet();
    private static final HttpClient HTTP = HttpClient.newBuilder()
            .connectTimeout(Duration.ofSeconds(1)).build();
    static final int LOG_TAIL_BYTES = 48 * 1024;

    static {
        // Never leave an agent behind, whatever ends the JVM.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (StrataAgent a : LIVE) {
                a.proc.destroyForcibly();
            }
        }, "strata-agent-reaper"));
    }

    public final Path root;
    public final Path dataDir;
    public final Path logPath;
    public final int kafkaPort;
    public final int httpPort;
    private final List<String> extraArgs;
    private final Map<String, String> extraEnv;
    private Process proc;
    private int starts;

    public StrataAgent(Path root, int kafkaPort, int httpPort, List<String> extraArgs,
                       Map<String, String> extraEnv) {
        this.root = root;
        this.dataDir = root.resolve("data");
        this.logPath = root.resolve("strata.log");
        this.kafkaPort = kafkaPort;
        this.httpPort = httpPort;
        this.extraArgs = List.copyOf(extraArgs);
        this.extraEnv = new LinkedHashMap<>(extraEnv);
        try {
            Files.createDirectories(dataDir);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** An agent in a fresh temp dir on two fresh free ports. */
    public static StrataAgent create(String prefix, List<String> extraArgs, Map<String, String> extraEnv) {
        try {
            Path root = Files.createTempDirectory(prefix);
            int[] ports = freePorts(2);
            return new StrataAgent(root, ports[0], ports[1], extraArgs, extraEnv);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static Path binary() {
        String env = System.getenv("STRATA_BIN");
        if (env != null && !env.isEmpty()) {
            return Paths.get(env).toAbsolutePath();
        }
        // Surefire runs in the project's basedir (tests/java).
        Path base = Paths.get(System.getProperty("basedir", ".")).toAbsolutePath();
        return base.resolve("../../target/debug/strata").normalize();
    }

    static Duration readyTimeout() {
        String env = System.getenv("STRATA_READY_TIMEOUT");
        return Duration.ofMillis((long) (Double.parseDouble(env == null ? "60" : env) * 1000));
    }

    // Ports are handed out from below the kernel's ephemeral range (32768 and up on
    // Linux), so no outgoing connection can take one between picking and binding it,
    // and never twice in one JVM. Each JVM starts at its own offset.
    private static final int PORT_FLOOR = 20000;
    private static final int PORT_SPAN = 12000;
    private static int nextPort = PORT_FLOOR + (int) (ProcessHandle.current().pid() * 97 % PORT_SPAN);
    private static final java.util.Set<Integer> HANDED_OUT = new java.util.HashSet<>();

    /** n distinct loopback ports free now, each handed out once per JVM. */
    public static synchronized int[] freePorts(int n) throws IOException {
        int[] out = new int[n];
        int found = 0;
        for (int tries = 0; tries < PORT_SPAN && found < n; tries++) {
            int port = nextPort;
            nextPort = PORT_FLOOR + (nextPort - PORT_FLOOR + 1) % PORT_SPAN;
            if (HANDED_OUT.contains(port)) {
                continue;
            }
            try (ServerSocket s = new ServerSocket()) {
                s.setReuseAddress(true);
                s.bind(new InetSocketAddress("127.0.0.1", port));
            } catch (IOException busy) {
                continue;
            }
            HANDED_OUT.add(port);
            out[found++] = port;
        }
        if (found < n) {
            throw new IOException("no " + n + " free loopback ports below " + (PORT_FLOOR + PORT_SPAN));
        }
        return out;
    }

    public String bootstrap() {
        return "127.0.0.1:" + kafkaPort;
    }

    public String httpUrl() {
        return "http://127.0.0.1:" + httpPort;
    }

    public boolean isRunning() {
        return proc != null && proc.isAlive();
    }

    public long pid() {
        return proc == null ? -1 : proc.pid();
    }

    public List<String> command() {
        List<String> cmd = new ArrayList<>(List.of(
                binary().toString(), "agent",
                "--kafka-listen", bootstrap(),
                "--http-listen", "127.0.0.1:" + httpPort,
                "--data-dir", dataDir.toString()));
        cmd.addAll(extraArgs);
        return cmd;
    }

    /** Starts (or restarts) on the same data dir and ports; waits for /readyz and the Kafka port. */
    public StrataAgent start() {
        if (isRunning()) {
            throw new IllegalStateException("strata is already running (pid " + proc.pid() + ")");
        }
        Path bin = binary();
        if (!Files.isExecutable(bin)) {
            throw new IllegalStateException("strata binary not found at " + bin
                    + "; build it (cargo build) or set STRATA_BIN");
        }
        starts++;
        List<String> cmd = command();
        try {
            Files.writeString(logPath, "\n===== start #" + starts + ": " + String.join(" ", cmd) + "\n",
                    StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            ProcessBuilder pb = new ProcessBuilder(cmd)
                    .redirectInput(ProcessBuilder.Redirect.from(Paths.get("/dev/null").toFile()))
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(logPath.toFile()))
                    .redirectErrorStream(true);
            Map<String, String> env = pb.environment();
            env.keySet().removeIf(k -> k.startsWith("STRATA_") && !k.equals("STRATA_LOG"));
            env.putIfAbsent("RUST_BACKTRACE", "1");
            env.putAll(extraEnv);
            proc = pb.start();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot start " + cmd, e);
        }
        LIVE.add(this);
        waitReady(readyTimeout());
        return this;
    }

    private void waitReady(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        String last = "no attempt yet";
        while (true) {
            if (!proc.isAlive()) {
                LIVE.remove(this);
                throw new AssertionError("strata exited with code " + proc.exitValue()
                        + " before becoming ready\n" + logTail());
            }
            try {
                HttpResponse<Void> r = HTTP.send(
                        HttpRequest.newBuilder(URI.create(httpUrl() + "/readyz"))
                                .timeout(Duration.ofSeconds(1)).GET().build(),
                        HttpResponse.BodyHandlers.discarding());
                if (r.statusCode() == 200 && kafkaPortAccepts()) {
                    return;
                }
                last = "/readyz returned " + r.statusCode();
            } catch (IOException e) {
                last = "/readyz: " + e;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted waiting for strata", e);
            }
            if (System.nanoTime() > deadline) {
                kill();
                throw new AssertionError("strata not ready within " + timeout + " (last: " + last + ")\n"
                        + logTail());
            }
            Wait.pause(Duration.ofMillis(50));
        }
    }

    private boolean kafkaPortAccepts() {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", kafkaPort), 1000);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** SIGKILL ({@link Process#destroyForcibly()}) and wait; no-op if not running. */
    public void kill() {
        if (proc == null) {
            return;
        }
        if (proc.isAlive()) {
            proc.destroyForcibly();
            try {
                if (!proc.waitFor(30, TimeUnit.SECONDS)) {
                    throw new AssertionError("strata (pid " + proc.pid() + ") still alive 30s after SIGKILL");
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        LIVE.remove(this);
    }

    public String logText() {
        try {
            return Files.readString(logPath, StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "<no log: " + e + ">";
        }
    }

    public String logTail() {
        String t = logText();
        if (t.length() > LOG_TAIL_BYTES) {
            t = "<... " + (t.length() - LOG_TAIL_BYTES) + " chars cut ...>\n" + t.substring(t.length() - LOG_TAIL_BYTES);
        }
        return "----- strata log (" + logPath + ") -----\n" + t;
    }

    /** Deletes the agent's temp dir (the agent must be stopped). */
    public void deleteFiles() {
        Files2.deleteTree(root);
    }

    /** Whether {@code strata agent --help} lists a flag (for flags newer than some binaries). */
    public static boolean agentHasFlag(String flag) {
        try {
            Process p = new ProcessBuilder(binary().toString(), "agent", "--help")
                    .redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            p.waitFor(30, TimeUnit.SECONDS);
            return out.contains(flag);
        } catch (IOException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    @Override
    public String toString() {
        return "strata agent " + bootstrap() + " (" + root + ")";
    }
}
