package io.zkgate;

import java.util.concurrent.ThreadLocalRandom;

/**
 * The fleet's retry pause (clients/CONFORMANCE.md): full jitter over a base of 50 ms that
 * doubles per failure up to 2 s, reset once a stream has been {@code queued}. Full jitter
 * spreads a fleet of clients that lost the same gateway instead of sending them back in step.
 */
final class Backoff {
    static final long BASE_MILLIS = 50;
    static final long CAP_MILLIS = 2000;

    private int failures;

    /** The next pause in milliseconds: uniform in [0, min(cap, base * 2^failures)]. */
    synchronized long nextMillis() {
        long ceiling = Math.min(CAP_MILLIS, BASE_MILLIS << Math.min(failures, 16));
        failures++;
        return ThreadLocalRandom.current().nextLong(ceiling + 1);
    }

    synchronized void reset() {
        failures = 0;
    }

    /** Sleeps for the next pause. */
    void pause() throws InterruptedException {
        Thread.sleep(nextMillis());
    }
}
