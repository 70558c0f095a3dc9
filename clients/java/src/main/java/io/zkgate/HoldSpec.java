package io.zkgate;

import com.google.protobuf.ByteString;
import io.grpc.Channel;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.zkgate.v1.AcquireLock;
import io.zkgate.v1.AcquireRequest;
import io.zkgate.v1.AcquireResponse;
import io.zkgate.v1.CampaignRequest;
import io.zkgate.v1.CampaignResponse;
import io.zkgate.v1.ElectionGrpc;
import io.zkgate.v1.Join;
import io.zkgate.v1.KeepAlive;
import io.zkgate.v1.LockGrpc;
import io.zkgate.v1.ProclaimValue;
import io.zkgate.v1.ReleaseLock;
import io.zkgate.v1.ResignCandidacy;
import java.time.Duration;
import java.util.function.Consumer;

/**
 * What to hold: a candidacy ({@code Campaign}) or a lock ({@code Acquire}). It opens the stream
 * and turns its responses into {@link Event}s, so {@link HoldStream} runs the one lifecycle
 * (queued → granted → lost or released) for both.
 */
abstract class HoldSpec {
    final String name;
    final String holder;

    HoldSpec(String name, String holder) {
        this.name = name;
        this.holder = holder;
    }

    /** Opens the stream and sends the first message; events go to {@code sink}. */
    abstract Sender open(Channel channel, Duration waitTimeout, Consumer<Event> sink);

    /** The lock's ttl (keep-alive every ttl / 3), or null. */
    Duration ttl() {
        return null;
    }

    /** The request side of one open stream. Thread-safe. */
    interface Sender {
        void keepAlive();

        /** In-stream resign (election) or release (lock). */
        void release();

        void proclaim(byte[] value);

        /** Cancels the call: the gateway deletes the znode. */
        void cancel();
    }

    /** One response, or the end of the stream. */
    record Event(Kind kind, String lease, int position, long token, Duration silenceLimit,
            io.zkgate.v1.Leader leader, Status status) {
        /** {@code END_REQUESTED}: a {@code suspended} whose reason says a Resign/Release with the
         *  hold's lease asked the gateway to end it (contract G3c). */
        enum Kind { QUEUED, GRANTED, SUSPENDED, END_REQUESTED, RESUMED, PROCLAIMED, HEARTBEAT, END }

        static Event of(Kind k) {
            return new Event(k, null, 0, 0, null, null, null);
        }

        static Event end(Status s) {
            return new Event(Kind.END, null, 0, 0, null, null, s);
        }
    }

    static Event.Kind suspended(io.zkgate.v1.Suspended s) {
        return s.getReason() == io.zkgate.v1.SuspendReason.SUSPEND_REASON_END_REQUESTED
                ? Event.Kind.END_REQUESTED
                : Event.Kind.SUSPENDED;
    }

    static Duration duration(com.google.protobuf.Duration d) {
        return Duration.ofSeconds(d.getSeconds(), d.getNanos());
    }

    static com.google.protobuf.Duration proto(Duration d) {
        return com.google.protobuf.Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
    }

    /** A request stream whose sends are serialized (gRPC's StreamObserver is not thread-safe). */
    abstract static class Base<Q, R> implements ClientResponseObserver<Q, R>, Sender {
        private final Consumer<Event> sink;
        private ClientCallStreamObserver<Q> requests;
        private boolean done;

        Base(Consumer<Event> sink) {
            this.sink = sink;
        }

        @Override
        public void beforeStart(ClientCallStreamObserver<Q> r) {
            requests = r;
        }

        synchronized void send(Q q) {
            if (!done && requests != null) {
                try {
                    requests.onNext(q);
                } catch (RuntimeException e) {
                    // The call already ended; its end event tells the rest.
                }
            }
        }

        @Override
        public synchronized void cancel() {
            if (!done && requests != null) {
                done = true;
                requests.cancel("zkgate client gave the stream up", null);
            }
        }

        abstract Event convert(R response);

        @Override
        public void onNext(R value) {
            sink.accept(convert(value));
        }

        @Override
        public void onError(Throwable t) {
            synchronized (this) {
                done = true;
            }
            sink.accept(Event.end(Status.fromThrowable(t)));
        }

        @Override
        public void onCompleted() {
            synchronized (this) {
                done = true;
            }
            sink.accept(Event.end(Status.OK));
        }
    }

    /** A candidacy in an election. */
    static final class Candidacy extends HoldSpec {
        final byte[] value;

