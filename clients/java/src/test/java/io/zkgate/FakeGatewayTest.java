package io.zkgate;

import static io.zkgate.Fixture.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import io.zkgate.v1.AcquireRequest;
import io.zkgate.v1.AcquireResponse;
import io.zkgate.v1.Acquired;
import io.zkgate.v1.CampaignRequest;
import io.zkgate.v1.CampaignResponse;
import io.zkgate.v1.Elected;
import io.zkgate.v1.ElectionGrpc;
import io.zkgate.v1.Heartbeat;
import io.zkgate.v1.Leader;
import io.zkgate.v1.LeaderRequest;
import io.zkgate.v1.LeaderResponse;
import io.zkgate.v1.LockGrpc;
import io.zkgate.v1.ObserveRequest;
import io.zkgate.v1.ObserveResponse;
import io.zkgate.v1.Proclaimed;
import io.zkgate.v1.Queued;
import io.zkgate.v1.Resumed;
import io.zkgate.v1.Suspended;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
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
        pingFakes.forEach(f -> f.server.shutdownNow());
        HoldStream.clock = REAL_CLOCK;
        HoldStream.pollCap = Long.MAX_VALUE;
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

    // ---- The lease on the holder's own clock (pings; clients/CONFORMANCE.md) ----

    static final java.util.function.LongSupplier REAL_CLOCK = HoldStream.clock;
    /** An arbitrary origin for the test's clock (ns). */
    static final long T0 = 7_000_000_000L;
    /** How long a negative check waits for something that must not happen. */
    static final long QUIET_MS = 150;

    /** One scripted Campaign or Acquire stream: what the test makes the gateway send. */
    interface Script {
        void granted(Duration silenceLimit, long pingSeq);

        void heartbeat(long seq);

        /** A message that answers nothing ({@code proclaimed}, or {@code resumed} on a lock). */
        void other();
    }

    /**
     * A scripted gateway (Election and Lock) for the pinging holder: every campaign or acquire
     * is queued (with {@link #answersPings} and {@link #queuedLimit}) and handed to the test as
     * a {@link Script}; it records the first message's {@code ping_seq} and each ping with the
     * test clock's reading when it arrived.
     */
    static final class PingFake {
        final Server server;
        final int port;
        volatile boolean answersPings = true;
        volatile Duration queuedLimit;
        volatile long firstPingSeq = -1;
        final LinkedBlockingQueue<Script> streams = new LinkedBlockingQueue<>();
        /** {seq, clock} per ping received. */
        final List<long[]> pings = new ArrayList<>();
        final List<Status> ends = new ArrayList<>();

        PingFake() throws Exception {
            ElectionGrpc.ElectionImplBase election = new ElectionGrpc.ElectionImplBase() {
                @Override
                public StreamObserver<CampaignRequest> campaign(StreamObserver<CampaignResponse> out) {
                    return new Requests<>(r -> {
                        if (r.hasJoin()) {
                            firstPingSeq = r.getJoin().getPingSeq();
                            out.onNext(CampaignResponse.newBuilder().setQueued(queued()).build());
                            streams.add(new Script() {
                                @Override
                                public void granted(Duration limit, long pingSeq) {
                                    out.onNext(CampaignResponse.newBuilder().setElected(Elected.newBuilder()
                                            .setLeader(Leader.newBuilder().setElection(r.getJoin().getElection())
                                                    .setCandidate(r.getJoin().getCandidate()).setFencingToken(9))
                                            .setSilenceLimit(HoldSpec.proto(limit)).setPingSeq(pingSeq)).build());
                                }

                                @Override
                                public void heartbeat(long seq) {
                                    out.onNext(CampaignResponse.newBuilder()
                                            .setHeartbeat(Heartbeat.newBuilder().setSeq(seq)).build());
                                }

                                @Override
                                public void other() {
                                    out.onNext(CampaignResponse.newBuilder().setProclaimed(Proclaimed.newBuilder()
                                            .setLeader(Leader.newBuilder().setFencingToken(9))).build());
                                }
                            });
                        } else if (r.hasPing()) {
                            pinged(r.getPing().getSeq());
                        }
                    });
                }
            };
            LockGrpc.LockImplBase lock = new LockGrpc.LockImplBase() {
                @Override
                public StreamObserver<AcquireRequest> acquire(StreamObserver<AcquireResponse> out) {
                    return new Requests<>(r -> {
                        if (r.hasAcquire()) {
                            firstPingSeq = r.getAcquire().getPingSeq();
                            out.onNext(AcquireResponse.newBuilder().setQueued(queued()).build());
                            streams.add(new Script() {
                                @Override
                                public void granted(Duration limit, long pingSeq) {
                                    out.onNext(AcquireResponse.newBuilder().setAcquired(Acquired.newBuilder()
                                            .setLease("l").setFencingToken(9).setSilenceLimit(HoldSpec.proto(limit))
                                            .setPingSeq(pingSeq)).build());
                                }

                                @Override
                                public void heartbeat(long seq) {
                                    out.onNext(AcquireResponse.newBuilder()
                                            .setHeartbeat(Heartbeat.newBuilder().setSeq(seq)).build());
                                }

                                @Override
                                public void other() {
                                    out.onNext(AcquireResponse.newBuilder().setResumed(Resumed.getDefaultInstance())
                                            .build());
                                }
                            });
                        } else if (r.hasPing()) {
                            pinged(r.getPing().getSeq());
                        }
                    });
                }
            };
            server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0)).addService(election)
                    .addService(lock).build().start();
            port = server.getPort();
        }

        /** The request side: each request to {@code onRequest}, the end recorded. */
        final class Requests<Q> implements StreamObserver<Q> {
            final Consumer<Q> onRequest;

            Requests(Consumer<Q> onRequest) {
                this.onRequest = onRequest;
            }

            @Override
            public void onNext(Q q) {
                onRequest.accept(q);
            }

            @Override
            public void onError(Throwable t) {
                synchronized (ends) {
                    ends.add(Status.fromThrowable(t));
                }
            }

            @Override
            public void onCompleted() {
                synchronized (ends) {
                    ends.add(Status.OK);
                }
            }
        }

        Queued queued() {
            Queued.Builder q = Queued.newBuilder().setLease("lease").setPosition(1).setAnswersPings(answersPings);
            if (queuedLimit != null) {
                q.setSilenceLimit(HoldSpec.proto(queuedLimit));
            }
            return q.build();
        }

        void pinged(long seq) {
            synchronized (pings) {
                pings.add(new long[] {seq, HoldStream.clock.getAsLong()});
            }
        }

        int pingCount() {
            synchronized (pings) {
                return pings.size();
            }
        }

        /** The {@code i}th ping received: its seq and when (ms after T0 on the test clock). */
        List<Long> ping(int i) {
            synchronized (pings) {
                long[] p = pings.get(i);
                return List.of(p[0], Duration.ofNanos(p[1] - T0).toMillis());
            }
        }

        int endCount() {
            synchronized (ends) {
                return ends.size();
            }
        }

        String endpoint() {
            return "http://127.0.0.1:" + port;
        }
    }

    final List<PingFake> pingFakes = new ArrayList<>();

    /** The test's clock, at T0 + ms milliseconds. */
    final AtomicLong now = new AtomicLong(T0);

    void at(long ms) {
        now.set(T0 + Duration.ofMillis(ms).toNanos());
    }

    /** ms after T0, as a deadline on the test clock. */
    static OptionalLong atMs(long ms) {
        return OptionalLong.of(T0 + Duration.ofMillis(ms).toNanos());
    }

    /** What a {@link HoldStream}'s observer was told, in order. */
    static final class Seen implements HoldStream.Observer {
        final List<String> events = new ArrayList<>();

        @Override
        public synchronized void granted(Leadership hold) {
            events.add("granted");
        }

        @Override
        public synchronized void lost(Leadership hold, LossReason reason) {
            events.add("lost:" + reason.wire());
        }

        synchronized List<String> events() {
            return List.copyOf(events);
        }
    }

    /** A fake on the test clock (T0 now), which the monitor reads every 2 ms. */
    PingFake pingFake(Duration queuedLimit) throws Exception {
        HoldStream.clock = now::get;
        HoldStream.pollCap = Duration.ofMillis(2).toNanos();
        at(0);
        PingFake f = new PingFake();
        f.queuedLimit = queuedLimit;
        pingFakes.add(f);
        return f;
    }

    static HoldSpec spec(boolean lock) {
        return lock ? new HoldSpec.LockRequest("l", "r", 1, LockMode.WRITE, null)
                : new HoldSpec.Candidacy("e", "r", new byte[0]);
    }

    /** Waits for the next ping and checks its seq and when it was sent (ms after T0). */
    static void nextPing(PingFake f, int index, long seq, long atMs) throws InterruptedException {
        await("ping " + seq, WAIT, () -> f.pingCount() > index);
        assertEquals(List.of(seq, atMs), f.ping(index), "ping " + index);
    }

    @Test
    void anAnchoredLeaseRunsFromTheSendOfTheNewestAnsweredPing() throws Exception {
        anchoredLease(false);
    }

    @Test
    void aLocksAnchoredLeaseRunsFromTheSendOfTheNewestAnsweredPing() throws Exception {
        anchoredLease(true);
    }

    /**
     * With a gateway that answers pings: the first message is ping 1; a waiter pings every
     * third of queued.silence_limit (900 ms here), a holder at once when granted and every
     * quarter of its grant's; the deadline is the send of the ping the grant names (or the
     * newest answered one) + the limit; heartbeat{0} and other messages move nothing, nor does a
     * replayed answer; and the hold is lost by silence at the deadline, not a limit after the
     * last message heard.
     */
    void anchoredLease(boolean lock) throws Exception {
        PingFake f = pingFake(Duration.ofMillis(900));
        Seen seen = new Seen();
        try (ZkgateClient client = Fixture.client(f.endpoint())) {
            HoldStream hs = new HoldStream(client, 0, spec(lock), null, seen);
            hs.start();
            Script gw = f.streams.poll(WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
            assertEquals(1, f.firstPingSeq, "the first message is ping 1");
            await("queued", WAIT, hs::queued);
            // Waiting: every 300 ms on the holder's clock, not before.
            at(299);
            Thread.sleep(QUIET_MS);
            assertEquals(0, f.pingCount(), "no ping before a third of the limit");
            at(300);
            nextPing(f, 0, 2, 300);
            at(600);
            nextPing(f, 1, 3, 600);
            at(900);
            nextPing(f, 2, 4, 900);
            at(1000);
            Thread.sleep(QUIET_MS);
            assertEquals(3, f.pingCount());
            // Granted on ping 4 (sent at 900), read at 1000: held until 1800, and a ping at once.
            gw.granted(Duration.ofMillis(900), 4);
            await("granted", WAIT, () -> seen.events().equals(List.of("granted")));
            Leadership h = hs.granted.get();
            assertEquals(atMs(1800), h.deadline(), "ping 4's send + the limit");
            nextPing(f, 3, 5, 1000);
            // Unsolicited heartbeats and other messages move nothing.
            at(1100);
            gw.heartbeat(0);
            gw.other();
            Thread.sleep(QUIET_MS);
            assertEquals(atMs(1800), h.deadline(), "heartbeat{0} and other messages move nothing");
            // Holding: every 225 ms.
            at(1225);
            nextPing(f, 4, 6, 1225);
            at(1450);
            nextPing(f, 5, 7, 1450);
            // The answer to ping 5 arrives 600 ms after its send: the lease runs from the send.
            at(1600);
            gw.heartbeat(5);
            await("moved by the answer to ping 5", WAIT, () -> h.deadline().equals(atMs(1900)));
            gw.heartbeat(5);
            gw.heartbeat(0);
            Thread.sleep(QUIET_MS);
            assertEquals(atMs(1900), h.deadline(), "a replayed answer moves nothing");
            at(1899);
            Thread.sleep(QUIET_MS);
            assertTrue(h.isHeld(), "held until the deadline");
            assertEquals(List.of("granted"), seen.events());
            // Nothing more answered: lost at 1900, not 900 ms after the last message heard.
            at(1900);
            assertFalse(h.isHeld(), "past the deadline, even before the monitor reports it");
            await("lost", WAIT, () -> seen.events().size() == 2);
            assertEquals(List.of("granted", "lost:silence"), seen.events());
            assertEquals(Optional.of(LossReason.SILENCE), h.lossReason());
            await("the stream cancelled", WAIT, () -> f.endCount() == 1);
            assertEquals(Status.Code.CANCELLED, f.ends.get(0).getCode());
        }
    }

    /**
     * A grant whose lease is over when it is read (its ping sent longer than the limit ago: a
     * link slower than the limit allows), or that names no ping this stream sent (0, unknown),
     * is recorded and lost at once with reason silence; one read within the limit is held.
     */
    @Test
    void aGrantWhoseLeaseRanOutOnItsWayIsRecordedAndLostAtOnce() throws Exception {
        record Case(long pingSeq, long readAtMs, boolean held, String what) {}
        for (Case c : List.of(new Case(1, 600, false, "late"), new Case(1, 500, false, "read at the deadline"),
                new Case(0, 0, false, "no ping"), new Case(9, 0, false, "unknown ping"),
                new Case(1, 400, true, "in time"))) {
            PingFake f = pingFake(Duration.ofSeconds(10));
            Seen seen = new Seen();
            try (ZkgateClient client = Fixture.client(f.endpoint())) {
                HoldStream hs = new HoldStream(client, 0, spec(false), null, seen);
                hs.start();
                Script gw = f.streams.poll(WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
                await("queued", WAIT, hs::queued);
                at(c.readAtMs);
                gw.granted(Duration.ofMillis(500), c.pingSeq);
                Leadership h = hs.granted.get(WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
                assertEquals(9, h.fencingToken(), c.what);
                if (c.held) {
                    assertEquals(atMs(500), h.deadline(), c.what);
                    Thread.sleep(QUIET_MS);
                    assertTrue(h.isHeld(), c.what);
                    assertEquals(List.of("granted"), seen.events(), c.what);
                    continue;
                }
                await("lost " + c.what, WAIT, () -> seen.events().size() == 2);
                assertEquals(List.of("granted", "lost:silence"), seen.events(), c.what);
                assertFalse(h.isHeld(), c.what);
                assertEquals(Optional.of(LossReason.SILENCE), h.lossReason(), c.what);
                await("the stream cancelled", WAIT, () -> f.endCount() == 1);
                assertEquals(Status.Code.CANCELLED, f.ends.get(0).getCode(), c.what);
            }
        }
    }

    /**
     * With a gateway that does not answer pings (older: queued.answers_pings false) the helper
     * sends no pings, and every message heard restarts the watchdog, as before.
     */
    @Test
    void withAGatewayThatAnswersNoPingsEveryMessageRestartsTheWatchdog() throws Exception {
        PingFake f = pingFake(Duration.ofMillis(900));
        f.answersPings = false;
        Seen seen = new Seen();
        try (ZkgateClient client = Fixture.client(f.endpoint())) {
            HoldStream hs = new HoldStream(client, 0, spec(false), null, seen);
            hs.start();
            Script gw = f.streams.poll(WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
            await("queued", WAIT, hs::queued);
            at(5000);
            Thread.sleep(QUIET_MS);
            // Granted naming no ping (an older gateway's grant): held a limit from hearing it.
            gw.granted(Duration.ofMillis(900), 0);
            await("granted", WAIT, () -> seen.events().equals(List.of("granted")));
            Leadership h = hs.granted.get();
            assertEquals(atMs(5900), h.deadline());
            at(5500);
            gw.heartbeat(0);
            await("moved by a heartbeat", WAIT, () -> h.deadline().equals(atMs(6400)));
            at(6000);
            gw.other();
            await("moved by another message", WAIT, () -> h.deadline().equals(atMs(6900)));
            at(6899);
            Thread.sleep(QUIET_MS);
            assertTrue(h.isHeld());
            at(6900);
            await("lost", WAIT, () -> seen.events().size() == 2);
            assertEquals(List.of("granted", "lost:silence"), seen.events());
            assertEquals(0, f.pingCount(), "no pings to a gateway that does not answer them");
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
