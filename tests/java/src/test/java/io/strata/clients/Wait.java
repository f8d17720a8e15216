package io.strata.clients;

import java.time.Duration;
import java.util.function.Supplier;

/** Polling with a deadline: the only way these tests wait for a condition. */
public final class Wait {
    private Wait() {
    }

    /** The outcome of one check: done or not, and what was seen (for the failure message). */
    public record Check<T>(boolean done, T value, String seen) {
        public static <T> Check<T> done(T value) {
            return new Check<>(true, value, String.valueOf(value));
        }

        public static <T> Check<T> notYet(String seen) {
            return new Check<>(false, null, seen);
        }
    }

    /** Polls {@code check} every {@code interval} until it is done; fails at the deadline
     *  with {@code what} and the last state seen. An exception thrown by a check counts as
     *  "not yet" (it is shown if the deadline passes). */
    public static <T> T until(Duration timeout, Duration interval, String what, Supplier<Check<T>> check) {
        long deadline = System.nanoTime() + timeout.toNanos();
        String seen = "no check ran";
        while (true) {
            try {
                Check<T> c = check.get();
                if (c.done()) {
                    return c.value();
                }
                seen = c.seen();
            } catch (RuntimeException e) {
                seen = "check threw " + e;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + timeout.toMillis() + " ms waiting for "
                        + what + "; last seen: " + seen);
            }
            pause(interval);
        }
    }

    public static <T> T until(Duration timeout, String what, Supplier<Check<T>> check) {
        return until(timeout, Duration.ofMillis(100), what, check);
    }

    /** Polls a boolean condition; {@code state} describes what is seen when it fails. */
    public static void untilTrue(Duration timeout, String what, Supplier<Boolean> cond, Supplier<String> state) {
        until(timeout, Duration.ofMillis(100), what,
                () -> cond.get() ? Check.done(Boolean.TRUE) : Check.notYet(state.get()));
    }

    /** The interval between two checks of a poll loop (not a way to wait for something). */
    static void pause(Duration d) {
        try {
            Thread.sleep(d.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }
}
