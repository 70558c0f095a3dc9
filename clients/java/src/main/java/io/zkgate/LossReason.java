package io.zkgate;

/**
 * Why a leadership or a lock was lost (clients/CONFORMANCE.md). Reported once per hold, at the
 * moment the loss is decided.
 */
public enum LossReason {
    /** The gateway sent {@code suspended}: it lost ZooKeeper; stop leader-only work now. */
    SUSPENDED,
    /** Nothing arrived on the stream for {@code silence_limit}: the gateway may be frozen or cut off. */
    SILENCE,
    /** The stream failed with {@code UNAVAILABLE} or on the transport (the gateway drained or crashed). */
    UNAVAILABLE,
    /** The stream ended any other way ({@code ABORTED}, resigned by lease elsewhere, ttl expired). */
    ENDED;

    /** The reason as the conformance agent prints it: {@code suspended}, {@code silence}, … */
    public String wire() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }

    /** Whether auto-requeue moves on to the next endpoint after this loss. */
    boolean movesOn() {
        return this == SILENCE || this == UNAVAILABLE;
    }
}
