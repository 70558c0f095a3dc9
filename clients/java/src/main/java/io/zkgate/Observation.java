package io.zkgate;

import io.grpc.Context;
import io.zkgate.v1.ElectionGrpc;
import io.zkgate.v1.ObserveRequest;
import io.zkgate.v1.ObserveResponse;
import java.util.Iterator;
import java.util.Optional;
import java.util.function.Consumer;

/**
 * Watches who leads an election ({@code Observe}) and tells a callback: the current state
 * first, then every change; {@link Optional#empty()} while the election is vacant. It
 * reconnects across the fleet's endpoints when a stream fails, and never delivers a fencing
 * token lower than one it already delivered (a reconnect's first message may be older than
 * what was seen). Close it to stop.
 */
public final class Observation implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.zkgate");

    private final ZkgateClient client;
    private final String election;
    private final Consumer<Optional<LeaderInfo>> listener;
    private final Thread thread;
    private volatile boolean closed;
    private volatile Context.CancellableContext call;
    private volatile long highest;
    private volatile boolean delivered;

    Observation(ZkgateClient client, String election, Consumer<Optional<LeaderInfo>> listener) {
        this.client = client;
        this.election = election;
        this.listener = listener;
        this.thread = new Thread(this::loop, "zkgate-observe-" + election);
        this.thread.setDaemon(true);
        this.thread.start();
    }

    private void loop() {
        Backoff backoff = new Backoff();
        int ep = client.preferred();
        while (!closed && !client.isClosed()) {
            Context.CancellableContext ctx = Context.current().withCancellation();
            call = ctx;
            if (closed) {
                ctx.cancel(null);
                break;
            }
            try {
                final int endpoint = ep;
                ctx.run(() -> {
                    Iterator<ObserveResponse> it = ElectionGrpc.newBlockingStub(client.channel(endpoint))
                            .observe(ObserveRequest.newBuilder().setElection(election).build());
                    while (it.hasNext()) {
                        ObserveResponse r = it.next();
                        backoff.reset();
                        deliver(r);
                    }
                });
            } catch (RuntimeException e) {
                if (!closed) {
                    LOG.log(System.Logger.Level.INFO, "zkgate: observe {0} on {1} failed: {2}", election,
                            client.endpoints().get(ep), e.toString());
                }
            } finally {
                ctx.cancel(null);
            }
            if (closed) {
                break;
            }
            ep = client.next(ep);
            try {
                backoff.pause();
            } catch (InterruptedException e) {
                break;
            }
        }
    }

    private void deliver(ObserveResponse r) {
        if (r.hasLeader()) {
            long token = r.getLeader().getFencingToken();
            if (delivered && Long.compareUnsigned(token, highest) < 0) {
                return; // older than what we already told: a reconnect's stale first message
            }
            highest = token;
            delivered = true;
            listener.accept(Optional.of(LeaderInfo.of(r.getLeader())));
        } else {
            listener.accept(Optional.empty());
        }
    }

    /** Stops watching. */
    @Override
    public void close() {
        closed = true;
        Context.CancellableContext c = call;
        if (c != null) {
            c.cancel(null);
        }
        thread.interrupt();
    }
}
