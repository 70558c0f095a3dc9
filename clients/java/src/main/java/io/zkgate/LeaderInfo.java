package io.zkgate;

import java.time.Instant;

/**
 * Who leads an election, as {@code Leader}, {@code Observe} and {@code Validate} report it.
 *
 * @param fencingToken unsigned 64-bit: compare with {@link Long#compareUnsigned}, print with
 *     {@link Long#toUnsignedString(long)}
 */
public record LeaderInfo(String election, String candidate, byte[] value, long fencingToken, Instant since) {
    static LeaderInfo of(io.zkgate.v1.Leader l) {
        return new LeaderInfo(l.getElection(), l.getCandidate(), l.getValue().toByteArray(), l.getFencingToken(),
                Instant.ofEpochSecond(l.getSince().getSeconds(), l.getSince().getNanos()));
    }

    @Override
    public String toString() {
        return "LeaderInfo[" + election + " led by " + candidate + ", token " + Long.toUnsignedString(fencingToken) + "]";
    }
}
