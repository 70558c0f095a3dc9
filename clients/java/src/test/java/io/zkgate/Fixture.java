package io.zkgate;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.BooleanSupplier;

/**
 * The gateways tests/java_client.rs started for us, all on one ZooKeeper and one root:
 * {@code ZKGATE_ADDR} (gateway 1, never disturbed), {@code ZKGATE_ADDR2}/{@code ZKGATE_PID2}
 * (drained by FleetTest) and {@code ZKGATE_ADDR3}/{@code ZKGATE_PID3} (frozen, then killed).
 */
final class Fixture {
    private Fixture() {}

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isBlank()) {
            fail(name + " is not set: run these tests through `cargo test --test java_client`");
        }
        return v;
    }

    static String gw1() {
        return "http://" + env("ZKGATE_ADDR");
    }

    static String gw2() {
        return "http://" + env("ZKGATE_ADDR2");
    }

    static String gw3() {
        return "http://" + env("ZKGATE_ADDR3");
    }

    static ZkgateClient client(String... endpoints) {
        return ZkgateClient.builder().endpoints(String.join(",", endpoints)).deadline(Duration.ofSeconds(3)).build();
    }

    /** A fresh election or lock name per test. */
    static String name(String prefix) {
        return prefix + "-" + Long.toHexString(ThreadLocalRandom.current().nextLong() >>> 16);
    }

    static void signal(String pidVar, String sig) throws Exception {
        Process p = new ProcessBuilder("kill", "-" + sig, env(pidVar)).inheritIO().start();
        assertTrue(p.waitFor() == 0, "kill -" + sig + " " + env(pidVar));
    }

    /** Waits up to {@code within} for {@code cond}; fails with {@code what} if it never holds. */
    static void await(String what, Duration within, BooleanSupplier cond) throws InterruptedException {
        long deadline = System.nanoTime() + within.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out after " + within + " waiting for " + what);
            }
            Thread.sleep(10);
        }
    }

    /**
     * A {@link LeaderSelectorListener} (and lock listener) that records what happened and holds
     * until interrupted.
     */
    static final class Recorder implements LeaderSelectorListener, LockSelector.Listener {
        final String id;
        final List<Leadership> grants = new ArrayList<>();
        final List<LossReason> losses = new ArrayList<>();
        final List<Long> lostAt = new ArrayList<>();
        final List<Long> interruptedAt = new ArrayList<>();
        final List<ZkgateException> failures = new ArrayList<>();
        volatile boolean returnAtOnce;

        Recorder(String id) {
            this.id = id;
        }

        @Override
        public void takeLeadership(Leadership l) throws Exception {
            whileHolding(l);
        }

        @Override
        public void whileHolding(Leadership l) throws Exception {
            if (returnAtOnce) {
                return;
            }
            try {
                Thread.sleep(Long.MAX_VALUE);
            } catch (InterruptedException e) {
                synchronized (this) {
                    interruptedAt.add(System.nanoTime());
                }
                throw e;
            }
        }

        @Override
        public synchronized void elected(Leadership l) {
            grants.add(l);
        }

        @Override
        public void failed(ZkgateException e) {
            synchronized (this) {
                failures.add(e);
            }
        }

        @Override
        public void acquired(Leadership l) {
            elected(l);
        }

        @Override
        public synchronized void lost(Leadership l, LossReason r) {
            losses.add(r);
            lostAt.add(System.nanoTime());
        }

        synchronized int grantCount() {
            return grants.size();
        }

        synchronized Leadership grant(int i) {
            return grants.get(i);
        }

        synchronized int lossCount() {
            return losses.size();
        }

        synchronized int interruptCount() {
            return interruptedAt.size();
        }

        synchronized Optional<Leadership> last() {
            return grants.isEmpty() ? Optional.empty() : Optional.of(grants.get(grants.size() - 1));
        }
    }
}
