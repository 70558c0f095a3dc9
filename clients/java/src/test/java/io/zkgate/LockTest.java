package io.zkgate;

import static io.zkgate.Fixture.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Locks on gateway 1: mutex, try-lock, blocking acquire, semaphore, read-write, ttl, lock selector. */
class LockTest {
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
    void mutexExcludesAndHandsOverWithRisingTokens() throws Exception {
        String name = Fixture.name("mutex");
        ZkgateLock other = client.lock(name).withOwner("other");
        long first;
        try (ZkgateLock lock = client.lock(name).withOwner("first").acquire()) {
            assertTrue(lock.isHeld());
            first = lock.fencingToken();
            assertTrue(client.validateLock(name, first));
            assertEquals("first", client.holders(name).getHolders(0).getOwner());
            assertFalse(other.tryAcquire(Duration.ZERO), "try-lock fails at once while held");
            assertFalse(other.tryAcquire(Duration.ofMillis(300)), "and after a wait");
            assertThrows(IllegalStateException.class, lock::acquire, "not reentrant");
        }
        assertFalse(client.validateLock(name, first), "released: the token is stale");
        try (ZkgateLock l = other) {
            assertTrue(l.tryAcquire(WAIT));
            assertTrue(Long.compareUnsigned(l.fencingToken(), first) > 0);
        }
        assertEquals(0, client.holders(name).getTotal());
    }

    @Test
    void acquireWaitsForTheHolder() throws Exception {
        String name = Fixture.name("wait");
        ZkgateLock holder = client.lock(name).withOwner("holder").acquire();
        ZkgateLock waiter = client.lock(name).withOwner("waiter");
        CompletableFuture<Long> got = CompletableFuture.supplyAsync(() -> {
            try {
                return waiter.acquire().fencingToken();
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        });
        await("waiter queued", WAIT, () -> client.holders(name).getWaiting() == 1);
        assertFalse(got.isDone());
        long held = holder.fencingToken();
        holder.close();
        assertTrue(Long.compareUnsigned(got.get(10, TimeUnit.SECONDS), held) > 0);
        waiter.close();
    }

    @Test
    void semaphoreGrantsItsPermits() throws Exception {
        String name = Fixture.name("sem");
        try (ZkgateLock a = client.semaphore(name, 2).withOwner("a").acquire();
                ZkgateLock b = client.semaphore(name, 2).withOwner("b").acquire();
                ZkgateLock c = client.semaphore(name, 2).withOwner("c")) {
            assertEquals(2, client.holders(name).getTotal());
            assertFalse(c.tryAcquire(Duration.ZERO), "a third permit does not exist");
            ZkgateException mismatch = assertThrows(ZkgateException.class,
                    () -> client.semaphore(name, 3).tryAcquire(Duration.ZERO));
            assertEquals(io.grpc.Status.Code.FAILED_PRECONDITION, mismatch.status().getCode());
            b.release();
            assertTrue(c.tryAcquire(WAIT));
            assertTrue(a.isHeld() && c.isHeld() && !b.isHeld());
        }
    }

    @Test
    void readersShareAndWritersExclude() throws Exception {
        String name = Fixture.name("rw");
        ZkgateReadWriteLock rw1 = client.readWriteLock(name);
        ZkgateReadWriteLock rw2 = client.readWriteLock(name);
        try (ZkgateLock r1 = rw1.readLock().acquire(); ZkgateLock r2 = rw2.readLock().acquire()) {
            assertEquals(2, client.holders(name).getTotal(), "two readers at once");
            assertFalse(rw1.writeLock().tryAcquire(Duration.ZERO), "no writer while reading");
        }
        try (ZkgateLock w = rw1.writeLock()) {
            assertTrue(w.tryAcquire(WAIT));
            assertFalse(rw2.readLock().tryAcquire(Duration.ZERO), "no reader while writing");
        }
    }

    @Test
    void ttlLockStaysHeldThroughKeepAlives() throws Exception {
        String name = Fixture.name("ttl");
        Duration ttl = Duration.ofMillis(300);
        try (ZkgateLock lock = client.lock(name).withTtl(ttl).acquire()) {
            long token = lock.fencingToken();
            // Five ttls: without the helper's keep-alives the gateway would have released it.
            long until = System.nanoTime() + ttl.multipliedBy(5).toNanos();
            while (System.nanoTime() < until) {
                assertTrue(lock.isHeld());
                Thread.sleep(50);
            }
            assertTrue(lock.isHeld());
            assertTrue(client.validateLock(name, token));
        }
    }

    @Test
    void lockSelectorIsInterruptedWhenReleasedElsewhereAndRequeues() throws Exception {
        String name = Fixture.name("selector");
        Fixture.Recorder r = new Fixture.Recorder("r");
        try (LockSelector s = client.lockSelector(client.lock(name), r).start()) {
            await("acquired", WAIT, () -> r.grantCount() == 1);
            Leadership first = r.grant(0);
            assertTrue(s.hold().isPresent());
            assertTrue(client.release(first.lease()));
            await("lost and interrupted", WAIT, () -> r.lossCount() == 1 && r.interruptCount() == 1);
            assertEquals(LossReason.ENDED, r.losses.get(0));
            await("acquired again", WAIT, () -> r.grantCount() == 2);
        }
        await("released on close", WAIT, () -> client.holders(name).getTotal() == 0);
    }
}
