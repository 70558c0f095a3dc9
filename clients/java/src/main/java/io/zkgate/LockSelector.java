package io.zkgate;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * Hold a lock (or a permit) and run work while holding it, with the same rules as
 * {@link LeaderSelector}: the work runs on its own thread, is interrupted on loss, and with
 * auto-requeue (the default) the selector acquires again after a loss or after the work
 * returns. For one-shot locking use {@link ZkgateLock}.
 */
public final class LockSelector implements AutoCloseable {
    /** The work of a holder; see {@link LeaderSelectorListener} for the threading rules. */
    @FunctionalInterface
    public interface Listener {
        /** Holder-only work; return to release, stop when interrupted. */
        void whileHolding(Leadership hold) throws Exception;

        /** At the moment {@code acquired} arrives. Keep it short. */
        default void acquired(Leadership hold) {}

        /** Once, at the moment the loss is decided, before the work is interrupted. */
        default void lost(Leadership hold, LossReason reason) {}

        /** A refusal that retrying would not fix: the selector stops. */
        default void failed(ZkgateException error) {}
    }

    private final ZkgateClient client;
    private final ZkgateLock lock;
    private final Listener listener;
    private boolean autoRequeue = true;
    private HoldLoop loop;

    LockSelector(ZkgateClient client, ZkgateLock lock, Listener listener) {
        this.client = client;
        this.lock = lock;
        this.listener = listener;
    }

    /** With {@code false}, the selector ends after its first hold ends. Before {@link #start}. */
    public synchronized LockSelector autoRequeue(boolean on) {
        this.autoRequeue = on;
        return this;
    }

    /** Starts queueing for the lock (in the background). Once. */
    public synchronized LockSelector start() {
        if (loop != null) {
            throw new IllegalStateException("already started");
        }
        loop = new HoldLoop(client, lock.spec(), autoRequeue, new HoldLoop.Body() {
            @Override
            public void granted(Leadership hold) {
                listener.acquired(hold);
            }

            @Override
            public void run(Leadership hold) throws Exception {
                listener.whileHolding(hold);
            }

            @Override
            public void lost(Leadership hold, LossReason reason) {
                listener.lost(hold, reason);
            }

            @Override
            public void failed(ZkgateException error) {
                listener.failed(error);
            }
        });
        loop.start();
        return this;
    }

    /** The current hold, if held. */
    public Optional<Leadership> hold() {
        HoldLoop l;
        synchronized (this) {
            l = loop;
        }
        return l == null ? Optional.empty() : Optional.ofNullable(l.current());
    }

    /** Waits until the selector has ended on its own; returns whether it did within {@code timeout}. */
    public boolean awaitEnd(Duration timeout) throws InterruptedException {
        HoldLoop l;
        synchronized (this) {
            l = loop;
        }
        if (l == null) {
            return true;
        }
        try {
            l.finished().get(timeout.toMillis(), TimeUnit.MILLISECONDS);
            return true;
        } catch (java.util.concurrent.TimeoutException e) {
            return false;
        } catch (java.util.concurrent.ExecutionException e) {
            return true;
        }
    }

    /** Interrupts the work, releases (or leaves the queue) and stops. */
    @Override
    public void close() {
        HoldLoop l;
        synchronized (this) {
            l = loop;
        }
        if (l != null) {
            l.close();
        }
    }
}
