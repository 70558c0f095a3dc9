package io.zkgate;

import static io.zkgate.Fixture.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import io.zkgate.v1.CampaignRequest;
import io.zkgate.v1.CampaignResponse;
import io.zkgate.v1.Elected;
import io.zkgate.v1.ElectionGrpc;
import io.zkgate.v1.Heartbeat;
import io.zkgate.v1.Leader;
import io.zkgate.v1.LeaderRequest;
import io.zkgate.v1.LeaderResponse;
import io.zkgate.v1.ObserveRequest;
import io.zkgate.v1.ObserveResponse;
import io.zkgate.v1.Queued;
import io.zkgate.v1.Suspended;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The helper's rules against scripted gateways (gRPC servers in this JVM), for what a real
 * gateway does not do on demand: {@code suspended}, a stale first Observe message after a
 * reconnect, an {@code ABORTED} end, a silent stream.
 */
class FakeGatewayTest {
    static final Duration WAIT = Duration.ofSeconds(10);
    static final AtomicLong TOKENS = new AtomicLong(100);

    /** One scripted gateway: campaigns are queued and elected at once; the test drives the rest. */
    static final class Fake extends ElectionGrpc.ElectionImplBase {
        final String name;
        final Server server;
        final int port;
        final LinkedBlockingQueue<StreamObserver<CampaignResponse>> campaigns = new LinkedBlockingQueue<>();
        final List<Status> campaignEnds = new ArrayList<>();
        volatile Duration silenceLimit = Duration.ofSeconds(30);
        volatile Consumer<StreamObserver<ObserveResponse>> observe = o -> { };
        volatile Status leaderAnswer;
        /** The next campaign hears {@code suspended} between {@code queued} and {@code elected}. */
        final java.util.concurrent.atomic.AtomicBoolean suspendNextBeforeElected = new java.util.concurrent.atomic.AtomicBoolean();

