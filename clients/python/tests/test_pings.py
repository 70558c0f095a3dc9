"""The lease on the holder's own clock (clients/CONFORMANCE.md, "The lease on the holder's own
clock (pings)"), against a scripted gateway in this process: the join/acquire is ping 1, a
waiter pings every third of ``queued.silence_limit``, a holder at once when granted and then
every quarter of its grant's limit; the deadline is the send of the ping the grant or a
``heartbeat{seq}`` answers + ``silence_limit``, and nothing else moves it; a grant whose lease
ran out on its way (or that names no ping) is recorded and lost at once, by silence; with a
gateway that does not answer pings (``answers_pings`` false) the old watchdog, restarted by
every message heard.

The gateway runs in this process, so its ``time.monotonic()`` is the helper's clock: a ping's
receipt bounds its send from above (the helper records the send before it writes).

The scenarios are written once, as coroutines that only read the hold's attributes, and run for
the threaded API and for zkgate.aio, for elections and for locks."""

import asyncio
import contextlib
import queue
import threading
import time
from concurrent import futures

import grpc
import pytest
from google.protobuf import duration_pb2

import zkgate
import zkgate.aio as zk
from zkgate._lease import REMEMBERED, Lease
from zkgate.v1 import common_pb2 as common
from zkgate.v1 import election_pb2 as epb
from zkgate.v1 import election_pb2_grpc as epb_grpc
from zkgate.v1 import lock_pb2 as lpb
from zkgate.v1 import lock_pb2_grpc as lpb_grpc

STEP = 10.0
# Slack for scheduling on a busy machine, where a bound cannot be exact.
SLACK = 0.35


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class _Gateway(epb_grpc.ElectionServicer, lpb_grpc.LockServicer):
    """One holder stream (Campaign or Acquire): ``queued`` (answering pings or not, with a
    waiter's silence-limit hint), then whatever the test pushes with :meth:`send`. Records the
    first message and every ping with the moment it was read."""

    def __init__(self, answers_pings: bool = True, hint: float = 0.6):
        self.answers_pings = answers_pings
        self.hint = hint
        self.first = None
        self.pings = []  # (seq, time.monotonic() when read)
        self.other = []  # requests other than pings (keep_alive, resign, release)
        self.cancelled = threading.Event()
        self._out: "queue.Queue" = queue.Queue()
        self._lock = threading.Lock()
        self.service = None

    # -- what the test does
    def send(self, event: str, **fields) -> None:
        """``grant`` (ping_seq, limit), ``heartbeat`` (seq), ``proclaimed`` (value)."""
        self._out.put((event, fields))

    def ping_log(self):
        with self._lock:
            return list(self.pings)

    # -- the servicer
    def Campaign(self, request_iterator, context):
        return self._serve("campaign", request_iterator, context)

    def Acquire(self, request_iterator, context):
        return self._serve("lock", request_iterator, context)

    def _serve(self, service, request_iterator, context):
        self.service = service
        context.add_callback(self.cancelled.set)
        self.first = next(request_iterator)
        threading.Thread(target=self._read, args=(request_iterator,), daemon=True).start()
        queued = common.Queued(lease="lease", position=1, answers_pings=self.answers_pings)
        if self.hint:
            queued.silence_limit.CopyFrom(_duration(self.hint))
        yield self._response(service, "queued", queued)
        while not self.cancelled.is_set():
            try:
                event, fields = self._out.get(timeout=0.05)
            except queue.Empty:
                continue
            if event == "end":
                return
            yield self._build(service, event, fields)

    def _read(self, request_iterator):
        with contextlib.suppress(Exception):
            for r in request_iterator:
                if r.HasField("ping"):
                    with self._lock:
                        self.pings.append((r.ping.seq, time.monotonic()))
                else:
                    self.other.append(r.WhichOneof("request"))
                    if r.WhichOneof("request") in ("resign", "release"):
                        self._out.put(("end", {}))

    @staticmethod
    def _response(service, field, msg):
        cls = epb.CampaignResponse if service == "campaign" else lpb.AcquireResponse
        return cls(**{field: msg})

    def _build(self, service, event, f):
        if event == "grant":
            limit = _duration(f["limit"])
            if service == "campaign":
                leader = epb.Leader(election="e", candidate="a", fencing_token=7)
                msg = epb.Elected(leader=leader, silence_limit=limit, ping_seq=f["ping_seq"])
                return self._response(service, "elected", msg)
            msg = lpb.Acquired(
                lease="lease", fencing_token=7, silence_limit=limit, ping_seq=f["ping_seq"]
            )
            return self._response(service, "acquired", msg)
        if event == "heartbeat":
            return self._response(service, "heartbeat", common.Heartbeat(seq=f["seq"]))
        if event == "proclaimed":
            leader = epb.Leader(election="e", candidate="a", fencing_token=7, value=f["value"])
            return self._response(service, "proclaimed", epb.Proclaimed(leader=leader))
        raise ValueError(event)


