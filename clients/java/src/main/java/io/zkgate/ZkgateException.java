package io.zkgate;

import io.grpc.Status;

/** A refusal by the gateway that retrying elsewhere would not fix (a bad name, a permits mismatch…). */
public final class ZkgateException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final transient Status status;

    ZkgateException(Status status) {
        super(status.getCode() + (status.getDescription() == null ? "" : ": " + status.getDescription()),
                status.getCause());
        this.status = status;
    }

    /** The gRPC status the gateway answered with. */
    public Status status() {
        return status;
    }
}
