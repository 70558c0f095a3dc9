package io.zkgate;

import io.grpc.Status;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

/**
 * Run-while-holding, shared by {@link LeaderSelector} and {@link LockSelector}: campaign (or
 * acquire), run the body on its own thread once granted, interrupt it on loss, give the hold
 * up when the body returns, and — with auto-requeue — start over: on the next endpoint after
 * {@code unavailable} or {@code silence}, on the same one otherwise, after the fleet backoff.
 * One thread (the loop's) owns every stream it opens, so closing is one interrupt.
 */
final class HoldLoop implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.zkgate");

    /** What the selector does with a hold. */
    interface Body {
        /** At the moment {@code elected}/{@code acquired} arrives, on the monitor thread. */
        void granted(Leadership hold);

        /** The work, on its own thread; interrupted on loss. */
        void run(Leadership hold) throws Exception;

        /** At the moment the loss is decided, on the monitor thread, before the interrupt. */
        void lost(Leadership hold, LossReason reason);

        /** A refusal retrying would not fix; the loop ends. */
        void failed(ZkgateException error);
    }

    private final ZkgateClient client;
    private final HoldSpec spec;
    private final Body body;
    private final boolean autoRequeue;
    private final Thread thread;
    private final CompletableFuture<Void> finished = new CompletableFuture<>();
    private volatile boolean closed;
    private volatile Thread worker;
    private volatile Leadership current;

    HoldLoop(ZkgateClient client, HoldSpec spec, boolean autoRequeue, Body body) {
        this.client = client;
        this.spec = spec;
        this.autoRequeue = autoRequeue;
        this.body = body;
        this.thread = new Thread(this::loop, "zkgate-loop-" + spec.name);
        this.thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    /** The current hold, if granted and not lost. */
    Leadership current() {
        Leadership l = current;
        return l != null && l.isHeld() ? l : null;
    }

    /** Completes when the loop has ended (closed, a loss without auto-requeue, or a refusal). */
    CompletableFuture<Void> finished() {
        return finished;
    }

    private void loop() {
        Backoff backoff = new Backoff();
        int ep = 0;
        HoldStream stream = null;
        try {
            while (!closed) {
                CompletableFuture<Void> lostOrOver = new CompletableFuture<>();
                stream = new HoldStream(client, ep, spec, null, new HoldStream.Observer() {
                    @Override
                    public void granted(Leadership hold) {
                        current = hold;
                        body.granted(hold);
                    }

                    @Override
                    public void lost(Leadership hold, LossReason reason) {
                        try {
                            body.lost(hold, reason);
                        } finally {
                            Thread w = worker;
                            if (w != null) {
                                w.interrupt();
                            }
                        }
                    }
                });
                stream.over.whenComplete((v, e) -> lostOrOver.complete(null));
                stream.start();
                Leadership hold;
                try {
                    hold = stream.granted.get();
                } catch (ExecutionException e) {
                    Status s = Status.fromThrowable(e.getCause());
                    if (closed) {
                        break;
                    }
                    boolean moveOn = ZkgateClient.retryable(s);
                    if (!moveOn && !ZkgateClient.retryHere(s)) {
                        body.failed(new ZkgateException(s));
                        break;
                    }
                    if (stream.queued()) {
                        backoff.reset();
                    }
                    LOG.log(System.Logger.Level.INFO, "zkgate: {0} on {1} ended before it was granted ({2}); {3}",
                            spec.name, client.endpoints().get(ep), s, moveOn ? "trying the next endpoint" : "again");
                    if (moveOn) {
                        ep = client.next(ep);
                    }
                    backoff.pause();
                    continue;
                }
                backoff.reset();
                CompletableFuture<Void> bodyDone = new CompletableFuture<>();
                Thread w = new Thread(() -> {
                    try {
                        body.run(hold);
                    } catch (InterruptedException e) {
                        // The usual way out: the hold was lost or the selector closed.
                    } catch (Throwable t) {
                        LOG.log(System.Logger.Level.WARNING, "zkgate: the work for " + spec.name + " failed", t);
                    } finally {
                        bodyDone.complete(null);
                    }
                }, "zkgate-work-" + spec.name);
                worker = w;
                w.start();
                if (!hold.isHeld()) {
                    w.interrupt(); // lost before the worker existed
                }
                CompletableFuture.anyOf(lostOrOver, bodyDone).get();
                LossReason reason = hold.lossReason().orElse(null);
                w.interrupt();
                w.join();
                if (reason != null) {
                    // A silence seen by its deadline before the monitor reported it (a process
                    // just thawed): the monitor does at once, cancelling the stream; wait for
                    // that, so its loss callback cannot reach the next hold's worker.
                    lostOrOver.get();
                }
                worker = null;
                if (reason == null) {
                    // The body returned: give the hold up (Curator's relinquish), then requeue.
                    stream.release(client.deadline());
                    if (!autoRequeue) {
                        break;
                    }
                    backoff.pause();
                    continue;
                }
                if (!autoRequeue) {
                    break;
                }
                if (reason.movesOn()) {
                    ep = client.next(ep);
                }
                backoff.pause();
            }
        } catch (InterruptedException e) {
            // close()
        } catch (ExecutionException e) {
            LOG.log(System.Logger.Level.ERROR, "zkgate: selector failed", e);
        } finally {
            Thread w = worker;
            if (w != null) {
                w.interrupt();
                try {
                    w.join(client.deadline().toMillis());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            if (stream != null) {
                // Interrupt status would cut release's wait short: clear it first.
                Thread.interrupted();
                stream.release(client.deadline());
            }
            finished.complete(null);
        }
    }

    /** Interrupts the work, resigns/releases, and waits for the loop to end. */
    @Override
    public void close() {
        closed = true;
        thread.interrupt();
        try {
            finished.get(client.deadline().toMillis() * 2 + 1000, java.util.concurrent.TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (Exception e) {
            // Gave up waiting; the daemon thread finishes on its own.
        }
    }

}
