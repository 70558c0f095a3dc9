package io.zkgate;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.OptionalLong;

/**
 * A holder's lease on its own clock (contract G3b, the proto's {@code Ping}): the pure rule
 * {@link HoldStream} follows with a gateway whose {@code queued} said {@code answers_pings}.
 *
 * <p>A watchdog that restarts whenever a message <em>arrives</em> can be stretched by a slow
 * link: a heartbeat sent just before its gateway froze, arriving late, restarts it while
 * ZooKeeper expires the session and elects a successor. Here the holder numbers its pings and
 * remembers when it sent each; the gateway answers one only while its session vouches for the
 * hold at least {@code silence_limit} past the moment it read it, and a grant carries the newest
 * ping it had read. So the deadline is the <em>send</em> time of the newest answered ping +
 * {@code silence_limit}: a late or replayed answer cannot move it past what the real one allowed.
 *
 * <p>Times are nanoseconds on one monotonic clock ({@link HoldStream#clock}), compared by
 * difference. Not thread-safe: the hold's monitor thread owns it.
 */
final class AnchoredLease {
    /**
     * Pings remembered while unanswered. Waiters' pings are never answered (only the grant names
     * one), so the oldest are forgotten: one that old could only anchor a lease already over.
     */
    static final int REMEMBERED = 64;

    /** (seq, when sent), oldest first. */
    private final ArrayDeque<long[]> sent = new ArrayDeque<>();
    private long lastSeq = 1;
    /** The grant's silence limit (ns), once granted; 0 before. */
    private long limit;
    private boolean held;
    /** The deadline, while {@link #held}. */
    private long until;

    /** A stream whose first message (the join or acquire, {@code ping_seq: 1}) was sent at {@code firstSent}. */
    AnchoredLease(long firstSent) {
        sent.addLast(new long[] {1, firstSent});
    }

    /** The number of the next ping, sent at {@code now}. */
    long ping(long now) {
        lastSeq++;
        if (sent.size() == REMEMBERED) {
            sent.removeFirst();
        }
        sent.addLast(new long[] {lastSeq, now});
        return lastSeq;
    }

    /** How many pings are remembered (tests). */
    int remembered() {
        return sent.size();
    }

    /** When ping {@code seq} was sent, forgetting it and every older one (answers come in order). */
    private OptionalLong take(long seq) {
        OptionalLong at = OptionalLong.empty();
        for (long[] p : sent) {
            if (p[0] == seq) {
                at = OptionalLong.of(p[1]);
                break;
            }
        }
        while (!sent.isEmpty() && Long.compareUnsigned(sent.peekFirst()[0], seq) <= 0) {
            sent.removeFirst();
        }
        return at;
    }

    /**
     * The grant: {@code pingSeq} was the newest ping the gateway had read, {@code silenceLimit}
     * its silence limit. The deadline it gives; empty when the grant names no ping this stream
     * sent (0, unknown or forgotten) or carries no limit: nothing anchors the hold, which is then
     * lost at once. (Whether the deadline has passed already is the caller's to judge.)
     */
    OptionalLong granted(Duration silenceLimit, long pingSeq) {
        limit = silenceLimit == null || silenceLimit.isNegative() ? 0 : silenceLimit.toNanos();
        OptionalLong at = take(pingSeq);
        held = at.isPresent() && limit > 0;
        if (held) {
            until = at.getAsLong() + limit;
        }
        return deadline();
    }

    /**
     * {@code heartbeat{seq}}: the deadline, moved on if the answer is to a ping sent later than
     * the one that set it. Unsolicited (0), unknown or older answers move nothing.
     */
    OptionalLong answered(long seq) {
        if (seq != 0) {
            OptionalLong at = take(seq);
            if (held && at.isPresent() && at.getAsLong() + limit - until > 0) {
                until = at.getAsLong() + limit;
            }
        }
        return deadline();
    }

    /** The deadline, once granted with a ping this stream sent. */
    OptionalLong deadline() {
        return held ? OptionalLong.of(until) : OptionalLong.empty();
    }
}
