package io.strata.clients;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * Runs one of Kafka's command-line tools ({@code kafka-topics.sh} and friends are thin
 * wrappers around these main classes) in a child JVM on the test classpath, the way
 * the shell scripts do. Child JVMs because the tools end with {@code System.exit}.
 */
public final class KafkaTool {
    public static final String TOPICS = "org.apache.kafka.tools.TopicCommand";
    public static final String CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
    public static final String CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer";
    public static final String CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer";
    public static final String VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer";
    public static final String VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer";
    public static final String TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand";
    /** kafka-configs.sh: still in the broker's jar (Scala), so run with the broker's classpath. */
    public static final String CONFIGS = "kafka.admin.ConfigCommand";

    private KafkaTool() {
    }

    /** What a finished tool left. */
    public record Result(List<String> command, int exitCode, String stdout, String stderr) {
        public List<String> lines() {
            return stdout.isEmpty() ? List.of() : Arrays.asList(stdout.split("\\R"));
        }

        /** For assertion messages. */
        public String describe() {
            return "$ " + String.join(" ", command.subList(command.indexOf("-cp") + 2, command.size()))
                    + "\nexit code " + exitCode + "\n--- stdout ---\n" + stdout + "\n--- stderr ---\n"
                    + (stderr.length() > 20000 ? stderr.substring(stderr.length() - 20000) : stderr);
        }
    }

    static List<String> command(String mainClass, List<String> args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("-Xmx512m");
        cmd.add("-XX:+UseSerialGC");
        cmd.add("-XX:TieredStopAtLevel=1"); // faster start; plenty for these loads
        String level = System.getProperty("strata.clientLogLevel");
        if (level != null) {
            cmd.add("-Dstrata.clientLogLevel=" + level);
        }
        cmd.add("-cp");
        cmd.add(mainClass.startsWith("kafka.") ? KafkaBroker.classpath() : System.getProperty("java.class.path"));
        cmd.add(mainClass);
        cmd.addAll(args);
        return cmd;
    }

    /** Runs the tool to its end (killed and failed after {@code timeout}); {@code stdin} may be null. */
    public static Result run(Duration timeout, String stdin, String mainClass, String... args) {
        List<String> cmd = command(mainClass, List.of(args));
        Path out = null;
        Path err = null;
        try {
            out = Files.createTempFile("kafka-tool-", ".out");
            err = Files.createTempFile("kafka-tool-", ".err");
            ProcessBuilder pb = new ProcessBuilder(cmd)
                    .redirectOutput(out.toFile())
                    .redirectError(err.toFile());
            if (stdin == null) {
                pb.redirectInput(ProcessBuilder.Redirect.from(Paths.get("/dev/null").toFile()));
            }
            Process p = pb.start();
            if (stdin != null) {
                try (OutputStream os = p.getOutputStream()) {
                    os.write(stdin.getBytes(StandardCharsets.UTF_8));
                }
            }
            boolean done = p.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS);
            if (!done) {
                p.destroyForcibly();
                p.waitFor(10, TimeUnit.SECONDS);
            }
            Result r = new Result(cmd, done ? p.exitValue() : -1, Files.readString(out), Files.readString(err));
            if (!done) {
                throw new AssertionError(mainClass + " still running after " + timeout + "; killed\n" + r.describe());
            }
            return r;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        } finally {
            try {
                if (out != null) {
                    Files.deleteIfExists(out);
                }
                if (err != null) {
                    Files.deleteIfExists(err);
                }
            } catch (IOException ignored) {
                // best effort
            }
        }
    }

    /** Like {@link #run} but asserts exit code 0. */
    public static Result ok(Duration timeout, String stdin, String mainClass, String... args) {
        Result r = run(timeout, stdin, mainClass, args);
        if (r.exitCode() != 0) {
            throw new AssertionError(mainClass + " failed\n" + r.describe());
        }
        return r;
    }

    /** A tool running in the background whose stdout lines are handed to a callback as they come. */
    public static final class Background implements AutoCloseable {
        private final List<String> cmd;
        private final Process proc;
        private final Path errFile;
        private final Thread reader;
        private volatile IOException readError;

        Background(List<String> cmd, Consumer<String> onLine) throws IOException {
            this.cmd = cmd;
            this.errFile = Files.createTempFile("kafka-tool-", ".err");
            this.proc = new ProcessBuilder(cmd)
                    .redirectInput(ProcessBuilder.Redirect.from(Paths.get("/dev/null").toFile()))
                    .redirectError(errFile.toFile())
                    .start();
            this.reader = new Thread(() -> {
                try (BufferedReader r = new BufferedReader(
                        new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        onLine.accept(line);
                    }
                } catch (IOException e) {
                    readError = e;
                }
            }, "tool-stdout-" + cmd.get(cmd.indexOf("-cp") + 2));
            reader.setDaemon(true);
            reader.start();
        }

        public boolean isAlive() {
            return proc.isAlive();
        }

        /** Waits for the tool to exit and its stdout to be read; returns the exit code. */
        public int waitFor(Duration timeout) {
            try {
                if (!proc.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                    throw new AssertionError(cmd.get(cmd.indexOf("-cp") + 2) + " still running after "
                            + timeout + "\n--- stderr ---\n" + stderr());
                }
                reader.join(TimeUnit.SECONDS.toMillis(30));
                if (readError != null) {
                    throw new UncheckedIOException(readError);
                }
                return proc.exitValue();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted", e);
            }
        }

        public String stderr() {
            try {
                String s = Files.readString(errFile);
                return s.length() > 20000 ? s.substring(s.length() - 20000) : s;
            } catch (IOException e) {
                return "<" + e + ">";
            }
        }

        @Override
        public void close() {
            if (proc.isAlive()) {
                proc.destroyForcibly();
            }
            try {
                proc.waitFor(10, TimeUnit.SECONDS);
                Files.deleteIfExists(errFile);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (IOException ignored) {
                // best effort
            }
        }
    }

    public static Background start(Consumer<String> onLine, String mainClass, String... args) {
        try {
            return new Background(command(mainClass, List.of(args)), onLine);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
