package io.zkgate;

import static io.zkgate.Fixture.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Faults of one gateway in a fleet of three on one ZooKeeper: gateway 3 frozen (SIGSTOP) and
 * later killed (SIGKILL), gateway 2 drained (SIGTERM). Gateway 1 stays up and takes over.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class FleetTest {
    /** Beyond silence_limit, what the watchdog may take to notice and interrupt the work. */
    static final Duration WATCHDOG_SLACK = Duration.ofMillis(750);
    static final Duration WAIT = Duration.ofSeconds(15);

    @Test
    @Order(1)
    void frozenGatewayInterruptsTheLeaderWithinSilenceLimitThenFailsOver() throws Exception {
        String e = Fixture.name("freeze");
        Fixture.Recorder r = new Fixture.Recorder("r");
        try (ZkgateClient client = Fixture.client(Fixture.gw3(), Fixture.gw1());
                LeaderSelector s = client.leaderSelector(e, "r", r).start()) {
            await("elected via gateway 3", WAIT, () -> r.grantCount() == 1);
            Leadership first = r.grant(0);
            assertEquals(Fixture.gw3(), first.endpoint().toString());
            long frozenAt = System.nanoTime();
            Fixture.signal("ZKGATE_PID3", "STOP");
            try {
                await("interrupted", WAIT, () -> r.interruptCount() == 1);
                long took = r.interruptedAt.get(0) - frozenAt;
                assertEquals(LossReason.SILENCE, r.losses.get(0));
                System.out.println("frozen gateway: work interrupted " + Duration.ofNanos(took).toMillis()
                        + " ms after SIGSTOP (silence_limit " + first.silenceLimit().toMillis() + " ms)");
                assertTrue(took <= first.silenceLimit().plus(WATCHDOG_SLACK).toNanos(),
                        "interrupted " + Duration.ofNanos(took) + " after the freeze; silence_limit is "
                                + first.silenceLimit());
            } finally {
                Fixture.signal("ZKGATE_PID3", "CONT");
            }
            // After silence the selector moves on to gateway 1 and leads again once gateway 3
            // (thawed) has dropped the cancelled stream's znode.
            await("re-elected via gateway 1", WAIT,
                    () -> r.grantCount() == 2 && r.grant(1).endpoint().toString().equals(Fixture.gw1()));
            assertTrue(Long.compareUnsigned(r.grant(1).fencingToken(), first.fencingToken()) > 0);
        }
    }

    @Test
    @Order(2)
    void drainedGatewayFailsOverAndObserveNeverGoesBack() throws Exception {
        String e = Fixture.name("drain");
        String lockName = Fixture.name("drain-lock");
        Fixture.Recorder leader = new Fixture.Recorder("leader");
        Fixture.Recorder holder = new Fixture.Recorder("holder");
        List<Optional<LeaderInfo>> seen = new ArrayList<>();
        try (ZkgateClient client = Fixture.client(Fixture.gw2(), Fixture.gw1());
                LeaderSelector s = client.leaderSelector(e, "leader", leader).start();
                LockSelector ls = client.lockSelector(client.lock(lockName), holder).start();
                Observation o = client.observe(e, x -> {
                    synchronized (seen) {
                        seen.add(x);
                    }
                })) {
            await("elected and acquired via gateway 2", WAIT, () -> leader.grantCount() == 1
                    && holder.grantCount() == 1);
            assertEquals(Fixture.gw2(), leader.grant(0).endpoint().toString());
            await("observed", WAIT, () -> {
                synchronized (seen) {
                    return !seen.isEmpty() && seen.get(seen.size() - 1).isPresent();
                }
            });
            Fixture.signal("ZKGATE_PID2", "TERM");
            await("both lost and interrupted", WAIT, () -> leader.interruptCount() == 1 && holder.interruptCount() == 1);
            // A drain revokes holds with `suspended` first (G3c).
            assertEquals(LossReason.SUSPENDED, leader.losses.get(0));
            assertEquals(LossReason.SUSPENDED, holder.losses.get(0));
            await("re-elected and re-acquired via gateway 1", WAIT, () -> leader.grantCount() == 2
                    && holder.grantCount() == 2);
            assertEquals(Fixture.gw1(), leader.grant(1).endpoint().toString());
            assertEquals(Fixture.gw1(), holder.grant(1).endpoint().toString());
            long newToken = leader.grant(1).fencingToken();
            assertTrue(Long.compareUnsigned(newToken, leader.grant(0).fencingToken()) > 0);
            await("the observer follows to gateway 1", WAIT, () -> {
                synchronized (seen) {
                    return seen.get(seen.size() - 1).map(l -> l.fencingToken() == newToken).orElse(false);
                }
            });
            synchronized (seen) {
                long max = 0;
                for (Optional<LeaderInfo> x : seen) {
                    if (x.isPresent()) {
                        assertTrue(Long.compareUnsigned(x.get().fencingToken(), max) >= 0, "tokens went down: " + seen);
                        max = x.get().fencingToken();
                    }
                }
            }
            // Unary calls and one-shot locks fail over from the gone gateway too.
            assertEquals(Optional.of("leader"), client.leader(e).map(LeaderInfo::candidate));
            try (ZkgateLock l = client.lock(Fixture.name("after-drain")).acquire()) {
                assertTrue(l.isHeld());
            }
        }
    }

    @Test
    @Order(3)
    void killedGatewayFailsOverAfterItsSessionExpires() throws Exception {
        String e = Fixture.name("kill");
        Fixture.Recorder r = new Fixture.Recorder("r");
        try (ZkgateClient client = Fixture.client(Fixture.gw3(), Fixture.gw1());
                LeaderSelector s = client.leaderSelector(e, "r", r).start()) {
            await("elected via gateway 3", WAIT, () -> r.grantCount() == 1);
            assertEquals(Fixture.gw3(), r.grant(0).endpoint().toString());
            Fixture.signal("ZKGATE_PID3", "KILL");
            await("interrupted", WAIT, () -> r.interruptCount() == 1);
            assertEquals(LossReason.UNAVAILABLE, r.losses.get(0));
            // The killed gateway's znode lives until its session expires (4 s here).
            await("re-elected via gateway 1", WAIT, () -> r.grantCount() == 2);
            assertEquals(Fixture.gw1(), r.grant(1).endpoint().toString());
        }
    }
}
