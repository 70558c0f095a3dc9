"""The part of the client's contract that elections and locks share.

A Campaign (``Election/Campaign``) and a Lock (``Lock/Acquire``) are the same kind of stream:
``queued`` first, then a grant (``elected`` / ``acquired``) carrying ``silence_limit``, then
``suspended``/``resumed``/``heartbeat``, until the stream ends. The holder must stop acting as
holder when the stream ends, when the gateway says ``suspended``, and when its lease runs out
while holding. With a gateway whose ``queued`` says ``answers_pings`` the lease is anchored on
this process's clock (``zkgate._lease``): the join/acquire is ping 1, a waiter pings every third
of ``queued.silence_limit``, a holder at once when granted and then every quarter of its
``silence_limit``, and the deadline is the send of the newest answered ping (the grant's
``ping_seq``, then ``heartbeat{seq}``) + ``silence_limit``. With an older gateway it is the
watchdog that restarts on every message heard: nothing at all for ``silence_limit``.
:class:`HolderStream` reads the stream on a thread, keeps that deadline, and cancels the stream
once the hold is lost (which releases the znode, so the next in line gets it): like Curator's
recipes, it gives the hold up rather than waiting for a suspension to resolve. Subclasses say
which messages they send and what a grant carries.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterator, Optional

import grpc

from zkgate._fleet import (
    ENDED,
    FAILOVER_CODES,
    SILENCE,
    SUSPENDED,
    Backoff,
    Fleet,
    Target,
    fleet_for,
    loss_for_status,
)
from zkgate._lease import Lease
from zkgate.v1 import common_pb2


class _End:
    """The stream finished: its gRPC status."""

    def __init__(self, code: grpc.StatusCode, details: str):
        self.code = code
        self.details = details


def seconds(d) -> float:
    """A ``google.protobuf.Duration`` in seconds."""
    return d.seconds + d.nanos / 1e9


# The silence deadline, while holding: with a gateway that answers pings, the send of the newest
# answered ping plus ``silence_limit`` (``zkgate._lease``); with an older one, the last message
# heard plus ``silence_limit``. Judged by the clock on every message, not only by the wait's
# timeout: a process frozen (SIGSTOP, a stalled VM) or starved past its deadline finds, when it
# runs again, both its wait due and messages that waited in its socket meanwhile — heartbeats sent
# before its gateway froze too, say — and whichever the wait returns, a message heard late says
# nothing about now. The silence came first and is final (G3b; found by a probe that froze a
# holder, then its gateway, and saw the thawed holder hold on for another silence limit beside
# its successor).


def _clock() -> float:
    """The clock deadlines are judged by (monotonic; tests move it)."""
    return time.monotonic()


def _left(deadline: Optional[float]) -> Optional[float]:
    """How long to wait for the next message: until ``deadline`` (``None``: no limit)."""
    return None if deadline is None else max(0.0, deadline - _clock())


def _overdue(deadline: Optional[float]) -> bool:
    """Whether ``deadline`` has passed: silence, whatever arrived since."""
    return deadline is not None and _clock() >= deadline


def _sooner(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """The earlier of two times (``None``: never)."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


# Reasons a hold is lost by silence (both name the silence limit: callers look for it).
def _silence_reason(limit: Optional[float], anchored: bool) -> str:
    shown = "?" if limit is None else f"{limit:.3f} s"
    if anchored:
        return (
            f"no ping answered by the gateway within the silence limit ({shown}): "
            "it may be frozen, cut off or its link slow"
        )
    return (
        f"no message from the gateway for the silence limit ({shown}): "
        "it may be frozen or cut off"
    )


def _late_grant_reason(limit: Optional[float]) -> str:
    shown = "?" if limit is None else f"{limit:.3f} s"
    return (
        "silence: the grant named no ping sent within the silence limit "
        f"({shown}) before it was read: its lease ran out on the way"
    )


# What a wait for the next message returns when its time ran out.
_TIMED_OUT = object()


def unary(target: Target, fn: Callable[[Any, float], Any], timeout: Optional[float] = None):
    """Runs ``fn(channel, deadline)`` on ``target``'s fleet with failover (see
    :meth:`Fleet.call`), closing the fleet afterwards if it was made here."""
    fleet, own = fleet_for(target)
    try:
        if timeout is not None:
            return fleet.call(lambda ch, _deadline: fn(ch, timeout))
        return fleet.call(fn)
    finally:
        if own:
            fleet.close()


