package io.zkgate;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.OptionalLong;
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
    /** The monotonic clock (ns) the silence watchdog and the pings are judged by; tests move it. */
    static volatile LongSupplier clock = System::nanoTime;
    /**
     * The longest the monitor waits (ns) before it reads {@link #clock} again. Tests that move
     * the clock shorten it, so that timers come due as the clock moves, without a message.
     */
    static volatile long pollCap = Long.MAX_VALUE;

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
    /** With a gateway that answers pings: the pings sent and the lease they anchor (monitor thread only). */
    private AnchoredLease pings;
    /** Whether the watchdog runs (granted, with a silence limit), and its {@link #deadline}. */
    private volatile boolean watching;
    /**
     * When the watchdog fires ({@link #clock}): with a gateway that answers pings, the send of
     * the newest answered ping + silence_limit; with an older one, the last message heard +
     * silence_limit.
     */
    private volatile long deadline;

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
        // The ping timer, with a gateway that answers pings (0: off): a waiter pings every third
        // of queued.silence_limit, a holder at once when granted and then every quarter of its
        // grant's silence_limit (CONFORMANCE.md, "The lease on the holder's own clock").
        long pingEvery = 0;
        long nextPing = 0;
        // With an older gateway: the grant's silence limit, restarted by every message heard.
        long hearingLimit = 0;
        try {
            while (true) {
                long now = clock.getAsLong();
                long wait = nextKeepAlive - now;
                if (watching) {
                    wait = Math.min(wait, deadline - now);
                }
                if (pingEvery > 0) {
                    wait = Math.min(wait, nextPing - now);
                }
                wait = Math.min(wait, pollCap);
                HoldSpec.Event ev = wait <= 0 ? events.poll() : events.poll(wait, TimeUnit.NANOSECONDS);
                now = clock.getAsLong();
                if (watching && now - deadline >= 0 && !releasing) {
                    // Timed out, or an event heard after the deadline: a process frozen
                    // (SIGSTOP, a stalled VM) or starved past it finds, when it runs again,
                    // messages that waited in its socket meanwhile, and the queue hands them
                    // over first. Heard late they say nothing about now: the silence came
                    // first and is final (G3b).
                    lose(LossReason.SILENCE);
                    return;
                }
                if (ttl != null && now - nextKeepAlive >= 0) {
                    sender.keepAlive();
                    nextKeepAlive = now + keepAliveEvery;
                }
                if (pingEvery > 0 && now - nextPing >= 0 && !releasing) {
                    ping(now);
                    nextPing = now + pingEvery;
                }
                if (ev == null) {
                    continue;
                }
                if (pings == null && watching) {
                    // An older gateway: every message heard restarts the watchdog.
                    deadline = now + hearingLimit;
                }
                switch (ev.kind()) {
                    case QUEUED -> {
                        lease = ev.lease();
                        queued = true;
                        if (ev.answersPings()) {
                            // The join/acquire was ping 1 (see HoldSpec.Sender#firstSent): from
                            // now on only the grant and answers to pings move the deadline.
                            pings = new AnchoredLease(sender.firstSent());
                            Duration limit = ev.silenceLimit();
                            if (limit != null && limit.toNanos() > 0) {
                                pingEvery = Math.max(1, limit.toNanos() / 3);
                                nextPing = now + pingEvery;
                            }
                        }
                    }
                    case HEARTBEAT -> {
                        if (pings != null && watching) {
                            // heartbeat{seq} answers ping seq; 0 (unsolicited), unknown or
                            // older answers move nothing.
                            OptionalLong moved = pings.answered(ev.seq());
                            if (moved.isPresent() && moved.getAsLong() - deadline > 0) {
                                deadline = moved.getAsLong();
                            }
                        }
                    }
                    case GRANTED -> {
                        Leadership granted = new Leadership(spec, client.endpoints().get(endpoint), ev, this);
                        hold = granted;
                        if (suspendedQueued && !releasing) {
                            // Granted while the gateway's link is still suspended (no resumed
                            // since the suspended heard while queued): uncertain from its
                            // first moment, so it is lost as it is granted (CONFORMANCE.md).
                            loseAtGrant(granted, LossReason.SUSPENDED);
                            return;
                        }
                        Duration limit = ev.silenceLimit();
                        if (pings != null) {
                            // The deadline is the send of the ping the grant names + its limit.
                            OptionalLong until = pings.granted(limit, ev.seq());
                            if (until.isEmpty() || until.getAsLong() - now <= 0) {
                                if (!releasing) {
                                    // It names no ping this stream sent, or its lease ran out
                                    // on its way (a link slower than the limit allows): never
                                    // held, lost as it is granted.
                                    loseAtGrant(granted, LossReason.SILENCE);
                                    return;
                                }
                            } else {
                                deadline = until.getAsLong();
                                watching = true;
                                // Held on a lease: ping now, then every quarter of it.
                                ping(now);
                                pingEvery = Math.max(1, limit.toNanos() / 4);
                                nextPing = now + pingEvery;
                            }
                        } else if (limit != null && limit.toNanos() > 0) {
                            hearingLimit = limit.toNanos();
                            deadline = now + hearingLimit;
                            watching = true;
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

    /** Sends the next ping, its send time recorded as {@code now} (read before the send: earlier is safe). */
    private void ping(long now) {
        long seq = pings.ping(now);
        // A full send buffer (the gateway stopped reading): skipped, the lease simply runs out.
        sender.ping(seq);
    }

    /** A grant that is lost as it is granted: recorded (granted, then lost), then the loss. */
    private void loseAtGrant(Leadership granted, LossReason reason) {
        granted.markLost(reason);
        try {
            observer.granted(granted);
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "zkgate: a granted callback failed", e);
        }
        this.granted.complete(granted);
        lose(reason);
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
     * Whether the watchdog's deadline has passed. Asked by {@link Leadership#isHeld} too, so
     * that it answers right even before the monitor thread has run again (a process just
     * thawed); the monitor then decides the loss, by silence.
     */
    boolean pastDeadline() {
        return watching && clock.getAsLong() - deadline >= 0;
    }

    /** The watchdog's deadline on {@link #clock} (see {@link #deadline}), once it runs. */
    OptionalLong deadline() {
        return watching ? OptionalLong.of(deadline) : OptionalLong.empty();
    }

    /** The lease from {@code queued} (the capability for Resign/Release by lease). */
    String lease() {
        return lease;
    }

    /**
     * Replaces the leader's value: the unary {@code Proclaim} by lease on this stream's gateway
     * (as every zkgate helper does), not an in-stream {@code proclaim}. The gateway reads a
     * stream's messages in order and awaits each in-stream proclaim's ZooKeeper write before the
     * next, so proclaims sent faster than it writes would hold the pings behind them unread and
     * let the lease run out.
     */
    LeaderInfo proclaim(byte[] value) {
        return client.proclaim(endpoint, lease, value);
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
