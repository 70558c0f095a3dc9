package io.zkgate;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * Campaign for an election and run a {@link LeaderSelectorListener} while leading — Apache
 * Curator's {@code LeaderSelector} over zkgate. Auto-requeue is on by default: after a loss or
 * after {@code takeLeadership} returns, the selector campaigns again (on the next gateway after
 * {@code unavailable} or {@code silence}). {@link #close()} interrupts the work and resigns.
 *
 * <pre>{@code
 * try (LeaderSelector s = client.leaderSelector("reports", "worker-1", l -> runReports(l.fencingToken()))) {
 *     s.start();
 *     ...
 * }
 * }</pre>
 */
public final class LeaderSelector implements AutoCloseable {
    private final ZkgateClient client;
    private final String election;
    private final String candidate;
    private final LeaderSelectorListener listener;
    private byte[] value = new byte[0];
    private boolean autoRequeue = true;
    private HoldLoop loop;

    LeaderSelector(ZkgateClient client, String election, String candidate, LeaderSelectorListener listener) {
        this.client = client;
        this.election = election;
        this.candidate = candidate;
        this.listener = listener;
    }

    /** The value leaders publish (Observe, Leader, Candidates show it). Before {@link #start}. */
    public synchronized LeaderSelector value(byte[] value) {
        this.value = value.clone();
        return this;
    }

    /** Campaign again after every loss (the default). Before {@link #start}. */
    public synchronized LeaderSelector autoRequeue() {
        return autoRequeue(true);
    }

    /** With {@code false}, the selector ends after its first leadership ends. Before {@link #start}. */
    public synchronized LeaderSelector autoRequeue(boolean on) {
        this.autoRequeue = on;
        return this;
    }

    /** Joins the election (in the background). Once. */
    public synchronized LeaderSelector start() {
        if (loop != null) {
            throw new IllegalStateException("already started");
        }
        loop = new HoldLoop(client, new HoldSpec.Candidacy(election, candidate, value), autoRequeue,
                new HoldLoop.Body() {
                    @Override
                    public void granted(Leadership hold) {
                        listener.elected(hold);
                    }

                    @Override
                    public void run(Leadership hold) throws Exception {
                        listener.takeLeadership(hold);
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

    /** Whether this candidate leads right now. */
    public boolean hasLeadership() {
        return leadership().isPresent();
    }

    /** The current leadership, if it leads. */
    public Optional<Leadership> leadership() {
        HoldLoop l;
        synchronized (this) {
            l = loop;
        }
        return l == null ? Optional.empty() : Optional.ofNullable(l.current());
    }

    /**
     * Waits until the selector has ended on its own (a loss with auto-requeue off, or a
     * refusal); returns whether it did within {@code timeout}.
     */
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

    /** Interrupts {@code takeLeadership}, resigns (or leaves the queue) and stops. */
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
