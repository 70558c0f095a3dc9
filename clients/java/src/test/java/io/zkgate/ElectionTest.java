package io.zkgate;

import static io.zkgate.Fixture.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Elections on gateway 1: order, handover on close, resign by lease, Leader, Validate, Observe. */
class ElectionTest {
    static final Duration WAIT = Duration.ofSeconds(10);
    static ZkgateClient client;

    @BeforeAll
    static void connect() {
        client = Fixture.client(Fixture.gw1());
    }

    @AfterAll
    static void disconnect() {
        client.close();
    }

    @Test
    void candidatesLeadInJoinOrderWithRisingTokens() throws Exception {
        String e = Fixture.name("order");
        List<Fixture.Recorder> recs = new ArrayList<>();
        List<LeaderSelector> sels = new ArrayList<>();
        try {
            for (String id : List.of("a", "b", "c")) {
                Fixture.Recorder r = new Fixture.Recorder(id);
                recs.add(r);
                sels.add(client.leaderSelector(e, id, r).start());
                int n = recs.size();
                // The next one joins only after this one is in the queue, so join order is known.
                await(id + " queued", WAIT, () -> client.candidates(e).getTotal() == n);
            }
            await("a elected", WAIT, () -> recs.get(0).grantCount() == 1);
            assertEquals(Optional.of("a"), client.leader(e).map(LeaderInfo::candidate));
            assertTrue(sels.get(0).hasLeadership());
            assertFalse(sels.get(1).hasLeadership());
            long previous = recs.get(0).grant(0).fencingToken();
            assertTrue(client.validateLeader(e, previous));
            for (int i = 1; i < 3; i++) {
                sels.get(i - 1).close();
                Fixture.Recorder next = recs.get(i);
                await(next.id + " elected", WAIT, () -> next.grantCount() == 1);
                assertEquals(1, recs.get(i - 1).interruptCount(), "close interrupts takeLeadership");
                assertEquals(0, recs.get(i - 1).lossCount(), "a close is not a loss");
                long token = next.grant(0).fencingToken();
                assertTrue(Long.compareUnsigned(token, previous) > 0, "tokens rise");
                assertFalse(client.validateLeader(e, previous), "the old token is stale");
                assertTrue(client.validateLeader(e, token));
                previous = token;
            }
            sels.get(2).close();
            await("vacant", WAIT, () -> client.leader(e).isEmpty());
        } finally {
            sels.forEach(LeaderSelector::close);
        }
    }

    @Test
    void returningFromTakeLeadershipResignsAndRequeues() throws Exception {
        String e = Fixture.name("relinquish");
        Fixture.Recorder once = new Fixture.Recorder("once");
        once.returnAtOnce = true;
        Fixture.Recorder other = new Fixture.Recorder("other");
        try (LeaderSelector s1 = client.leaderSelector(e, "once", once).autoRequeue(false).start()) {
            await("once elected", WAIT, () -> once.grantCount() == 1);
            assertTrue(s1.awaitEnd(WAIT), "without auto-requeue the selector ends after one term");
            await("vacant after the resign", WAIT, () -> client.leader(e).isEmpty());
            assertEquals(0, once.lossCount());
        }
        // With auto-requeue (the default) it campaigns again and leads again.
        once.returnAtOnce = true;
        try (LeaderSelector s = client.leaderSelector(e, "again", once).start();
                LeaderSelector s2 = client.leaderSelector(e, "other", other)) {
            await("elected twice more", WAIT, () -> once.grantCount() >= 3);
            s2.start();
            await("other gets a turn", WAIT, () -> other.grantCount() == 1);
        }
    }

    @Test
    void resignByLeaseElsewhereIsALossAndRequeues() throws Exception {
        String e = Fixture.name("lease");
        Fixture.Recorder r = new Fixture.Recorder("r");
        try (LeaderSelector s = client.leaderSelector(e, "r", r).start()) {
            await("elected", WAIT, () -> r.grantCount() == 1);
            Leadership first = r.grant(0);
            assertTrue(client.resign(first.lease()));
            await("lost", WAIT, () -> r.lossCount() == 1);
            assertEquals(LossReason.ENDED, r.losses.get(0));
            await("interrupted", WAIT, () -> r.interruptCount() == 1);
            assertFalse(first.isHeld());
            await("re-elected", WAIT, () -> r.grantCount() == 2);
            assertTrue(Long.compareUnsigned(r.grant(1).fencingToken(), first.fencingToken()) > 0);
            assertFalse(client.resign(first.lease()), "a spent lease is NOT_FOUND");
        }
    }

