package io.zkgate;

import io.grpc.Context;
import io.zkgate.v1.ElectionGrpc;
import io.zkgate.v1.ObserveManyRequest;
import io.zkgate.v1.ObserveManyResponse;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.BiConsumer;

/**
 * Watches every election whose name starts with a prefix (elections created later included)
 * plus named ones ({@code ObserveMany}): the listener hears each election's state first
 * ({@link Optional#empty()} while vacant), {@code onSnapshotComplete} runs once after the first
 * state of every election, then the listener hears every change. It reconnects like
 * {@link Observation}; per election it never delivers a lower fencing token than one it
 * delivered nor repeats an unchanged state after a reconnect, and an election that led before a
 * reconnect but is missing from the new snapshot is delivered as vacant. Close it to stop.
 */
public final class ManyObservation implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.zkgate");

    private final ZkgateClient client;
    private final String prefix;
    private final List<String> elections;
    private final BiConsumer<String, Optional<LeaderInfo>> listener;
    private final Runnable onSnapshotComplete;
    private final Thread thread;
    private volatile boolean closed;
    private volatile Context.CancellableContext call;
    // Only the loop's thread touches these.
    private final Map<String, Known> known = new HashMap<>();
    private Set<String> snapshot;
    private boolean completed;

    private static final class Known {
        boolean delivered;
        long highest;
        Optional<LeaderInfo> last = Optional.empty();
    }

    ManyObservation(ZkgateClient client, String prefix, List<String> elections,
            BiConsumer<String, Optional<LeaderInfo>> listener, Runnable onSnapshotComplete) {
        this.client = client;
        this.prefix = prefix;
        this.elections = List.copyOf(elections);
        this.listener = listener;
        this.onSnapshotComplete = onSnapshotComplete;
        this.thread = new Thread(this::loop, "zkgate-observe-many-" + prefix);
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
                    Iterator<ObserveManyResponse> it = ElectionGrpc.newBlockingStub(client.channel(endpoint))
                            .observeMany(ObserveManyRequest.newBuilder().setPrefix(prefix)
                                    .addAllElections(elections).build());
                    snapshot = new HashSet<>();
                    while (it.hasNext()) {
                        ObserveManyResponse r = it.next();
                        backoff.reset();
                        deliver(r);
                    }
                });
            } catch (RuntimeException e) {
                if (!closed) {
                    LOG.log(System.Logger.Level.INFO, "zkgate: observe many {0} on {1} failed: {2}", prefix,
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

    private static boolean same(Optional<LeaderInfo> a, Optional<LeaderInfo> b) {
        if (a.isEmpty() || b.isEmpty()) {
            return a.isEmpty() && b.isEmpty();
        }
        return a.get().fencingToken() == b.get().fencingToken()
                && a.get().candidate().equals(b.get().candidate())
                && java.util.Arrays.equals(a.get().value(), b.get().value());
    }

    private void deliver(ObserveManyResponse r) {
        if (r.hasSnapshotComplete()) {
            if (snapshot != null) {
                for (Map.Entry<String, Known> e : known.entrySet()) {
                    Known k = e.getValue();
                    if (k.last.isPresent() && !snapshot.contains(e.getKey())) {
                        k.last = Optional.empty();
                        listener.accept(e.getKey(), Optional.empty());
                    }
                }
            }
            snapshot = null;
            if (!completed) {
                completed = true;
                onSnapshotComplete.run();
            }
            return;
        }
        if (!r.hasState()) {
            return;
        }
        String name = r.getState().getElection();
        Optional<LeaderInfo> leader = r.getState().hasLeader()
                ? Optional.of(LeaderInfo.of(r.getState().getLeader()))
                : Optional.empty();
        boolean first = snapshot != null && snapshot.add(name);
        Known k = known.computeIfAbsent(name, x -> new Known());
        if (leader.isPresent()) {
            long token = leader.get().fencingToken();
            if (k.delivered && Long.compareUnsigned(token, k.highest) < 0) {
                return; // older than what we already told
            }
        }
        if (first && k.delivered && same(k.last, leader)) {
            return; // a reconnect repeating the same state
        }
        if (leader.isPresent()) {
            k.highest = leader.get().fencingToken();
        }
        k.delivered = true;
        k.last = leader;
        listener.accept(name, leader);
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