class HolderStream:
    """One open holder stream. Subclasses call :meth:`_open` from their constructor.

    Attributes set from the stream (read them from any thread): ``lease`` (the capability to
    resign/release from anywhere: secret, do not log), ``position`` (how many were ahead when it
    joined), ``silence_limit`` (seconds), the :class:`threading.Event` s ``queued``, ``lost``
    (and the subclass's grant event), ``lost_reason`` (a sentence), ``loss`` (one of
    ``suspended``, ``silence``, ``unavailable``, ``ended``), ``endpoint`` (the gateway the stream
    is on), and ``end_code``/``end_details`` once the stream ended.

    Until ``queued`` arrives, a stream that fails with ``UNAVAILABLE`` (a refused connection, a
    draining gateway) is opened again on the fleet's next endpoint after a backoff, once per
    endpoint; after ``queued`` it stays where it is, and its loss is final (the requeuing helpers
    in ``zkgate.requeue`` campaign again).
    """

    #: The exception :meth:`check` and the waits raise when the hold is lost.
    lost_error: type = Exception
    #: How an OK end reads in ``lost_reason``.
    ok_end_reason = "ended"

    def _open(
        self,
        target: Target,
        open_call: Callable[[grpc.Channel, Iterator[Any]], Any],
        first_request: Any,
        thread_name: str,
        on_lost: Optional[Callable[[str], None]],
        start: Optional[int] = None,
        loss_hook: Optional[Callable[["HolderStream"], None]] = None,
        grant_hook: Optional[Callable[["HolderStream"], None]] = None,
    ) -> None:
        self.lease: Optional[str] = None
        self.position: Optional[int] = None
        self.silence_limit: Optional[float] = None
        self.queued = threading.Event()
        self._granted = threading.Event()
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self.loss: Optional[str] = None
        self.end_code: Optional[grpc.StatusCode] = None
        self.end_details: Optional[str] = None
        self._on_lost = on_lost
        self._loss_hook = loss_hook
        self._grant_hook = grant_hook
        self._closing = False
        # A ``suspended`` heard while queued and not followed by ``resumed``: carried into a
        # later grant, which is then lost as it is granted (CONFORMANCE.md).
        self._suspended_queued = False
        # When silence becomes loss (``_clock``), while held: see ``_silence_deadline``.
        self._deadline: Optional[float] = None
        # With a gateway that answers pings (``queued.answers_pings``): the pings sent and the
        # lease they anchor, when the next ping is due and how often. Owned by the watching
        # thread. ``_first_sent``: ping 1's send time, read before the stream opens.
        self._lease: Optional[Lease] = None
        self._next_ping: Optional[float] = None
        self._ping_every: Optional[float] = None
        self._first_sent = _clock()
        self._done = threading.Event()
        self._state = threading.Condition()
        self._fleet, self._own_fleet = fleet_for(target)
        self.endpoint_index = self._fleet.current if start is None else start % len(self._fleet)
        self._open_call = open_call
        self._first_request = first_request
        self._wake = threading.Event()
        self._inbox: "queue.Queue[Any]" = queue.Queue()
        self._start_call()
        threading.Thread(target=self._read, name=f"zkgate-read-{thread_name}", daemon=True).start()
        threading.Thread(target=self._watch, name=f"zkgate-watch-{thread_name}", daemon=True).start()

    @property
    def fleet(self) -> Fleet:
        """The fleet this stream's gateway belongs to (unary calls by lease go through it)."""
        return self._fleet

    @property
    def endpoint(self) -> str:
        """The gateway this stream is open on (``http://host:port``)."""
        return str(self._fleet.endpoints[self.endpoint_index])

    def _start_call(self) -> None:
        self._outbox: "queue.Queue[Any]" = queue.Queue()
        # The first message is ping 1: its send time is read before the stream opens.
        self._first_sent = _clock()
        self._outbox.put(self._first_request)
        channel = self._fleet.channel(self.endpoint_index)
        self._call = self._open_call(channel, self._requests(self._outbox))

    # ----------------------------------------------------------------------------- hooks

    def _leave_request(self) -> Any:
        """The in-stream message that gives the hold up (resign / release)."""
        raise NotImplementedError

    def _on_message(self, kind: str, response: Any) -> bool:
        """Records a message other than ``queued``; called with the state lock held. Returns
        whether it is the grant (``elected``/``acquired``)."""
        raise NotImplementedError

    def _ping_request(self, seq: int) -> Any:
        """The in-stream ``ping{seq}``."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------- queries

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
        """Raises :attr:`lost_error` unless the hold is current."""
        if not self._holding:
            raise self.lost_error(self.lost_reason or "not granted (yet)")

    def wait_queued(self, timeout: Optional[float] = None) -> int:
        """Waits for ``queued``; returns the position. Raises :attr:`lost_error` if the stream
        ended first (e.g. a refused request), :class:`TimeoutError` after ``timeout`` seconds."""
        self._wait_for(self.queued, timeout, "queued")
        assert self.position is not None
        return self.position

    def _wait_for(self, event: threading.Event, timeout: Optional[float], what: str) -> None:
        with self._state:
            ok = self._state.wait_for(lambda: event.is_set() or self.lost.is_set(), timeout)
        if not ok:
            raise TimeoutError(f"not {what} within {timeout} s")
        if self.lost.is_set() and not (event is self.queued and event.is_set()):
            raise self.lost_error(self.lost_reason or "stream ended")

    # ----------------------------------------------------------------------------- actions

    def _leave(self, timeout: float) -> None:
        """Gives the hold up in-stream and waits until the gateway deleted the znode (the
        stream then ends OK); falls back to cancelling after ``timeout`` seconds."""
        with self._state:
            self._closing = True
        if not self._done.is_set():
            self._outbox.put(self._leave_request())
            if not self._done.wait(timeout):
                self.cancel()
                self._done.wait(timeout)

    def _send(self, request: Any) -> None:
        if not self._done.is_set():
            self._outbox.put(request)

    def cancel(self) -> None:
        """Drops the stream at once; the gateway deletes the znode within milliseconds."""
        with self._state:
            self._closing = True
            call = self._call
        self._wake.set()
        call.cancel()

    def close(self) -> None:
        """Gives the hold up (if still open) and closes the fleet if this object made it."""
        try:
            self._leave(5.0)
        finally:
            self._outbox.put(None)  # ends the request iterator
            if self._own_fleet:
                self._fleet.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------------------- internals

    @staticmethod
    def _requests(outbox: "queue.Queue[Any]") -> Iterator[Any]:
        # Never half-close on our own: the gateway would keep the hold, but keeping the request
        # side open lets the resign/release message still reach it.
        while True:
            msg = outbox.get()
            if msg is None:
                return
            yield msg

    def _read(self) -> None:
        backoff = Backoff()
        tries = 1
        while True:
            call = self._call
            try:
                for response in call:
                    self._inbox.put(response)
                end = _End(grpc.StatusCode.OK, "")
            except grpc.RpcError as e:
                end = _End(e.code(), e.details() or "")
            with self._state:
                retry = (
                    end.code in FAILOVER_CODES
                    and not self.queued.is_set()
                    and not self._closing
                    and tries < len(self._fleet)
                )
                if retry:
                    self._outbox.put(None)
                    self.endpoint_index = self._fleet.moved_on(self.endpoint_index)
            if retry:
                tries += 1
                self._wake.wait(backoff.next())
                with self._state:
                    if not self._closing:
                        self._start_call()
                        continue
            self._inbox.put(end)
            return

    def _watch(self) -> None:
        while True:
            try:
                item = self._inbox.get(timeout=_left(_sooner(self._deadline, self._next_ping)))
            except queue.Empty:
                item = _TIMED_OUT
            # The deadline first: a message read at or after it is the silence, not a renewal.
            if not isinstance(item, _End) and _overdue(self._deadline):
                self._lose(_silence_reason(self.silence_limit, self._lease is not None), SILENCE)
                self._call.cancel()
                self._deadline = None
                self._next_ping = None
                continue
            if isinstance(item, _End):
                self._finish(item)
                return
            self._ping_if_due()
            if item is _TIMED_OUT:
                continue
            self._handle(item)
            self._deadline = self._silence_deadline()

    def _silence_deadline(self) -> Optional[float]:
        """The deadline after a message heard now (see ``_clock``), while granted and not lost:
        with pings, the one the grant and the answers set (``_handle``: hearing moves nothing);
        without, now plus the silence limit."""
        if not self._held:
            return None
        if self._lease is not None:
            return self._deadline
        if self.silence_limit is not None:
            return _clock() + self.silence_limit
        return None

    # The ping's send backlog past which a ping is skipped: the gateway stopped reading (the
    # lease then runs out by itself). Requests queue here until gRPC has sent the one before.
    _PING_BACKLOG = 8

    def _ping(self) -> None:
        """Sends the next ``ping{seq}`` (never blocks; recorded even when skipped) and schedules
        the one after."""
        assert self._lease is not None and self._ping_every is not None
        now = _clock()
        seq = self._lease.ping(now)
        self._next_ping = now + self._ping_every
        if self._outbox.qsize() < self._PING_BACKLOG:
            self._send(self._ping_request(seq))

    def _ping_if_due(self) -> None:
        if self._next_ping is not None and _clock() >= self._next_ping and not self.lost.is_set():
            self._ping()

    def _handle(self, response: Any) -> None:
        kind = response.WhichOneof("event")
        granted = False
        late = False
        with self._state:
            if kind == "queued":
                self.lease = response.queued.lease
                self.position = response.queued.position
                self._queued_pings(response.queued)
                self.queued.set()
                self._fleet.current = self.endpoint_index
            elif self._on_message(kind, response):
                grant = getattr(response, kind)
                if grant.HasField("silence_limit"):
                    self.silence_limit = seconds(grant.silence_limit)
                if not self.lost.is_set():
                    if self._lease is not None:
                        # Anchored: the send of the ping the grant names + its limit. Set before
                        # the grant shows, so that nobody sees a late grant held.
                        until = self._lease.granted(self.silence_limit, grant.ping_seq)
                        late = until is None or _clock() >= until
                        self._deadline = float("-inf") if until is None else until
                    self._granted.set()
                    granted = True
            elif kind == "heartbeat" and self._lease is not None and self._deadline is not None:
                # An answer to ping ``seq`` moves the deadline on; nothing else does.
                self._deadline = self._lease.answered(response.heartbeat.seq)
            elif kind == "suspended" and not self._granted.is_set():
                self._suspended_queued = True
            elif kind == "resumed":
                self._suspended_queued = False
            self._state.notify_all()
        if granted and self._grant_hook is not None:
            # On this (the reading) thread, so that it comes before any loss this stream reports.
            self._grant_hook(self)
        if granted and self._suspended_queued:
            # Granted while the gateway's link is still suspended: uncertain from its first
            # moment, so it is lost as it is granted.
            self._lose(
                "suspended: the gateway granted the hold while its ZooKeeper connection was "
                "suspended (no resumed since)",
                SUSPENDED,
            )
            self._call.cancel()
            return
        if granted and late:
            # Its lease ran out on the way (a link slower than the limit allows), or it names
            # no ping this stream sent: recorded, and lost at once.
            self._lose(_late_grant_reason(self.silence_limit), SILENCE)
            self._call.cancel()
            return
        if granted and self._lease is not None:
            # Held on a lease: ping at once, then every quarter of the grant's limit.
            self._ping_every = self.silence_limit / 4
            self._ping()
        if kind == "suspended" and self._held and _end_requested(response.suspended):
            # A Resign/Release with this hold's lease (contract G3c): the gateway tells us
            # before anyone else can be granted it and keeps the znode until we end the
            # stream. Over, as an OK end says (``resigned``/``released``, loss ``ended``);
            # then end the stream in-stream, so it ends OK.
            self._lose(self.ok_end_reason, ENDED)
            self._send(self._leave_request())
            return
        if kind == "suspended" and self._held:
            stop = seconds(response.suspended.stop_within)
            self._lose(
                "suspended: the gateway lost its ZooKeeper connection "
                f"(someone else may be granted it after {stop:.3f} s)",
                SUSPENDED,
            )
            self._call.cancel()

    def _queued_pings(self, queued: Any) -> None:
        """``queued``: with a gateway that answers pings, the lease starts (ping 1 was the first
        message) and a waiter pings every third of the limit a grant would carry."""
        if not queued.answers_pings:
            return
        self._lease = Lease(self._first_sent)
        hint = seconds(queued.silence_limit) if queued.HasField("silence_limit") else 0.0
        if hint > 0:
            self._ping_every = hint / 3
            self._next_ping = _clock() + self._ping_every

    def _lose(self, reason: str, loss: str) -> None:
        with self._state:
            if self.lost.is_set():
                return
            was_holding = self._granted.is_set()
            requested = self._closing
            self.lost_reason = reason
            self.loss = loss
            self.lost.set()
            self._state.notify_all()
        if was_holding and not requested:
            if self._loss_hook is not None:
                self._loss_hook(self)
            if self._on_lost is not None:
                self._on_lost(reason)

    def _finish(self, end: _End) -> None:
        self.end_code, self.end_details = end.code, end.details
        if end.code == grpc.StatusCode.OK:
            reason = self.ok_end_reason
        else:
            reason = f"stream ended {end.code.name}: {end.details}"
        self._lose(reason, loss_for_status(end.code))
        self._outbox.put(None)
        self._done.set()


def _end_requested(suspended: Any) -> bool:
    """Whether a ``suspended`` says a Resign/Release by lease asked the gateway to end the hold
    (``reason`` END_REQUESTED; gateways before it leave ``reason`` unset)."""
    return getattr(suspended, "reason", 0) == common_pb2.SUSPEND_REASON_END_REQUESTED