    @Test
    void observeManyFollowsAPrefixAndLaterElections() throws Exception {
        String p = Fixture.name("many") + ".";
        Map<String, Optional<LeaderInfo>> state = new java.util.concurrent.ConcurrentHashMap<>();
        java.util.concurrent.CountDownLatch complete = new java.util.concurrent.CountDownLatch(1);
        Fixture.Recorder a = new Fixture.Recorder("a");
        Fixture.Recorder b = new Fixture.Recorder("b");
        try (LeaderSelector sa = client.leaderSelector(p + "one", "a", a).start()) {
            await("a leads", WAIT, () -> client.leader(p + "one").map(l -> l.candidate().equals("a")).orElse(false));
            try (ManyObservation o = client.observeMany(p, List.of(p + "named"), state::put, complete::countDown)) {
                assertTrue(complete.await(WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS), "snapshot");
                assertEquals("a", state.get(p + "one").orElseThrow().candidate());
                assertTrue(state.get(p + "named").isEmpty(), "a named election that does not exist is vacant");
                try (LeaderSelector sb = client.leaderSelector(p + "two", "b", b).start()) {
                    await("the new election's leader", WAIT, () -> state.getOrDefault(p + "two", Optional.empty())
                            .map(l -> l.candidate().equals("b")).orElse(false));
                    sa.close();
                    await("the vacancy", WAIT, () -> state.get(p + "one").isEmpty());
                }
            }
        }
    }

    @Test
    void observeSeesLeadersAndVacancies() throws Exception {
        String e = Fixture.name("observe");
        List<Optional<LeaderInfo>> seen = new ArrayList<>();
        try (Observation o = client.observe(e, x -> {
            synchronized (seen) {
                seen.add(x);
            }
        })) {
            await("the vacant state first", WAIT, () -> {
                synchronized (seen) {
                    return seen.size() == 1 && seen.get(0).isEmpty();
                }
            });
            Fixture.Recorder a = new Fixture.Recorder("a");
            Fixture.Recorder b = new Fixture.Recorder("b");
            try (LeaderSelector sa = client.leaderSelector(e, "a", a).value("hello".getBytes()).start()) {
                await("a observed", WAIT, () -> {
                    synchronized (seen) {
                        return seen.get(seen.size() - 1).map(l -> l.candidate().equals("a")).orElse(false);
                    }
                });
                synchronized (seen) {
                    assertEquals("hello", new String(seen.get(seen.size() - 1).get().value()));
                }
                try (LeaderSelector sb = client.leaderSelector(e, "b", b).start()) {
                    await("b queued", WAIT, () -> client.candidates(e).getTotal() == 2);
                    sa.close();
                    await("b observed", WAIT, () -> {
                        synchronized (seen) {
                            return seen.get(seen.size() - 1).map(l -> l.candidate().equals("b")).orElse(false);
                        }
                    });
                }
            }
            await("vacancy observed", WAIT, () -> {
                synchronized (seen) {
                    return seen.get(seen.size() - 1).isEmpty();
                }
            });
        }
    }
    /**
     * Observers whose listener stops returning must not starve the leader's stream on the same
     * client: all of a client's streams share one HTTP/2 connection, and bytes a stream has
     * not read stay charged to the connection's window. 200 observers block in their listener
     * after the first state while the leader proclaims 120 values (≈ 2.4 MB the observers do
     * not take, more than the connection's window); the leader must still hear its gateway
     * for twice its silence limit, and every observer, once its listener returns, must reach
     * the newest value.
     */
    @Test
    void unreadObserversDoNotCostTheLeadership() throws Exception {
        String e = Fixture.name("unread");
        Fixture.Recorder a = new Fixture.Recorder("a");
        java.util.concurrent.CountDownLatch stuck = new java.util.concurrent.CountDownLatch(1);
        List<java.util.concurrent.atomic.AtomicReference<Optional<LeaderInfo>>> latest = new ArrayList<>();
        List<Observation> observations = new ArrayList<>();
        try (LeaderSelector s = client.leaderSelector(e, "a", a).value("v".getBytes()).start()) {
            await("a elected", WAIT, () -> a.grantCount() == 1);
            Leadership l = a.grant(0);
            for (int i = 0; i < 200; i++) {
                java.util.concurrent.atomic.AtomicReference<Optional<LeaderInfo>> last =
                        new java.util.concurrent.atomic.AtomicReference<>();
                latest.add(last);
                observations.add(client.observe(e, x -> {
                    last.set(x);
                    try {
                        stuck.await();
                    } catch (InterruptedException ie) {
                        Thread.currentThread().interrupt();
                    }
                }));
                await("observer " + i + "'s first state", WAIT, () -> last.get() != null);
            }
            for (int i = 0; i < 120; i++) {
                l.proclaim(("v" + i).getBytes());
            }
            // Heartbeats keep coming every silence_limit / 3 or so; a starved stream would
            // count as lost (silence) within one silence limit of its last message.
            long until = System.nanoTime() + 2 * l.silenceLimit().toNanos();
            while (System.nanoTime() < until) {
                assertTrue(l.isHeld(), "the leadership ended while observers did not read");
                Thread.sleep(20);
            }
            assertEquals(0, a.lossCount(), "losses " + a.losses);
            stuck.countDown();
            for (int i = 0; i < latest.size(); i++) {
                java.util.concurrent.atomic.AtomicReference<Optional<LeaderInfo>> last = latest.get(i);
                await("observer " + i + " at the newest value", WAIT, () -> last.get()
                        .map(x -> new String(x.value()).equals("v119")).orElse(false));
            }
        } finally {
            stuck.countDown();
            observations.forEach(Observation::close);
        }
    }
}
