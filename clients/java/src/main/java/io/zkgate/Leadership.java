package io.zkgate;

import java.time.Duration;
import java.util.Optional;

/**
 * A granted hold: the leadership of an election ({@link LeaderSelector}) or a lock
 * ({@link LockSelector}, {@link ZkgateLock}). Pass {@link #fencingToken()} to the services you
 * write to, so that they can refuse a stale holder.
 */
public final class Leadership {
    private final String name;
    private final String holder;
    private final Endpoint endpoint;
    private final long fencingToken;
    private final Duration silenceLimit;
    private final HoldStream stream;
    private volatile LossReason lost;

    Leadership(HoldSpec spec, Endpoint endpoint, HoldSpec.Event granted, HoldStream stream) {
        this.name = spec.name;
        this.holder = spec.holder;
        this.endpoint = endpoint;
        this.fencingToken = granted.token();
        this.silenceLimit = granted.silenceLimit();
        this.stream = stream;
    }

    /** The election or lock name. */
    public String name() {
        return name;
    }

    /** The candidate or owner id this hold was asked for with. */
    public String holder() {
        return holder;
    }

    /**
     * The fencing token: every later holder of the name has a larger one. Unsigned 64-bit:
     * compare with {@link Long#compareUnsigned}, print with {@link #fencingTokenString()}.
     */
    public long fencingToken() {
        return fencingToken;
    }

    /** The fencing token in decimal (the form JSON and other languages use). */
    public String fencingTokenString() {
        return Long.toUnsignedString(fencingToken);
    }

    /** The gateway that granted it. */
    public Endpoint endpoint() {
        return endpoint;
    }

    /**
     * The lease's length: from the send of the newest answered ping with a gateway that
     * answers pings, from the last message heard with an older one (see {@link #isHeld}).
     */
    public Duration silenceLimit() {
        return silenceLimit;
    }

    /**
     * Whether it is still held: no loss decided, not given up, and the lease's deadline not
     * passed (past it the hold is lost by silence, even before the loss is reported). With a
     * gateway that answers pings the deadline is the send of the newest answered ping +
     * {@link #silenceLimit()}, on this process's clock; with an older one, the last message
     * heard + {@link #silenceLimit()}.
     */
    public boolean isHeld() {
        return lossReason().isEmpty() && !stream.over.isDone();
    }

    /**
     * Why it was lost, once it was: {@link LossReason#SILENCE} as soon as the lease's deadline
     * (see {@link #isHeld}) has passed, even before the monitor thread has run again to report it
     * (a process just thawed), so that whoever sees {@link #isHeld} false also finds a reason.
     */
    public Optional<LossReason> lossReason() {
        LossReason r = lost;
        if (r == null && !stream.over.isDone() && stream.pastDeadline()) {
            r = LossReason.SILENCE;
        }
        return Optional.ofNullable(r);
    }

    /**
     * The lease: the capability to resign or release this hold from anywhere
     * ({@link ZkgateClient#resign}, {@link ZkgateClient#release}). Keep it secret.
     */
    public String lease() {
        return stream.lease();
    }

    /**
     * Replaces the leader's value without a new election (the unary {@code Proclaim} by lease,
     * on the gateway that granted it; blocks until the gateway has written it). Throws
     * {@link io.grpc.StatusRuntimeException} ({@code FAILED_PRECONDITION} when no longer leader).
     */
    public LeaderInfo proclaim(byte[] value) {
        return stream.proclaim(value);
    }

    /** The watchdog's deadline on {@link HoldStream#clock} (ns), once it runs. */
    java.util.OptionalLong deadline() {
        return stream.deadline();
    }

    void markLost(LossReason reason) {
        lost = reason;
    }

    @Override
    public String toString() {
        return "Leadership[" + name + " as " + holder + " via " + endpoint + ", token " + fencingTokenString()
                + (lost == null ? "" : ", lost: " + lost.wire()) + "]";
    }
}
