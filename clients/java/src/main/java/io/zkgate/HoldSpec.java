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
import io.zkgate.v1.Ping;
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

    /**
     * Opens the stream and sends the first message, which is also ping 1 ({@code ping_seq: 1}:
     * a gateway that answers pings then sends this stream no unsolicited heartbeats, and
     * {@link HoldStream} anchors its lease on the pings' send times, ping 1's being
     * {@link Sender#firstSent}); events go to {@code sink}.
     */
    abstract Sender open(Channel channel, Duration waitTimeout, Consumer<Event> sink);

    /** The lock's ttl (keep-alive every ttl / 3), or null. */
    Duration ttl() {
        return null;
    }

    /** The request side of one open stream. Thread-safe. */
    interface Sender {
        /**
         * When the first message (ping 1) was sent: {@link HoldStream#clock} read just before it
         * was handed to the call, once the call was ready (the stream open on a connection). Not
         * earlier: a JVM's first stream can take longer than a silence limit to connect and
         * load its classes, and a lease anchored before all that would be over when granted.
         * Known once the gateway's first message has arrived.
         */
        long firstSent();

        void keepAlive();

        /** In-stream resign (election) or release (lock). */
        void release();

        /**
         * Sends {@code ping{seq}} without blocking: false when it was not sent (the call is
         * over, or its send buffer is full because the gateway stopped reading — the lease then
         * runs out by itself).
         */
        boolean ping(long seq);

        /** Cancels the call: the gateway deletes the znode. */
        void cancel();
    }

    /**
     * One response, or the end of the stream. {@code silenceLimit}: the grant's, or for
     * {@code queued} the one a grant would carry now (null when unset). {@code answersPings}:
     * {@code queued.answers_pings}. {@code seq}: the grant's {@code ping_seq}, or the ping a
     * heartbeat answers (0: unsolicited).
     */
    record Event(Kind kind, String lease, int position, long token, Duration silenceLimit,
            io.zkgate.v1.Leader leader, Status status, boolean answersPings, long seq) {
        /** {@code END_REQUESTED}: a {@code suspended} whose reason says a Resign/Release with the
         *  hold's lease asked the gateway to end it (contract G3c). */
        enum Kind { QUEUED, GRANTED, SUSPENDED, END_REQUESTED, RESUMED, PROCLAIMED, HEARTBEAT, END }

        static Event of(Kind k) {
            return new Event(k, null, 0, 0, null, null, null, false, 0);
        }

        static Event end(Status s) {
            return new Event(Kind.END, null, 0, 0, null, null, s, false, 0);
        }

        static Event queued(io.zkgate.v1.Queued q) {
            return new Event(Kind.QUEUED, q.getLease(), q.getPosition(), 0,
                    q.hasSilenceLimit() ? duration(q.getSilenceLimit()) : null, null, null, q.getAnswersPings(), 0);
        }

        static Event granted(String lease, long token, Duration silenceLimit, io.zkgate.v1.Leader leader, long pingSeq) {
            return new Event(Kind.GRANTED, lease, 0, token, silenceLimit, leader, null, false, pingSeq);
        }

        static Event heartbeat(long seq) {
            return new Event(Kind.HEARTBEAT, null, 0, 0, null, null, null, false, seq);
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
        /** The first message, held back until the call is ready (see {@link Sender#firstSent}). */
        private Q first;
        private volatile long firstSent;

        Base(Consumer<Event> sink) {
            this.sink = sink;
        }

        @Override
        public void beforeStart(ClientCallStreamObserver<Q> r) {
            requests = r;
            r.setOnReadyHandler(this::flushFirst);
        }

        /** Sends the first message as soon as the call is ready (now, if it is). */
        synchronized void sendFirst(Q q) {
            first = q;
            if (requests != null && requests.isReady()) {
                flushFirst();
            }
        }

        private synchronized void flushFirst() {
            if (first != null) {
                Q q = first;
                first = null;
                firstSent = HoldStream.clock.getAsLong();
                write(q);
            }
        }

        @Override
        public long firstSent() {
            return firstSent;
        }

        /** Sends {@code q} (after the first message, if that is still held back). */
        synchronized void send(Q q) {
            flushFirst();
            write(q);
        }

        private void write(Q q) {
            if (!done && requests != null) {
                try {
                    requests.onNext(q);
                } catch (RuntimeException e) {
                    // The call already ended; its end event tells the rest.
                }
            }
        }

        abstract Q pingRequest(long seq);

        @Override
        public synchronized boolean ping(long seq) {
            if (done || requests == null || !requests.isReady()) {
                return false;
            }
            send(pingRequest(seq));
            return true;
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
                            return Event.queued(r.getQueued());
                        case ELECTED:
                            return Event.granted(null, r.getElected().getLeader().getFencingToken(),
                                    duration(r.getElected().getSilenceLimit()), r.getElected().getLeader(),
                                    r.getElected().getPingSeq());
                        case SUSPENDED:
                            return Event.of(suspended(r.getSuspended()));
                        case RESUMED:
                            return Event.of(Event.Kind.RESUMED);
                        case PROCLAIMED:
                            return new Event(Event.Kind.PROCLAIMED, null, 0, 0, null, r.getProclaimed().getLeader(),
                                    null, false, 0);
                        case HEARTBEAT:
                            return Event.heartbeat(r.getHeartbeat().getSeq());
                        default:
                            return Event.of(Event.Kind.HEARTBEAT);
                    }
                }

                @Override
                CampaignRequest pingRequest(long seq) {
                    return CampaignRequest.newBuilder().setPing(Ping.newBuilder().setSeq(seq)).build();
                }

                @Override
                public void keepAlive() {}

                @Override
                public void release() {
                    send(CampaignRequest.newBuilder().setResign(ResignCandidacy.getDefaultInstance()).build());
                }
            };
            ElectionGrpc.newStub(channel).campaign(obs);
            obs.sendFirst(CampaignRequest.newBuilder().setJoin(Join.newBuilder().setElection(name).setCandidate(holder)
                    .setValue(ByteString.copyFrom(value)).setPingSeq(1)).build());
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
                            return Event.queued(r.getQueued());
                        case ACQUIRED:
                            return Event.granted(r.getAcquired().getLease(), r.getAcquired().getFencingToken(),
                                    duration(r.getAcquired().getSilenceLimit()), null, r.getAcquired().getPingSeq());
                        case SUSPENDED:
                            return Event.of(suspended(r.getSuspended()));
                        case RESUMED:
                            return Event.of(Event.Kind.RESUMED);
                        case HEARTBEAT:
                            return Event.heartbeat(r.getHeartbeat().getSeq());
                        default:
                            return Event.of(Event.Kind.HEARTBEAT);
                    }
                }

                @Override
                AcquireRequest pingRequest(long seq) {
                    return AcquireRequest.newBuilder().setPing(Ping.newBuilder().setSeq(seq)).build();
                }

                @Override
                public void keepAlive() {
                    send(AcquireRequest.newBuilder().setKeepAlive(KeepAlive.getDefaultInstance()).build());
                }

                @Override
                public void release() {
                    send(AcquireRequest.newBuilder().setRelease(ReleaseLock.getDefaultInstance()).build());
                }
            };
            LockGrpc.newStub(channel).acquire(obs);
            AcquireLock.Builder a = AcquireLock.newBuilder().setName(name).setOwner(holder).setPermits(permits)
                    .setMode(mode == LockMode.READ ? io.zkgate.v1.LockMode.LOCK_MODE_READ
                            : io.zkgate.v1.LockMode.LOCK_MODE_WRITE)
                    .setPingSeq(1);
            if (waitTimeout != null) {
                a.setWaitTimeout(proto(waitTimeout));
            }
            if (ttl != null) {
                a.setTtl(proto(ttl));
            }
            obs.sendFirst(AcquireRequest.newBuilder().setAcquire(a).build());
            return obs;
        }
    }
}
