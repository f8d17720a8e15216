package io.strata.clients;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestWatcher;

/**
 * The shared fixture: agents started before a test class's first test and SIGKILLed
 * after its last. A failing test gets each agent's log tail printed; the temp dirs of a
 * class with a failure (or of every class with {@code STRATA_KEEP_DATA=1}) are kept and
 * their paths printed.
 *
 * <pre>
 *   &#64;RegisterExtension
 *   static final StrataExtension strata = StrataExtension.singleNode();
 * </pre>
 */
public final class StrataExtension implements BeforeAllCallback, AfterAllCallback, TestWatcher {
    /** Kafka's group.initial.rebalance.delay.ms is 3000; the tests use a short one. */
    public static final String GROUP_DELAY_MS = "200";

    private final List<StrataAgent> agents = new ArrayList<>();
    private final List<java.nio.file.Path> extraDirs = new ArrayList<>();
    private final boolean startOne;
    private boolean failed;

    private StrataExtension(boolean startOne) {
        this.startOne = startOne;
    }

    /** One agent (started before the class's first test) with a short group initial
     *  rebalance delay. */
    public static StrataExtension singleNode() {
        return new StrataExtension(true);
    }

    /** No agents started for the class: the tests {@link #add} and start their own. */
    public static StrataExtension manual() {
        return new StrataExtension(false);
    }

    /** Registers an agent (not started) for log reporting and cleanup. */
    public StrataAgent add(StrataAgent a) {
        agents.add(a);
        return a;
    }

    /** Registers a directory to remove with the agents' (e.g. a shared metastore dir). */
    public void addDir(java.nio.file.Path dir) {
        extraDirs.add(dir);
    }

    public StrataAgent agent() {
        return agents.get(0);
    }

    public List<StrataAgent> agents() {
        return agents;
    }

    public String bootstrap() {
        return agent().bootstrap();
    }

    @Override
    public void beforeAll(ExtensionContext context) {
        if (startOne) {
            add(StrataAgent.create("strata-java-",
                    List.of("--group-initial-rebalance-delay-ms", GROUP_DELAY_MS), Map.of())).start();
        }
    }

    @Override
    public void afterAll(ExtensionContext context) {
        for (StrataAgent a : agents) {
            a.kill();
        }
        boolean keep = failed || "1".equals(System.getenv("STRATA_KEEP_DATA"));
        for (StrataAgent a : agents) {
            if (keep) {
                System.out.println("[strata] kept data dir and log of " + context.getDisplayName() + ": " + a.root);
            } else {
                a.deleteFiles();
            }
        }
        for (java.nio.file.Path d : extraDirs) {
            if (keep) {
                System.out.println("[strata] kept " + d);
            } else {
                Files2.deleteTree(d);
            }
        }
    }

    @Override
    public void testFailed(ExtensionContext context, Throwable cause) {
        failed = true;
        System.out.println("[strata] " + context.getDisplayName() + " failed: " + cause);
        for (StrataAgent a : agents) {
            System.out.println(a.logTail());
        }
    }

    @Override
    public void testAborted(ExtensionContext context, Throwable cause) {
        failed = true;
    }

    @Override
    public void testDisabled(ExtensionContext context, Optional<String> reason) {
    }
}
