"""The zkgate client for asyncio (``grpc.aio``): the same rules and names as the threaded API.

    import zkgate.aio as zk

    async with zk.Fleet(["http://10.0.0.1:50051", "http://10.0.0.2:50051"]) as fleet:
        async with zk.elect(fleet, "billing-cron", "host-1") as lead:
            while not lead.lost.is_set():
                await run_one_batch(fencing_token=lead.fencing_token)

* :class:`Campaign` / :class:`Lock`: one holder stream each (``queued``, then
  ``elected``/``acquired``), with the silence deadline (anchored on this process's clock by
  numbered pings when the gateway answers them, as in ``zkgate._stream``); the hold is lost —
  ``lost`` set, ``loss`` one of ``suspended``, ``silence``, ``unavailable``, ``ended``, the
  stream cancelled — on ``suspended``, when the lease runs out while holding, and when the
  stream ends.
  Until ``queued``, ``UNAVAILABLE`` moves the stream to the fleet's next endpoint (once per
  endpoint, with backoff). Make them inside a running event loop; ``await x.close()`` when done.
* :func:`elect` / :func:`lock`: async context managers (hold, yield, give up).
* :class:`Standby` (:func:`standby_campaign`, :func:`standby_lock`) and
  :func:`run_while_leader` / :func:`run_while_holding`: auto-requeue, as in ``zkgate.requeue``.
* :func:`leader`, :func:`candidates`, :func:`holders` (following ``next_page_token``),
  :func:`release`, :func:`validate`: unary calls with failover and the fleet's deadline;
  :func:`observe`: an async generator that reconnects and never goes back in fencing tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

import grpc
import grpc.aio

from zkgate._fleet import (
    ENDED,
    FAILOVER_CODES,
    FATAL_CODES,
    SILENCE,
    SUSPENDED,
    UNAVAILABLE,
    Backoff,
    Endpoints,
    Tls,
    loss_for_status,
)
from zkgate._fleet import Fleet as _Fleet
from zkgate._fleet import fleet_for as _fleet_for
from zkgate import _stream
from zkgate._lease import Lease
from zkgate._stream import (
    _TIMED_OUT,
    _end_requested,
    _late_grant_reason,
    _left,
    _overdue,
    _silence_reason,
    _sooner,
    seconds,
)
from zkgate.election import LeadershipLost
from zkgate.lock import BY_LEASE_EXTRA, LockLost, NotAcquired, _duration, _MODES
from zkgate.requeue import Refused
from zkgate.v1 import common_pb2
from zkgate.v1 import election_pb2 as epb
from zkgate.v1 import election_pb2_grpc as epb_grpc
from zkgate.v1 import lock_pb2 as lpb
from zkgate.v1 import lock_pb2_grpc as lpb_grpc

__all__ = [
    "Campaign",
    "Fleet",
    "LeadershipLost",
    "Lock",
    "LockLost",
    "NotAcquired",
    "Standby",
    "Tls",
    "candidates",
    "elect",
    "holders",
    "leader",
    "lock",
    "observe",
    "release",
    "run_while_holding",
    "run_while_leader",
    "standby_campaign",
    "standby_lock",
    "validate",
]


class Fleet(_Fleet):
    """A :class:`zkgate.Fleet` of ``grpc.aio`` channels; ``async with`` closes it."""

    def __init__(self, endpoints: Endpoints = None, **kwargs):
        super().__init__(endpoints, aio=True, **kwargs)

    async def __aenter__(self) -> "Fleet":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _fleet(target) -> tuple[_Fleet, bool]:
    return _fleet_for(target, aio=True)


async def _unary(target, fn, timeout: Optional[float] = None):
    fleet, own = _fleet(target)
    try:
        if timeout is not None:
            return await fleet.acall(lambda ch, _d: fn(ch, timeout))
        return await fleet.acall(fn)
    finally:
        if own:
            await fleet.aclose()


class _End:
    def __init__(self, code: grpc.StatusCode, details: str):
        self.code, self.details = code, details


class _HolderStream:
    lost_error: type = Exception
    ok_end_reason = "ended"

    def _open(self, target, open_call, first_request, on_lost, start, loss_hook, grant_hook) -> None:
        self.lease: Optional[str] = None
        self.position: Optional[int] = None
        self.silence_limit: Optional[float] = None
        self.queued = asyncio.Event()
        self._granted = asyncio.Event()
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self.loss: Optional[str] = None
        self.end_code: Optional[grpc.StatusCode] = None
        self.end_details: Optional[str] = None
        self._on_lost = on_lost
        self._loss_hook = loss_hook
        self._grant_hook = grant_hook
        self._closing = False
        # A ``suspended`` heard while queued, not yet followed by ``resumed`` (CONFORMANCE.md).
        self._suspended_queued = False
        # When silence becomes loss (``_stream._clock``), while held: with pings, the send of the
        # newest answered ping plus the limit; without, the last message plus the limit.
        self._deadline: Optional[float] = None
        # With a gateway that answers pings: as in zkgate._stream (owned by the watch task).
        self._lease: Optional[Lease] = None
        self._next_ping: Optional[float] = None
        self._ping_every: Optional[float] = None
        self._first_sent = _stream._clock()
        self._ping_task: Optional[asyncio.Task] = None
        # One write at a time on the call (gRPC allows no second one while one is pending).
        self._write_lock = asyncio.Lock()
        self._done = asyncio.Event()
        self._changed = asyncio.Condition()
        self._fleet, self._own_fleet = _fleet(target)
        self.endpoint_index = self._fleet.current if start is None else start % len(self._fleet)
        self._open_call = open_call
        self._first_request = first_request
        self._call = None
        self._inbox: "asyncio.Queue[Any]" = asyncio.Queue()
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read()), loop.create_task(self._watch())]

    @property
    def fleet(self) -> _Fleet:
        return self._fleet

    @property
    def endpoint(self) -> str:
        return str(self._fleet.endpoints[self.endpoint_index])

    @property
    def _holding(self) -> bool:
        # The deadline too: answers right even before the watching thread has run again (a
        # process just thawed); that thread then decides the loss, by silence. The stream's own
        # rules ask ``_held``.
        return self._held and not _overdue(self._deadline)

    @property
    def _held(self) -> bool:
        """Granted and not lost (the loss decided)."""
        return self._granted.is_set() and not self.lost.is_set()

    def check(self) -> None:
        if not self._holding:
            raise self.lost_error(self.lost_reason or "not granted (yet)")

    async def _write(self, request) -> None:
        """Writes ``request`` on the current call, after any write still pending."""
        async with self._write_lock:
            await self._call.write(request)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _wait_for(self, pred, timeout: Optional[float], what: str) -> None:
        async def wait():
            async with self._changed:
                await self._changed.wait_for(lambda: pred() or self.lost.is_set())

        try:
            await asyncio.wait_for(wait(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"not {what} within {timeout} s") from None

    async def wait_queued(self, timeout: Optional[float] = None) -> int:
        await self._wait_for(self.queued.is_set, timeout, "queued")
        if not self.queued.is_set():
            raise self.lost_error(self.lost_reason or "stream ended")
        return self.position

    async def _wait_granted(self, timeout: Optional[float], what: str) -> None:
        await self._wait_for(self._granted.is_set, timeout, what)
        if self.lost.is_set():
            raise self.lost_error(self.lost_reason or "stream ended")

    async def _leave(self, timeout: float) -> None:
        self._closing = True
        if not self._done.is_set():
            with contextlib.suppress(Exception):
                # Bounded: a write stuck behind flow control (a gateway that stopped reading)
                # must not keep the fallback below from cancelling.
                await asyncio.wait_for(self._write(self._leave_request()), timeout)
            try:
                await asyncio.wait_for(self._done.wait(), timeout)
            except asyncio.TimeoutError:
                self.cancel()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._done.wait(), timeout)

    def cancel(self) -> None:
        """Drops the stream at once; the gateway deletes the znode within milliseconds."""
        self._closing = True
        self._wake.set()
        if self._call is not None:
            self._call.cancel()

    async def close(self) -> None:
        """Gives the hold up (if still open) and closes the fleet if this object made it."""
        try:
            await self._leave(5.0)
        finally:
            for t in self._tasks:
                t.cancel()
            if self._own_fleet:
                await self._fleet.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _read(self) -> None:
        backoff = Backoff()
        tries = 1
        while True:
            # The first message is ping 1: its send time is read before the stream opens.
            self._first_sent = _stream._clock()
            call = self._open_call(self._fleet.channel(self.endpoint_index))
            self._call = call
            try:
                await self._write(self._first_request)
                while True:
                    msg = await call.read()
                    if msg is grpc.aio.EOF:
                        break
                    await self._inbox.put(msg)
                end = _End(grpc.StatusCode.OK, "")
                code = await call.code()
                if code != grpc.StatusCode.OK:
                    end = _End(code, await call.details() or "")
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if (task is not None and task.cancelling()) or not call.cancelled():
                    raise
                end = _End(grpc.StatusCode.CANCELLED, "cancelled by the client")
            except grpc.RpcError as e:
                end = _End(e.code(), e.details() or "")
            except Exception as e:  # noqa: BLE001 - e.g. a write on a call that already ended
                code = await call.code()
                end = _End(code or grpc.StatusCode.UNKNOWN, str(e))
            if (
                end.code in FAILOVER_CODES
                and not self.queued.is_set()
                and not self._closing
                and tries < len(self._fleet)
            ):
                tries += 1
                self.endpoint_index = self._fleet.moved_on(self.endpoint_index)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), backoff.next())
                if not self._closing:
                    continue
            await self._inbox.put(end)
            return

    async def _watch(self) -> None:
        # The silence deadline is judged on every message too (zkgate._stream, ``_clock``).
        while True:
            wake = _sooner(self._deadline, self._next_ping)
            try:
                item = await asyncio.wait_for(self._inbox.get(), _left(wake))
            except asyncio.TimeoutError:
                item = _TIMED_OUT
            # The deadline first: a message read at or after it is the silence, not a renewal.
            if not isinstance(item, _End) and _overdue(self._deadline):
                reason = _silence_reason(self.silence_limit, self._lease is not None)
                await self._lose(reason, SILENCE)
                self._call.cancel()
                self._deadline = None
                self._next_ping = None
                continue
            if isinstance(item, _End):
                self.end_code, self.end_details = item.code, item.details
                if item.code == grpc.StatusCode.OK:
                    reason = self.ok_end_reason
                else:
                    reason = f"stream ended {item.code.name}: {item.details}"
                await self._lose(reason, loss_for_status(item.code))
                self._done.set()
                await self._notify()
                return
            self._ping_if_due()
            if item is _TIMED_OUT:
                continue
            await self._handle(item)
            if not self._held:
                self._deadline = None
            elif self._lease is None:
                # An older gateway: the watchdog restarts on every message heard.
                lim = self.silence_limit
                self._deadline = None if lim is None else _stream._clock() + lim

    def _ping(self) -> None:
        """Sends the next ``ping{seq}`` without waiting (skipped while the one before is still
        being written: the gateway stopped reading, and the lease runs out by itself)."""
        now = _stream._clock()
        seq = self._lease.ping(now)
        self._next_ping = now + self._ping_every
        if self._ping_task is None or self._ping_task.done():
            self._ping_task = asyncio.get_running_loop().create_task(self._send_ping(seq))

    async def _send_ping(self, seq: int) -> None:
        with contextlib.suppress(Exception):
            await self._write(self._ping_request(seq))

    def _ping_if_due(self) -> None:
        if (
            self._next_ping is not None
            and _stream._clock() >= self._next_ping
            and not self.lost.is_set()
        ):
            self._ping()

    async def _handle(self, response) -> None:
        kind = response.WhichOneof("event")
        if kind == "queued":
            self.lease = response.queued.lease
            self.position = response.queued.position
            q = response.queued
            if q.answers_pings:
                # Ping 1 was the first message; a waiter pings every third of the hint.
                self._lease = Lease(self._first_sent)
                hint = seconds(q.silence_limit) if q.HasField("silence_limit") else 0.0
                if hint > 0:
                    self._ping_every = hint / 3
                    self._next_ping = _stream._clock() + self._ping_every
            self.queued.set()
            self._fleet.current = self.endpoint_index
        elif kind == "heartbeat" and self._lease is not None and self._deadline is not None:
            # An answer to ping ``seq`` moves the deadline on; nothing else does.
            self._deadline = self._lease.answered(response.heartbeat.seq)
        elif self._on_message(kind, response):
            grant = getattr(response, kind)
            if grant.HasField("silence_limit"):
                self.silence_limit = seconds(grant.silence_limit)
            if not self.lost.is_set():
                late = False
                if self._lease is not None:
                    # Anchored: the send of the ping the grant names + its limit, set before
                    # the grant shows (so that nobody sees a late grant held).
                    until = self._lease.granted(self.silence_limit, grant.ping_seq)
                    late = until is None or _stream._clock() >= until
                    self._deadline = float("-inf") if until is None else until
                self._granted.set()
                if self._grant_hook is not None:  # before any loss this stream reports
                    self._grant_hook(self)
                if self._suspended_queued:
                    # Granted while the gateway's link is still suspended: lost as it is
                    # granted (no await in between, so no task sees it held).
                    await self._lose(
                        "suspended: the gateway granted the hold while its ZooKeeper "
                        "connection was suspended (no resumed since)",
                        SUSPENDED,
                    )
                    self._call.cancel()
                    return
                if late:
                    # Its lease ran out on the way (a link slower than the limit allows), or
                    # it names no ping this stream sent: recorded, and lost at once.
                    await self._lose(_late_grant_reason(self.silence_limit), SILENCE)
                    self._call.cancel()
                    return
                if self._lease is not None:
                    # Held on a lease: ping at once, then every quarter of the grant's limit.
                    self._ping_every = self.silence_limit / 4
                    self._ping()
        elif kind == "suspended" and not self._granted.is_set():
            self._suspended_queued = True
        elif kind == "resumed":
            self._suspended_queued = False
        await self._notify()
        if kind == "suspended" and self._held and _end_requested(response.suspended):
            # A Resign/Release with this hold's lease (contract G3c): told before anyone else
            # can be granted it; over, as an OK end says, then ended in-stream (so it ends OK).
            await self._lose(self.ok_end_reason, ENDED)
            with contextlib.suppress(Exception):
                await self._write(self._leave_request())
            return
        if kind == "suspended" and self._held:
            stop = seconds(response.suspended.stop_within)
            await self._lose(
                "suspended: the gateway lost its ZooKeeper connection "
                f"(someone else may be granted it after {stop:.3f} s)",
                SUSPENDED,
            )
            self._call.cancel()

    async def _lose(self, reason: str, loss: str) -> None:
        if self.lost.is_set():
            return
        was_holding = self._granted.is_set()
        self.lost_reason, self.loss = reason, loss
        self.lost.set()
        await self._notify()
        if was_holding and not self._closing:
            if self._loss_hook is not None:
                self._loss_hook(self)
            if self._on_lost is not None:
                self._on_lost(reason)


class Campaign(_HolderStream):
    """One candidacy (see :class:`zkgate.Campaign`); ``await`` its methods."""

    lost_error = LeadershipLost
    ok_end_reason = "resigned"

    def __init__(
        self,
        target,
        election: str,
        candidate: str,
        value: bytes = b"",
        *,
        on_lost: Optional[Callable[[str], None]] = None,
        start: Optional[int] = None,
        _loss_hook=None,
        _grant_hook=None,
    ):
        self.election, self.candidate = election, candidate
        self.leader: Optional[epb.Leader] = None
        self._open(
            target,
            lambda ch: epb_grpc.ElectionStub(ch).Campaign(),
            # The join is ping 1 (zkgate._lease).
            epb.CampaignRequest(
                join=epb.Join(election=election, candidate=candidate, value=value, ping_seq=1)
            ),
            on_lost,
            start,
            _loss_hook,
            _grant_hook,
        )
        self.elected = self._granted

    def _leave_request(self):
        return epb.CampaignRequest(resign=epb.ResignCandidacy())

    def _ping_request(self, seq: int):
        return epb.CampaignRequest(ping=common_pb2.Ping(seq=seq))

    def _on_message(self, kind: str, response) -> bool:
        if kind == "elected":
            self.leader = response.elected.leader
            return True
        if kind == "proclaimed":
            self.leader = response.proclaimed.leader
        return False

    @property
    def is_leader(self) -> bool:
        return self._holding

    @property
    def fencing_token(self) -> Optional[int]:
        return self.leader.fencing_token if self.leader is not None else None

    async def wait_elected(self, timeout: Optional[float] = None) -> epb.Leader:
        await self._wait_granted(timeout, "elected")
        return self.leader

    async def proclaim(self, value: bytes, timeout: Optional[float] = None) -> epb.Leader:
        if self.lease is None:
            await self.wait_queued(timeout)
        req = epb.ProclaimRequest(lease=self.lease, value=value)
        r = await _unary(
            self._fleet, lambda ch, t: epb_grpc.ElectionStub(ch).Proclaim(req, timeout=t), timeout
        )
        return r.leader

    async def resign(self, timeout: float = 5.0) -> None:
        await self._leave(timeout)


class Lock(_HolderStream):
    """One lock request (see :class:`zkgate.Lock`); ``await`` its methods."""

    lost_error = LockLost
    ok_end_reason = "released"

    def __init__(
        self,
        target,
        name: str,
        *,
        owner: str,
        permits: int = 1,
        mode: str = "write",
        wait_timeout: Optional[float] = None,
        ttl: Optional[float] = None,
        on_lost: Optional[Callable[[str], None]] = None,
        start: Optional[int] = None,
        _loss_hook=None,
        _grant_hook=None,
    ):
        if mode not in _MODES:
            raise ValueError(f"mode must be 'write' or 'read', not {mode!r}")
        self.name, self.owner = name, owner
        self.fencing_token: Optional[int] = None
        req = lpb.AcquireLock(
            name=name,
            owner=owner,
            permits=permits,
            mode=_MODES[mode],
            wait_timeout=_duration(wait_timeout),
            ttl=_duration(ttl),
            # The acquire is ping 1 (zkgate._lease).
            ping_seq=1,
        )
        self._open(
            target,
            lambda ch: lpb_grpc.LockStub(ch).Acquire(),
            lpb.AcquireRequest(acquire=req),
            on_lost,
            start,
            _loss_hook,
            _grant_hook,
        )
        self.acquired = self._granted
        if ttl is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(self._keep_alive(ttl / 3)))

    def _leave_request(self):
        return lpb.AcquireRequest(release=lpb.ReleaseLock())

    def _ping_request(self, seq: int):
        return lpb.AcquireRequest(ping=common_pb2.Ping(seq=seq))

    def _on_message(self, kind: str, response) -> bool:
        if kind == "acquired":
            self.fencing_token = response.acquired.fencing_token
            return True
        return False

    async def _keep_alive(self, every: float) -> None:
        while not self._done.is_set():
            await asyncio.sleep(every)
            if self._call is not None and not self._done.is_set():
                with contextlib.suppress(Exception):
                    await self._write(lpb.AcquireRequest(keep_alive=lpb.KeepAlive()))

    @property
    def is_held(self) -> bool:
        return self._holding

    async def wait_acquired(self, timeout: Optional[float] = None) -> int:
        try:
            await self._wait_granted(timeout, "acquired")
        except LockLost as e:
            if self.end_code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise NotAcquired(e.reason) from None
            raise
        return self.fencing_token

    async def release(self, timeout: float = 5.0) -> None:
        await self._leave(timeout)


@contextlib.asynccontextmanager
async def elect(target, election: str, candidate: str, value: bytes = b"", *, timeout=None, on_lost=None):
    """Campaigns, waits until elected, yields the :class:`Campaign`, resigns on exit."""
    c = Campaign(target, election, candidate, value, on_lost=on_lost)
    try:
        await c.wait_elected(timeout)
        yield c
    finally:
        await c.close()


@contextlib.asynccontextmanager
async def lock(target, name: str, *, owner: str, timeout=None, **kwargs):
    """Acquires, yields the :class:`Lock` while held, releases on exit."""
    held = Lock(target, name, owner=owner, **kwargs)
    try:
        await held.wait_acquired(timeout)
        yield held
    finally:
        await held.close()


class Standby:
    """Auto-requeue for asyncio (see :class:`zkgate.Standby`): callbacks are plain functions,
    ``work`` an async function; ``done`` is the task (its result is ``work``'s)."""

    def __init__(self, target, open_stream, *, on_granted=None, on_lost=None, on_error=None,
                 work: Optional[Callable[[Any], Awaitable[Any]]] = None, requeue: bool = True):
        self._fleet, self._own_fleet = _fleet(target)
        self._open_stream = open_stream
        self._on_granted, self._on_lost, self._on_error = on_granted, on_lost, on_error
        self._work, self._requeue = work, requeue
        self.current = None
        self.holding = asyncio.Event()
        self.error: Optional[BaseException] = None
        self._stop = asyncio.Event()
        self.done = asyncio.get_running_loop().create_task(self._run())

    def _report_grant(self, stream) -> None:
        self.holding.set()
        if self._on_granted is not None:
            self._on_granted(stream)

    def _report_loss(self, stream) -> None:
        self.holding.clear()
        if self._on_lost is not None:
            self._on_lost(stream.loss or "ended", stream)

    async def _run(self):
        backoff = Backoff()
        index = self._fleet.current
        result = None
        try:
            while not self._stop.is_set():
                s = self._open_stream(self._fleet, index, self._report_loss, self._report_grant)
                self.current = s
                await s._wait_for(s.queued.is_set, None, "queued")
                if s.queued.is_set():
                    backoff.reset()
                await s._wait_for(s._granted.is_set, None, "granted")
                if s._granted.is_set() and not s.lost.is_set():
                    if self._work is not None:
                        result = await self._work(s)
                        if not s.lost.is_set():
                            self._stop.set()
                            await s.close()
                            break
                await s.lost.wait()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(s._done.wait(), 5.0)
                self.holding.clear()
                await s.close()
                if self._stop.is_set():
                    break
                if not s._granted.is_set() and s.end_code in FATAL_CODES:
                    raise Refused(s.end_code, s.end_details or "")
                if not self._requeue and s._granted.is_set():
                    break
                if s.loss in (UNAVAILABLE, SILENCE):
                    index = self._fleet.moved_on(s.endpoint_index)
                else:
                    index = s.endpoint_index
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), backoff.next())
        except Exception as e:
            self.error = e
            if self._on_error is not None:
                self._on_error(e)
            raise
        finally:
            self.holding.clear()
        return result

    async def wait_granted(self, timeout: Optional[float] = None):
        """Waits until a hold is current; returns its stream."""
        holding = asyncio.ensure_future(self.holding.wait())
        try:
            await asyncio.wait({holding, self.done}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            holding.cancel()
        if self.holding.is_set():
            return self.current
        if self.done.done():
            raise self.error or RuntimeError("the standby stopped")
        raise TimeoutError(f"not granted within {timeout} s")

    async def close(self) -> None:
        """Gives the current hold up and stops."""
        self._stop.set()
        if self.current is not None:
            await self.current.close()
        with contextlib.suppress(Exception):
            await self.done
        if self._own_fleet:
            await self._fleet.aclose()

    async def __aenter__(self) -> "Standby":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def standby_campaign(target, election: str, candidate: str, value: bytes = b"", **kwargs) -> Standby:
    return Standby(
        target,
        lambda fleet, start, lost, granted: Campaign(
            fleet, election, candidate, value, start=start, _loss_hook=lost, _grant_hook=granted
        ),
        **kwargs,
    )


def standby_lock(target, name: str, *, owner: str, permits: int = 1, mode: str = "write", ttl=None, **kwargs) -> Standby:
    return Standby(
        target,
        lambda fleet, start, lost, granted: Lock(
            fleet, name, owner=owner, permits=permits, mode=mode, ttl=ttl, start=start,
            _loss_hook=lost, _grant_hook=granted,
        ),
        **kwargs,
    )


async def run_while_leader(work, target, election: str, candidate: str, value: bytes = b"", **kwargs):
    """``await work(campaign)`` each time elected, campaigning again after every loss."""
    s = standby_campaign(target, election, candidate, value, work=work, **kwargs)
    try:
        return await s.done
    finally:
        await s.close()


async def run_while_holding(work, target, name: str, **kwargs):
    """:func:`run_while_leader` for lock ``name`` (``owner=`` is required)."""
    s = standby_lock(target, name, work=work, **kwargs)
    try:
        return await s.done
    finally:
        await s.close()


async def leader(target, election: str, timeout: Optional[float] = None) -> Optional[epb.Leader]:
    req = epb.LeaderRequest(election=election)
    try:
        r = await _unary(target, lambda ch, t: epb_grpc.ElectionStub(ch).Leader(req, timeout=t), timeout)
        return r.leader
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise


async def candidates(target, election: str, page_size: int = 0, timeout=None) -> epb.CandidatesResponse:
    out, token = epb.CandidatesResponse(), ""
    while True:
        req = epb.CandidatesRequest(election=election, page_size=page_size, page_token=token)
        page = await _unary(target, lambda ch, t: epb_grpc.ElectionStub(ch).Candidates(req, timeout=t), timeout)
        out.candidates.extend(page.candidates)
        out.total = page.total
        token = page.next_page_token
        if not token:
            return out


async def holders(target, name: str, page_size: int = 0, timeout=None) -> lpb.HoldersResponse:
    out, token = lpb.HoldersResponse(), ""
    while True:
        req = lpb.HoldersRequest(name=name, page_size=page_size, page_token=token)
        page = await _unary(target, lambda ch, t: lpb_grpc.LockStub(ch).Holders(req, timeout=t), timeout)
        out.holders.extend(page.holders)
        out.waiting, out.total = page.waiting, page.total
        token = page.next_page_token
        if not token:
            return out


async def release(target, lease: str, timeout=None) -> None:
    """As :func:`zkgate.lock.release` (the fleet's deadline plus ``BY_LEASE_EXTRA`` by default)."""
    req = lpb.ReleaseRequest(lease=lease)
    extra = BY_LEASE_EXTRA if timeout is None else 0.0
    await _unary(target, lambda ch, t: lpb_grpc.LockStub(ch).Release(req, timeout=t + extra), timeout)


async def validate(target, name: str, fencing_token: int, timeout=None) -> bool:
    req = lpb.LockValidateRequest(name=name, fencing_token=fencing_token)
    r = await _unary(target, lambda ch, t: lpb_grpc.LockStub(ch).Validate(req, timeout=t), timeout)
    return r.current


async def observe(target, election: str) -> AsyncIterator[Optional[epb.Leader]]:
    """The election's leader (``None`` while vacant), reconnecting like :func:`zkgate.observe`."""
    fleet, own = _fleet(target)
    backoff, highest, index = Backoff(), 0, fleet.current
    call = None
    try:
        while True:
            call = epb_grpc.ElectionStub(fleet.channel(index)).Observe(epb.ObserveRequest(election=election))
            code = grpc.StatusCode.OK
            try:
                async for r in call:
                    backoff.reset()
                    if r.HasField("leader"):
                        if r.leader.fencing_token < highest:
                            continue
                        highest = r.leader.fencing_token
                        yield r.leader
                    else:
                        yield None
            except grpc.RpcError as e:
                code = e.code()
                if code not in FAILOVER_CODES and code != grpc.StatusCode.ABORTED:
                    raise
            if code in FAILOVER_CODES:
                index = fleet.moved_on(index)
            await asyncio.sleep(backoff.next())
    finally:
        if call is not None:
            call.cancel()
        if own:
            await fleet.aclose()
