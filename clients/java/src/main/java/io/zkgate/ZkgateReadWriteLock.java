package io.zkgate;

/**
 * A read-write lock on one name, like Curator's {@code InterProcessReadWriteLock}: any number
 * of readers together, or one writer.
 */
public final class ZkgateReadWriteLock {
    private final ZkgateLock read;
    private final ZkgateLock write;

    ZkgateReadWriteLock(ZkgateLock read, ZkgateLock write) {
        this.read = read;
        this.write = write;
    }

    /** The shared side ({@code LOCK_MODE_READ}). */
    public ZkgateLock readLock() {
        return read;
    }

    /** The exclusive side ({@code LOCK_MODE_WRITE}). */
    public ZkgateLock writeLock() {
        return write;
    }
}