def _serve(gw: _Gateway):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    epb_grpc.add_ElectionServicer_to_server(gw, server)
    lpb_grpc.add_LockServicer_to_server(gw, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def _run(gw: _Gateway, api: str, kind: str, scenario) -> None:
    """Runs ``await scenario(hold, t0, events)`` with a Campaign or Lock (``kind``) of the
    threaded API or of zkgate.aio (``api``) on ``gw``; ``t0``: the clock just before the hold
    was made; ``events``: "granted"/"lost" as the helper reported them."""
    server, addr = _serve(gw)
    events = []
    hooks = dict(
        _grant_hook=lambda s: events.append("granted"),
        _loss_hook=lambda s: events.append("lost"),
    )

    async def main():
        if api == "threaded":
            t0 = time.monotonic()
            if kind == "campaign":
                h = zkgate.Campaign(addr, "e", "a", **hooks)
            else:
                h = zkgate.Lock(addr, "l", owner="a", **hooks)
            try:
                await scenario(h, t0, events)
            finally:
                h.close()
            return
        async with zk.Fleet([addr]) as fleet:
            t0 = time.monotonic()
            if kind == "campaign":
                h = zk.Campaign(fleet, "e", "a", **hooks)
            else:
                h = zk.Lock(fleet, "l", owner="a", **hooks)
            try:
                await scenario(h, t0, events)
            finally:
                await h.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        server.stop(None)


async def _until(pred, what: str, timeout: float = STEP):
    """Polls ``pred`` (without blocking the event loop) until it is true."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        await asyncio.sleep(0.005)


def _holding(h) -> bool:
    return h.is_leader if hasattr(h, "is_leader") else h.is_held


APIS = ["threaded", "aio"]
KINDS = ["campaign", "lock"]


# ----------------------------------------------------------------------------- the pure rule


def test_the_deadline_runs_from_the_send_of_the_newest_answered_ping():
    t0 = 100.0
    limit = 1.0
    # (pings sent at these offsets, grant's ping_seq, answers in order, deadline offset)
    table = [
        ([], 1, [], 1.0, "granted at once on the join"),
        ([0.3, 0.6], 3, [], 1.6, "a waiter's newest ping"),
        ([0.3, 0.6], 2, [3], 1.6, "granted on 2, then 3 answered"),
        ([0.3], 2, [2, 2], 1.3, "a replayed answer moves nothing"),
        ([0.3, 0.6], 3, [2], 1.6, "an older answer moves nothing back"),
        ([0.3], 2, [0, 9], 1.3, "unsolicited or unknown: nothing"),
        ([0.3], 0, [], None, "a grant naming no ping anchors nothing"),
        ([0.3], 9, [2], None, "a grant naming an unknown ping anchors nothing"),
    ]
    for pings, grant, answers, want, what in table:
        lease = Lease(t0)
        for i, at in enumerate(pings):
            assert lease.ping(t0 + at) == i + 2, what
        until = lease.granted(limit, grant)
        for a in answers:
            until = lease.answered(a)
        if want is None:
            assert until is None, what
        else:
            assert until == pytest.approx(t0 + want), what
    assert Lease(t0).granted(None, 1) is None, "a grant without a limit anchors nothing"


def test_only_the_newest_pings_are_remembered():
    lease = Lease(0.0)
    for i in range(REMEMBERED + 10):
        lease.ping(float(i))
    assert len(lease.sent) == REMEMBERED
    assert lease.granted(1.0, 1) is None, "the join's ping is forgotten"
    newest = lease.last_seq
    assert lease.answered(newest) == pytest.approx(REMEMBERED + 10 - 1 + 1.0)
    assert not lease.sent, "answered and older ones dropped"


# ----------------------------------------------------------------------------- the wiring


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("api", APIS)
def test_an_anchored_lease_runs_from_the_send_of_the_newest_answered_ping(api, kind):
    """Waiter pings every third of the hint (0.6 s), holder pings at once and every quarter of
    its limit (2.4 s); the deadline is the answered ping's send + the limit; unsolicited
    heartbeats, proclaims and stale answers move nothing; the hold is lost by silence at that
    deadline although unsolicited heartbeats keep arriving."""
    gw = _Gateway(answers_pings=True, hint=0.6)
    limit = 2.4

    async def scenario(h, t0, events):
        # Waiting: pings 2, 3, 4, each a third of the hint after the one before.
        await _until(lambda: len(gw.ping_log()) >= 3, "pinged while waiting")
        first = gw.first.join if kind == "campaign" else gw.first.acquire
        assert first.ping_seq == 1, "the join/acquire is ping 1"
        waiting = gw.ping_log()[:3]
        assert [s for s, _ in waiting] == [2, 3, 4]
        times = [t0] + [at for _, at in waiting]
        for before, after in zip(times, times[1:]):
            assert 0.2 - 0.01 <= after - before <= 0.2 + SLACK, times
        assert not h.lost.is_set() and not _holding(h)

        # Granted on ping 2, read after ping 4 was: held until ping 2's send + the limit, not
        # the grant's arrival + the limit.
        recv2 = waiting[0][1]
        pushed = time.monotonic()
        gw.send("grant", ping_seq=2, limit=limit)
        await _until(lambda: h._granted.is_set(), "granted")
        assert _holding(h) and events == ["granted"]
        assert t0 + 0.2 + limit <= h._deadline <= recv2 + limit, (h._deadline - t0, recv2 - t0)

        # A holder pings at once (ping 5), not a quarter of the limit (0.6 s) later.
        await _until(lambda: any(s == 5 for s, _ in gw.ping_log()), "pinged on the grant")
        recv5 = dict(gw.ping_log())[5]
        assert recv5 - pushed < 0.6 - 0.1, recv5 - pushed
        granted_until = h._deadline

        # Unsolicited heartbeats (and, for a campaign, a proclaim) move nothing.
        gw.send("heartbeat", seq=0)
        if kind == "campaign":
            gw.send("proclaimed", value=b"v2")
            await _until(lambda: h.leader.value == b"v2", "proclaimed")
        await asyncio.sleep(0.2)
        assert h._deadline == granted_until, "heartbeat{seq: 0} moved the deadline"

        # The answer to ping 5, read late: the lease runs from ping 5's send.
        await asyncio.sleep(0.2)
        gw.send("heartbeat", seq=5)
        await _until(lambda: h._deadline != granted_until, "answered")
        assert recv5 + limit - SLACK <= h._deadline <= recv5 + limit, (h._deadline - t0, recv5 - t0)
        answered_until = h._deadline
        # An older answer (ping 3, forgotten once 5 was answered) moves nothing.
        gw.send("heartbeat", seq=3)
        await asyncio.sleep(0.2)
        assert h._deadline == answered_until

        # A holder pings every quarter of its limit: 6 and 7, 0.6 s apart.
        await _until(lambda: any(s == 7 for s, _ in gw.ping_log()), "pinged while holding")
        log = dict(gw.ping_log())
        assert log[6] - log[5] >= 0.6 - 0.02 and log[7] - log[6] >= 0.6 - 0.02, log
        assert log[6] - log[5] <= 0.6 + SLACK and log[7] - log[6] <= 0.6 + SLACK, log

        # Nothing more answered, but unsolicited heartbeats keep coming: lost at the deadline.
        while not h.lost.is_set() and time.monotonic() < answered_until + STEP:
            gw.send("heartbeat", seq=0)
            await asyncio.sleep(0.1)
        lost_at = time.monotonic()
        assert h.lost.is_set(), "unsolicited heartbeats kept the hold"
        assert h.loss == "silence", h.lost_reason
        assert "silence limit" in h.lost_reason
        assert answered_until <= lost_at <= answered_until + SLACK, lost_at - answered_until
        assert not _holding(h)
        assert events == ["granted", "lost"]
        await _until(gw.cancelled.is_set, "cancelled by the helper")

    _run(gw, api, kind, scenario)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("api", APIS)
def test_a_grant_whose_lease_ran_out_on_its_way_is_lost_at_once(api, kind):
    """Granted on ping 1 with a 1 s limit, read 1.2 s after the join left (a link slower than
    the limit allows); granted on ping 0; granted on a ping never sent: each is recorded (the
    grant reported, the fencing token kept) and lost at once with reason silence — not held
    until the limit has passed since it was heard."""
    cases = [(1, 1.2, 1.0, "late"), (0, 0.0, 10.0, "no ping"), (9, 0.0, 10.0, "unknown")]
    for ping_seq, late, limit, what in cases:
        gw = _Gateway(answers_pings=True, hint=30.0)

        async def scenario(h, t0, events):
            await _until(lambda: h.queued.is_set(), "queued")
            await asyncio.sleep(max(0.0, t0 + late - time.monotonic()))
            pushed = time.monotonic()
            gw.send("grant", ping_seq=ping_seq, limit=limit)
            await _until(lambda: h.lost.is_set(), f"{what}: lost", timeout=limit / 2)
            assert time.monotonic() - pushed < limit / 2, what
            assert h._granted.is_set(), what
            assert h.fencing_token == 7, what
            assert h.loss == "silence", (what, h.lost_reason)
            assert not _holding(h), what
            assert events == ["granted", "lost"], what
            await _until(gw.cancelled.is_set, f"{what}: cancelled by the helper")
            if api == "threaded":
                with pytest.raises(h.lost_error):
                    h.check()

        _run(gw, api, kind, scenario)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("api", APIS)
def test_a_gateway_that_does_not_answer_pings_gets_the_hearing_watchdog(api, kind):
    """``answers_pings`` false (an older gateway): no pings at all; the deadline is the last
    message heard + the limit, and every message heard (also ``heartbeat{seq: 0}``) moves it."""
    gw = _Gateway(answers_pings=False, hint=0.3)
    limit = 0.8

    async def scenario(h, t0, events):
        await _until(lambda: h.queued.is_set(), "queued")
        await asyncio.sleep(0.4)
        gw.send("grant", ping_seq=0, limit=limit)
        await _until(lambda: h._granted.is_set(), "granted")
        heard = time.monotonic()
        assert _holding(h), "a grant naming no ping is held by an older gateway's rule"
        assert heard - SLACK <= h._deadline - limit <= heard, "the grant's arrival + the limit"
        for _ in range(3):
            await asyncio.sleep(0.4)
            before = h._deadline
            gw.send("heartbeat", seq=0)
            await _until(lambda: h._deadline != before, "a heartbeat restarted the watchdog")
        last = time.monotonic()
        assert last - SLACK <= h._deadline - limit <= last
        await _until(lambda: h.lost.is_set(), "lost by silence")
        assert h.loss == "silence" and "silence limit" in h.lost_reason
        assert time.monotonic() - last >= limit - 0.05
        assert gw.ping_log() == [], "no pings to a gateway that does not answer them"
        first = gw.first.join if kind == "campaign" else gw.first.acquire
        assert first.ping_seq == 1

    _run(gw, api, kind, scenario)
