package io.zkgate;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;

/**
 * One Campaign or Acquire stream on one endpoint, from the first message to its end: a
 * monitor thread reads its events, sends keep-alives, runs the silence watchdog while the hold
 * is granted, and decides a loss exactly once (then cancels the stream, which makes the
 * gateway delete the znode). No retry here: {@link HoldLoop} and {@link ZkgateLock} decide
 * what happens after.
 */
final class HoldStream {
    private static final System.Logger LOG = System.getLogger("io.zkgate");
    /** The monotonic clock (ns) the silence watchdog is judged by; tests move it. */
    static volatile LongSupplier clock = System::nanoTime;

    /** Told on the monitor thread, in order: granted at most once, then lost at most once. */
    interface Observer {
        void granted(Leadership hold);

        void lost(Leadership hold, LossReason reason);
    }

    /** Completes when granted, or exceptionally with the status that ended the stream before. */
    final CompletableFuture<Leadership> granted = new CompletableFuture<>();
    /** Completes when the stream is over for us: ended, lost or given up. */
    final CompletableFuture<Void> over = new CompletableFuture<>();

    private final ZkgateClient client;
    private final int endpoint;
    private final HoldSpec spec;
    private final Duration waitTimeout;
    private final Observer observer;
    private final LinkedBlockingQueue<HoldSpec.Event> events = new LinkedBlockingQueue<>();
    private volatile HoldSpec.Sender sender;
    private volatile boolean releasing;
    /** A {@code suspended} heard while queued, not yet followed by {@code resumed} (monitor thread only). */
    private boolean suspendedQueued;
    private volatile boolean queued;
    private volatile String lease;
    private volatile Leadership hold;
    /** When the monitor last heard a message ({@link #clock}): see {@link #silentFor}. */
    private volatile long lastHeard = clock.getAsLong();

    HoldStream(ZkgateClient client, int endpoint, HoldSpec spec, Duration waitTimeout, Observer observer) {
        this.client = client;
        this.endpoint = endpoint;
        this.spec = spec;
        this.waitTimeout = waitTimeout;
        this.observer = observer;
    }

    int endpoint() {
        return endpoint;
    }

    /** Whether the gateway sent {@code queued} (the znode existed). */
    boolean queued() {
        return queued;
    }

    void start() {
        try {
            sender = spec.open(client.channel(endpoint), waitTimeout, events::add);
        } catch (RuntimeException e) {
            events.add(HoldSpec.Event.end(Status.fromThrowable(e)));
        }
        Thread t = new Thread(this::monitor, "zkgate-" + spec.name + "@" + client.endpoints().get(endpoint));
        t.setDaemon(true);
        t.start();
    }

