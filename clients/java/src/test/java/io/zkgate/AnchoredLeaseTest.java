package io.zkgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.OptionalLong;
import org.junit.jupiter.api.Test;

/** The lease on the holder's own clock, as a pure rule (clients/CONFORMANCE.md). */
class AnchoredLeaseTest {
    static final long T0 = 5_000_000_000L;

    static long ms(long n) {
        return Duration.ofMillis(n).toNanos();
    }

    record Row(long[] pings, long grant, long[] answers, Long want, String what) {}

    @Test
    void theDeadlineRunsFromTheSendOfTheNewestAnsweredPing() {
        Duration limit = Duration.ofMillis(1000);
        // (pings sent at these offsets, grant's ping_seq, answers in order, deadline offset)
        Row[] table = {
            new Row(new long[] {}, 1, new long[] {}, 1000L, "granted at once on the join"),
            new Row(new long[] {300, 600}, 3, new long[] {}, 1600L, "a waiter's newest ping"),
            new Row(new long[] {300, 600}, 2, new long[] {3}, 1600L, "granted on 2, then 3 answered"),
            new Row(new long[] {300}, 2, new long[] {2, 2}, 1300L, "a replayed answer moves nothing"),
            new Row(new long[] {300, 600}, 3, new long[] {2}, 1600L, "an older answer moves nothing back"),
            new Row(new long[] {300}, 2, new long[] {0, 9}, 1300L, "unsolicited or unknown: nothing"),
            new Row(new long[] {300}, 0, new long[] {}, null, "a grant naming no ping anchors nothing"),
            new Row(new long[] {300}, 7, new long[] {}, null, "a grant naming an unknown ping anchors nothing"),
        };
        for (Row r : table) {
            AnchoredLease l = new AnchoredLease(T0);
            for (int i = 0; i < r.pings.length; i++) {
                assertEquals(i + 2, l.ping(T0 + ms(r.pings[i])), r.what);
            }
            OptionalLong until = l.granted(limit, r.grant);
            for (long a : r.answers) {
                until = l.answered(a);
            }
            OptionalLong want = r.want == null ? OptionalLong.empty() : OptionalLong.of(T0 + ms(r.want));
            assertEquals(want, until, r.what);
            assertEquals(want, l.deadline(), r.what);
        }
    }

    @Test
    void aGrantWithoutASilenceLimitAnchorsNothing() {
        AnchoredLease l = new AnchoredLease(T0);
        assertEquals(OptionalLong.empty(), l.granted(Duration.ZERO, 1));
        assertEquals(OptionalLong.empty(), l.answered(1));
    }

    @Test
    void answersBeforeTheGrantMoveNothing() {
        AnchoredLease l = new AnchoredLease(T0);
        l.ping(T0 + ms(300));
        assertEquals(OptionalLong.empty(), l.answered(2));
        assertEquals(OptionalLong.empty(), l.granted(Duration.ofMillis(1000), 2), "ping 2 was forgotten by its answer");
    }

    @Test
    void onlyTheNewestPingsAreRemembered() {
        AnchoredLease l = new AnchoredLease(T0);
        long newest = 0;
        for (int i = 0; i < AnchoredLease.REMEMBERED + 10; i++) {
            newest = l.ping(T0 + ms(i));
        }
        assertEquals(AnchoredLease.REMEMBERED, l.remembered());
        assertEquals(OptionalLong.empty(), l.granted(Duration.ofMillis(1000), 1), "the join's ping is forgotten");
        assertTrue(l.answered(newest).isEmpty(), "not granted: nothing to move");
        assertEquals(0, l.remembered(), "answered and older ones dropped");
        // A grant on a remembered ping: that ping's send time + the limit.
        AnchoredLease m = new AnchoredLease(T0);
        for (int i = 0; i < AnchoredLease.REMEMBERED + 10; i++) {
            m.ping(T0 + ms(i));
        }
        assertEquals(OptionalLong.of(T0 + ms(AnchoredLease.REMEMBERED + 8) + ms(1000)),
                m.granted(Duration.ofMillis(1000), AnchoredLease.REMEMBERED + 10));
        assertEquals(1, m.remembered(), "the newest stays for its answer");
    }
}
