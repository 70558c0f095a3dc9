package io.zkgate;

/**
 * The work of a leader, in the style of Apache Curator's {@code LeaderSelectorListener}.
 *
 * <p>{@link #takeLeadership} runs on its own thread from the moment this candidate is elected.
 * It is <b>interrupted</b> as soon as leadership is lost — the gateway sent {@code suspended},
 * the stream ended or failed, or nothing arrived for {@code silence_limit} — so leader-only work
 * must stop on {@link InterruptedException} (or when {@link Thread#isInterrupted()}). Returning
 * from it gives leadership up (a resign), as in Curator.
 */
@FunctionalInterface
public interface LeaderSelectorListener {
    /** Leader-only work; return to resign, stop when interrupted. */
    void takeLeadership(Leadership leadership) throws Exception;

    /**
     * Called at the moment {@code elected} arrives, on the stream's thread, before
     * {@link #takeLeadership} starts. Keep it short.
     */
    default void elected(Leadership leadership) {}

    /**
     * Called once, at the moment the loss is decided, on the stream's thread, just before
     * {@link #takeLeadership}'s thread is interrupted. Keep it short.
     */
    default void lost(Leadership leadership, LossReason reason) {}

    /** A refusal that retrying would not fix (a bad name, say): the selector stops. */
    default void failed(ZkgateException error) {}
}