    private void monitor() {
        Duration ttl = spec.ttl();
        // Without a ttl there is nothing to keep alive: a day is "never" and cannot overflow.
        long keepAliveEvery = ttl == null ? TimeUnit.DAYS.toNanos(1) : Math.max(1, ttl.toNanos() / 3);
        long nextKeepAlive = clock.getAsLong() + keepAliveEvery;
        long lastMessage = clock.getAsLong();
        try {
            while (true) {
                long now = clock.getAsLong();
                long wait = nextKeepAlive - now;
                Leadership h = hold;
                if (h != null) {
                    wait = Math.min(wait, lastMessage + h.silenceLimit().toNanos() - now);
                }
                HoldSpec.Event ev = wait <= 0 ? events.poll() : events.poll(wait, TimeUnit.NANOSECONDS);
                now = clock.getAsLong();
                if (h != null && now - lastMessage >= h.silenceLimit().toNanos() && !releasing) {
                    // Timed out, or an event heard after the deadline: a process frozen
                    // (SIGSTOP, a stalled VM) or starved past it finds, when it runs again,
                    // messages that waited in its socket meanwhile, and the queue hands them
                    // over first. Heard late they say nothing about now: the silence came
                    // first and is final (G3b).
                    lose(LossReason.SILENCE);
                    return;
                }
                if (ev == null) {
                    if (ttl != null && now - nextKeepAlive >= 0) {
                        sender.keepAlive();
                        nextKeepAlive = now + keepAliveEvery;
                    }
                    continue;
                }
                lastMessage = now;
                lastHeard = now;
                switch (ev.kind()) {
                    case QUEUED -> {
                        lease = ev.lease();
                        queued = true;
                    }
                    case GRANTED -> {
                        Leadership granted = new Leadership(spec, client.endpoints().get(endpoint), ev, this);
                        hold = granted;
                        if (suspendedQueued && !releasing) {
                            // Granted while the gateway's link is still suspended (no resumed
                            // since the suspended heard while queued): uncertain from its
                            // first moment, so it is lost as it is granted (CONFORMANCE.md).
                            granted.markLost(LossReason.SUSPENDED);
                            try {
                                observer.granted(granted);
                            } catch (RuntimeException e) {
                                LOG.log(System.Logger.Level.WARNING, "zkgate: a granted callback failed", e);
                            }
                            this.granted.complete(granted);
                            lose(LossReason.SUSPENDED);
                            return;
                        }
                        try {
                            observer.granted(granted);
                        } catch (RuntimeException e) {
                            LOG.log(System.Logger.Level.WARNING, "zkgate: a granted callback failed", e);
                        }
                        this.granted.complete(granted);
                    }
                    case SUSPENDED -> {
                        if (hold != null && !releasing) {
                            lose(LossReason.SUSPENDED);
                            return;
                        }
                        suspendedQueued = true;
                    }
                    case END_REQUESTED -> {
                        // A Resign/Release with this hold's lease (contract G3c): told before
                        // anyone else can be granted it; over, as an OK end says (ENDED), and
                        // the stream is ended so the gateway hands it over at once.
                        if (hold != null && !releasing) {
                            lose(LossReason.ENDED);
                            return;
                        }
                    }
                    case RESUMED -> suspendedQueued = false;
                    case END -> {
                        Status s = ev.status();
                        if (hold != null && !releasing) {
                            lose(s.getCode() == Status.Code.UNAVAILABLE ? LossReason.UNAVAILABLE : LossReason.ENDED);
                        } else {
                            granted.completeExceptionally(new StatusRuntimeException(s));
                            over.complete(null);
                        }
                        return;
                    }
                    default -> { }
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.ERROR, "zkgate hold monitor failed", e);
            cancel();
        }
    }

    private void lose(LossReason reason) {
        Leadership h = hold;
        h.markLost(reason);
        sender.cancel();
        LOG.log(System.Logger.Level.INFO, "zkgate: lost {0} on {1}: {2}", spec.name, h.endpoint(), reason.wire());
        try {
            observer.lost(h, reason);
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "zkgate: a loss callback failed", e);
        } finally {
            over.complete(null);
        }
    }

    /**
     * Whether nothing was heard for {@code limit}: the watchdog's deadline has passed. Asked by
     * {@link Leadership#isHeld} too, so that it answers right even before the monitor thread
     * has run again (a process just thawed); the monitor then decides the loss, by silence.
     */
    boolean silentFor(Duration limit) {
        return clock.getAsLong() - lastHeard >= limit.toNanos();
    }

    /** The lease from {@code queued} (the capability for Resign/Release by lease). */
    String lease() {
        return lease;
    }

    /** Sends an in-stream proclaim (elections). */
    void proclaim(byte[] value) {
        sender.proclaim(value);
    }

    /**
     * Gives the hold (or the place in the queue) up: in-stream resign/release, waits up to
     * {@code within} for the gateway to end the stream, then cancels it in any case.
     */
    void release(Duration within) {
        releasing = true;
        HoldSpec.Sender s = sender;
        if (s != null && !over.isDone()) {
            s.release();
            try {
                over.get(within.toMillis(), TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (Exception e) {
                // Timed out: the cancel below deletes the znode.
            }
        }
        cancel();
    }

    /** Cancels the stream without a word: the gateway deletes the znode. */
    void cancel() {
        releasing = true;
        HoldSpec.Sender s = sender;
        if (s != null) {
            s.cancel();
        }
        granted.completeExceptionally(new StatusRuntimeException(Status.CANCELLED.withDescription("given up")));
        over.complete(null);
    }
}