        Fake(String name) throws Exception {
            this.name = name;
            this.server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0)).addService(this)
                    .build().start();
            this.port = server.getPort();
        }

        String endpoint() {
            return "http://127.0.0.1:" + port;
        }

        @Override
        public StreamObserver<CampaignRequest> campaign(StreamObserver<CampaignResponse> out) {
            return new StreamObserver<>() {
                @Override
                public void onNext(CampaignRequest r) {
                    if (r.hasJoin()) {
                        out.onNext(CampaignResponse.newBuilder()
                                .setQueued(Queued.newBuilder().setLease("lease-" + name)).build());
                        if (suspendNextBeforeElected.getAndSet(false)) {
                            out.onNext(CampaignResponse.newBuilder().setSuspended(Suspended.getDefaultInstance()).build());
                        }
                        Leader l = Leader.newBuilder().setElection(r.getJoin().getElection())
                                .setCandidate(r.getJoin().getCandidate()).setFencingToken(TOKENS.incrementAndGet())
                                .build();
                        out.onNext(CampaignResponse.newBuilder().setElected(Elected.newBuilder().setLeader(l)
                                .setSilenceLimit(HoldSpec.proto(silenceLimit))).build());
                        campaigns.add(out);
                    } else if (r.hasResign()) {
                        out.onCompleted();
                    }
                }

                @Override
                public void onError(Throwable t) {
                    synchronized (campaignEnds) {
                        campaignEnds.add(Status.fromThrowable(t));
                    }
                }

                @Override
                public void onCompleted() { }
            };
        }

        @Override
        public void observe(ObserveRequest request, StreamObserver<ObserveResponse> out) {
            observe.accept(out);
        }

        @Override
        public void leader(LeaderRequest request, StreamObserver<LeaderResponse> out) {
            if (leaderAnswer != null) {
                out.onError(leaderAnswer.asRuntimeException());
                return;
            }
            out.onNext(LeaderResponse.newBuilder().setLeader(Leader.newBuilder().setCandidate("from-" + name)).build());
            out.onCompleted();
        }

        int campaignEndCount() {
            synchronized (campaignEnds) {
                return campaignEnds.size();
            }
        }
    }

    final List<Fake> fakes = new ArrayList<>();

    Fake fake(String name) throws Exception {
        Fake f = new Fake(name);
        fakes.add(f);
        return f;
    }

    @AfterEach
    void stop() {
        fakes.forEach(f -> f.server.shutdownNow());
    }

    static ObserveResponse leader(long token) {
        return ObserveResponse.newBuilder().setLeader(Leader.newBuilder().setCandidate("c" + token)
                .setFencingToken(token)).build();
    }

    @Test
    void suspendedIsALossThatCancelsTheStreamAndRequeuesOnTheSameGateway() throws Exception {
        Fake a = fake("a");
        Fake b = fake("b");
        Fixture.Recorder r = new Fixture.Recorder("r");
        try (ZkgateClient client = Fixture.client(a.endpoint(), b.endpoint());
                LeaderSelector s = client.leaderSelector("e", "r", r).start()) {
            await("elected", WAIT, () -> r.grantCount() == 1);
            StreamObserver<CampaignResponse> first = a.campaigns.take();
            first.onNext(CampaignResponse.newBuilder().setSuspended(Suspended.getDefaultInstance()).build());
            await("lost and interrupted", WAIT, () -> r.lossCount() == 1 && r.interruptCount() == 1);
            assertEquals(LossReason.SUSPENDED, r.losses.get(0));
            await("the stream cancelled", WAIT, () -> a.campaignEndCount() == 1);
            assertEquals(Status.Code.CANCELLED, a.campaignEnds.get(0).getCode());
            await("elected again", WAIT, () -> r.grantCount() == 2);
            assertEquals(a.endpoint(), r.grant(1).endpoint().toString(), "same gateway after suspended");
        }
    }

    @Test
    void aGrantAfterASuspensionHeardWhileQueuedIsLostAtOnce() throws Exception {
        Fake a = fake("a");
        a.suspendNextBeforeElected.set(true);
        Fixture.Recorder r = new Fixture.Recorder("r");
        try (ZkgateClient client = Fixture.client(a.endpoint());
                LeaderSelector s = client.leaderSelector("e", "r", r).start()) {
            // queued, suspended (no resumed), elected: the grant is lost as it is granted…
            await("lost", WAIT, () -> r.lossCount() == 1);
            assertEquals(LossReason.SUSPENDED, r.losses.get(0));
            await("the stream cancelled", WAIT, () -> a.campaignEndCount() == 1);
            // …and the next campaign, with no suspension, holds.
            await("elected again", WAIT, () -> r.grantCount() == 2);
            assertEquals(1, r.lossCount(), "the second grant holds");
        }
    }

    @Test
    void abortedIsEndedAndSilenceMovesToTheNextGateway() throws Exception {
        Fake a = fake("a");
        Fake b = fake("b");
        Fixture.Recorder r = new Fixture.Recorder("r");
        try (ZkgateClient client = Fixture.client(a.endpoint(), b.endpoint());
                LeaderSelector s = client.leaderSelector("e", "r", r).start()) {
            await("elected", WAIT, () -> r.grantCount() == 1);
            a.silenceLimit = Duration.ofMillis(300);
            a.campaigns.take().onError(Status.ABORTED.withDescription("session lost").asRuntimeException());
            await("lost", WAIT, () -> r.lossCount() == 1);
            assertEquals(LossReason.ENDED, r.losses.get(0));
            await("elected again on a", WAIT, () -> r.grantCount() == 2);
            assertEquals(a.endpoint(), r.grant(1).endpoint().toString());
            long since = System.nanoTime();
            // a now says nothing at all after `elected`: silence after 300 ms.
            await("lost to silence", WAIT, () -> r.lossCount() == 2);
            long took = r.lostAt.get(1) - since;
            assertEquals(LossReason.SILENCE, r.losses.get(1));
            // The bound: silence_limit plus what a loaded machine may add to the watchdog's wake-up.
            assertTrue(took < Duration.ofMillis(300 + 1000).toNanos(), "silence decided after " + took / 1_000_000 + " ms");
            await("elected on b", WAIT, () -> r.grantCount() == 3);
            assertEquals(b.endpoint(), r.grant(2).endpoint().toString(), "the next gateway after silence");
        }
    }

    /**
     * A process frozen past its deadline (SIGSTOP, a stalled VM) finds, when it runs again, both
     * its watchdog due and messages that waited in its socket meanwhile — heartbeats sent before
     * its gateway froze too, say. Heard late they say nothing about now: the silence came first
     * and is final (G3b; found by a probe that froze a holder, then its gateway, and saw the
     * thawed holder hold on for another silence limit beside its successor). The clock here
     * jumps an hour on before the heartbeat is read; the watchdog's own wait (a minute) has not
     * run out.
     */
    @Test
    void aHeartbeatHeardAfterTheDeadlineDoesNotReviveTheHold() throws Exception {
        Fake a = fake("a");
        a.silenceLimit = Duration.ofMinutes(1);
        Fixture.Recorder r = new Fixture.Recorder("r");
        java.util.function.LongSupplier real = HoldStream.clock;
        try (ZkgateClient client = Fixture.client(a.endpoint());
                LeaderSelector s = client.leaderSelector("e", "r", r).start()) {
            await("elected", WAIT, () -> r.grantCount() == 1);
            StreamObserver<CampaignResponse> stream = a.campaigns.take();
            HoldStream.clock = () -> real.getAsLong() + Duration.ofHours(1).toNanos();
            // Asked now, before the monitor has read anything more: not held any more.
            assertFalse(r.grant(0).isHeld(), "past the deadline, before the monitor reads on");
            stream.onNext(CampaignResponse.newBuilder().setHeartbeat(Heartbeat.getDefaultInstance()).build());
            await("lost", WAIT, () -> r.lossCount() == 1);
            assertEquals(LossReason.SILENCE, r.losses.get(0));
            await("the stream cancelled", WAIT, () -> a.campaignEndCount() == 1);
        } finally {
            HoldStream.clock = real;
        }
    }

    @Test
    void observeReconnectsAndNeverDeliversALowerToken() throws Exception {
        Fake a = fake("a");
        Fake b = fake("b");
        a.observe = o -> {
            o.onNext(leader(10));
            o.onError(Status.UNAVAILABLE.withDescription("draining").asRuntimeException());
        };
        b.observe = o -> {
            o.onNext(leader(7)); // a lagging gateway's first message: older than what was seen
            o.onNext(leader(12));
            o.onNext(ObserveResponse.getDefaultInstance()); // vacant
        };
        List<Optional<LeaderInfo>> seen = new ArrayList<>();
        try (ZkgateClient client = Fixture.client(a.endpoint(), b.endpoint());
                Observation o = client.observe("e", x -> {
                    synchronized (seen) {
                        seen.add(x);
                    }
                })) {
            await("three messages", WAIT, () -> {
                synchronized (seen) {
                    return seen.size() >= 3;
                }
            });
            synchronized (seen) {
                assertEquals(10, seen.get(0).get().fencingToken());
                assertEquals(12, seen.get(1).get().fencingToken(), "7 is never delivered");
                assertTrue(seen.get(2).isEmpty());
            }
        }
    }

    @Test
    void unaryCallsFailOverOnUnavailable() throws Exception {
        Fake a = fake("a");
        Fake b = fake("b");
        a.leaderAnswer = Status.UNAVAILABLE;
        try (ZkgateClient client = Fixture.client(a.endpoint(), b.endpoint())) {
            assertEquals("from-b", client.leader("e").get().candidate());
            a.leaderAnswer = null;
            assertEquals("from-b", client.leader("e").get().candidate(), "sticks to the one that answered");
        }
        a.server.shutdownNow().awaitTermination();
        try (ZkgateClient client = Fixture.client(a.endpoint(), b.endpoint())) {
            assertEquals("from-b", client.leader("e").get().candidate(), "a refused connection moves on");
        }
    }
}
