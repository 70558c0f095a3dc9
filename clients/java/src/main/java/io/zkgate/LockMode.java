package io.zkgate;

/** The side of a read-write lock. A plain lock or a semaphore is {@link #WRITE}. */
public enum LockMode {
    /** Exclusive (the default). */
    WRITE,
    /** Shared with other readers; excludes writers. */
    READ
}
