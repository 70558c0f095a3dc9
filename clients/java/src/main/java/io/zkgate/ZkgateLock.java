package io.zkgate;

import io.grpc.Status;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.function.BiConsumer;

/**
 * A distributed lock in the style of Apache Curator's {@code InterProcessMutex}: a mutex, one
 * permit of a semaphore, or one side of a read-write lock, optionally with a ttl that the lock
 * keeps alive on its own (a {@code keep_alive} every ttl / 3).
 *
 * <pre>{@code
 * try (ZkgateLock lock = client.lock("nightly-report").acquire()) {
 *     writeReport(lock.fencingToken());
 * }
 * }</pre>
 *
 * <p>{@link #acquire()} and {@link #tryAcquire(Duration)} fail over to the next gateway when one
 * is unavailable; once held, the lock is not re-acquired by itself (use {@link LockSelector} for
 * that). A held lock can still be lost — {@code suspended}, silence past {@code silence_limit},
 * the stream failing — and then {@link #isHeld()} turns false and the {@link #onLoss} callback
 * runs: stop the work it protects. {@link #close()} (or {@link #release()}) gives it up; the
 * object can then acquire again. One hold at a time per object; not reentrant.
 */
public final class ZkgateLock implements AutoCloseable {
    private final ZkgateClient client;
    private final String name;
    private final String owner;
    private final int permits;
    private final LockMode mode;
    private final Duration ttl;
    private volatile BiConsumer<Leadership, LossReason> onLoss = (h, r) -> { };
    private HoldStream stream;
    private Leadership hold;

    ZkgateLock(ZkgateClient client, String name, String owner, int permits, LockMode mode, Duration ttl) {
        this.client = client;
        this.name = name;
        this.owner = owner;
        this.permits = permits;
        this.mode = mode;
        this.ttl = ttl;
    }

    /** The same lock held under another owner id (shown by {@code Holders}). */
    public ZkgateLock withOwner(String owner) {
        return new ZkgateLock(client, name, owner, permits, mode, ttl);
    }

    /**
     * The same lock with a lease ttl: the gateway releases it unless it hears a keep-alive
     * within each ttl, so a client that stops (but keeps its connection) loses the lock. This
     * object sends the keep-alives while it holds the lock.
     */
    public ZkgateLock withTtl(Duration ttl) {
        return new ZkgateLock(client, name, owner, permits, mode, ttl);
    }

    /** Runs on the stream's thread, once, when a held lock is lost. Keep it short. */
    public ZkgateLock onLoss(BiConsumer<Leadership, LossReason> callback) {
        this.onLoss = callback;
        return this;
    }

    HoldSpec spec() {
        return new HoldSpec.LockRequest(name, owner, permits, mode, ttl);
    }

    public String name() {
        return name;
    }

    /** Blocks until held. Throws {@link ZkgateException} on a refusal (a permits mismatch, say). */
    public ZkgateLock acquire() throws InterruptedException {
        if (!acquireWithin(null)) {
            throw new IllegalStateException("unreachable: an unbounded acquire returned without the lock");
        }
        return this;
    }

    /**
     * Tries for up to {@code timeout} ({@link Duration#ZERO}: once, right now); returns whether
     * it holds the lock.
     */
    public boolean tryAcquire(Duration timeout) throws InterruptedException {
        return acquireWithin(timeout);
    }

    private boolean acquireWithin(Duration timeout) throws InterruptedException {
        synchronized (this) {
            if (hold != null && hold.isHeld()) {
                throw new IllegalStateException("lock " + name + " is already held by this object");
            }
        }
        long deadline = timeout == null ? Long.MAX_VALUE : System.nanoTime() + timeout.toNanos();
        Backoff backoff = new Backoff();
        int ep = client.preferred();
        int attempts = 0;
        while (true) {
            Duration wait = null;
            if (timeout != null) {
                wait = Duration.ofNanos(Math.max(0, deadline - System.nanoTime()));
            }
            HoldStream s = new HoldStream(client, ep, spec(), wait, new HoldStream.Observer() {
                @Override
                public void granted(Leadership h) { }

                @Override
                public void lost(Leadership h, LossReason reason) {
                    onLoss.accept(h, reason);
                }
            });
            attempts++;
            s.start();
            try {
                Leadership h = s.granted.get();
                synchronized (this) {
                    stream = s;
                    hold = h;
                }
                return true;
            } catch (InterruptedException e) {
                s.cancel();
                throw e;
            } catch (ExecutionException e) {
                Status st = Status.fromThrowable(e.getCause());
                if (st.getCode() == Status.Code.DEADLINE_EXCEEDED) {
                    return false;
                }
                boolean moveOn = ZkgateClient.retryable(st);
                if (!moveOn && !ZkgateClient.retryHere(st)) {
                    throw new ZkgateException(st);
                }
                if (s.queued()) {
                    backoff.reset();
                }
                boolean timeLeft = System.nanoTime() < deadline;
                if (!timeLeft && attempts >= client.endpoints().size()) {
                    return false;
                }
                if (moveOn) {
                    ep = client.next(ep);
                }
                backoff.pause();
            }
        }
    }

    /** Whether this object holds the lock right now (acquired, not lost, not released). */
    public synchronized boolean isHeld() {
        return hold != null && hold.isHeld();
    }

    /** The current (or last) hold. */
    public synchronized Optional<Leadership> hold() {
        return Optional.ofNullable(hold);
    }

    /** The fencing token of the current hold; throws {@link IllegalStateException} when not held. */
    public synchronized long fencingToken() {
        if (hold == null) {
            throw new IllegalStateException("lock " + name + " is not held");
        }
        return hold.fencingToken();
    }

    /** Gives the lock up (in-stream release, then cancel). Nothing happens when not held. */
    public void release() {
        HoldStream s;
        synchronized (this) {
            s = stream;
            stream = null;
        }
        if (s != null) {
            s.release(client.deadline());
        }
    }

    /** {@link #release()}. */
    @Override
    public void close() {
        release();
    }
}