        Candidacy(String election, String candidate, byte[] value) {
            super(election, candidate);
            this.value = value;
        }

        @Override
        Sender open(Channel channel, Duration waitTimeout, Consumer<Event> sink) {
            Base<CampaignRequest, CampaignResponse> obs = new Base<>(sink) {
                @Override
                Event convert(CampaignResponse r) {
                    switch (r.getEventCase()) {
                        case QUEUED:
                            return new Event(Event.Kind.QUEUED, r.getQueued().getLease(), r.getQueued().getPosition(),
                                    0, null, null, null);
                        case ELECTED:
                            return new Event(Event.Kind.GRANTED, null, 0, r.getElected().getLeader().getFencingToken(),
                                    duration(r.getElected().getSilenceLimit()), r.getElected().getLeader(), null);
                        case SUSPENDED:
                            return Event.of(suspended(r.getSuspended()));
                        case RESUMED:
                            return Event.of(Event.Kind.RESUMED);
                        case PROCLAIMED:
                            return new Event(Event.Kind.PROCLAIMED, null, 0, 0, null, r.getProclaimed().getLeader(), null);
                        default:
                            return Event.of(Event.Kind.HEARTBEAT);
                    }
                }

                @Override
                public void keepAlive() {}

                @Override
                public void release() {
                    send(CampaignRequest.newBuilder().setResign(ResignCandidacy.getDefaultInstance()).build());
                }

                @Override
                public void proclaim(byte[] v) {
                    send(CampaignRequest.newBuilder()
                            .setProclaim(ProclaimValue.newBuilder().setValue(ByteString.copyFrom(v))).build());
                }
            };
            ElectionGrpc.newStub(channel).campaign(obs);
            obs.send(CampaignRequest.newBuilder().setJoin(Join.newBuilder().setElection(name).setCandidate(holder)
                    .setValue(ByteString.copyFrom(value))).build());
            return obs;
        }
    }

    /** A lock, a semaphore permit or one side of a read-write lock. */
    static final class LockRequest extends HoldSpec {
        final int permits;
        final LockMode mode;
        final Duration ttl;

        LockRequest(String name, String owner, int permits, LockMode mode, Duration ttl) {
            super(name, owner);
            this.permits = permits;
            this.mode = mode;
            this.ttl = ttl;
        }

        @Override
        Duration ttl() {
            return ttl;
        }

        @Override
        Sender open(Channel channel, Duration waitTimeout, Consumer<Event> sink) {
            Base<AcquireRequest, AcquireResponse> obs = new Base<>(sink) {
                @Override
                Event convert(AcquireResponse r) {
                    switch (r.getEventCase()) {
                        case QUEUED:
                            return new Event(Event.Kind.QUEUED, r.getQueued().getLease(), r.getQueued().getPosition(),
                                    0, null, null, null);
                        case ACQUIRED:
                            return new Event(Event.Kind.GRANTED, r.getAcquired().getLease(), 0,
                                    r.getAcquired().getFencingToken(), duration(r.getAcquired().getSilenceLimit()),
                                    null, null);
                        case SUSPENDED:
                            return Event.of(suspended(r.getSuspended()));
                        case RESUMED:
                            return Event.of(Event.Kind.RESUMED);
                        default:
                            return Event.of(Event.Kind.HEARTBEAT);
                    }
                }

                @Override
                public void keepAlive() {
                    send(AcquireRequest.newBuilder().setKeepAlive(KeepAlive.getDefaultInstance()).build());
                }

                @Override
                public void release() {
                    send(AcquireRequest.newBuilder().setRelease(ReleaseLock.getDefaultInstance()).build());
                }

                @Override
                public void proclaim(byte[] v) {
                    throw new UnsupportedOperationException("locks have no value to proclaim");
                }
            };
            LockGrpc.newStub(channel).acquire(obs);
            AcquireLock.Builder a = AcquireLock.newBuilder().setName(name).setOwner(holder).setPermits(permits)
                    .setMode(mode == LockMode.READ ? io.zkgate.v1.LockMode.LOCK_MODE_READ
                            : io.zkgate.v1.LockMode.LOCK_MODE_WRITE);
            if (waitTimeout != null) {
                a.setWaitTimeout(proto(waitTimeout));
            }
            if (ttl != null) {
                a.setTtl(proto(ttl));
            }
            obs.send(AcquireRequest.newBuilder().setAcquire(a).build());
            return obs;
        }
    }
}
