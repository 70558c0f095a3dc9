"""Leader election through a zkgate gateway, with the client-side watchdog the API asks for.

A :class:`Campaign` is one open ``zkgate.v1.Election/Campaign`` stream: one candidate in one
election, holding one ZooKeeper znode at the gateway for as long as the stream is open. It reads
the stream on a background thread and decides when this process must stop acting as leader:

* the stream ends, for any reason (resigned, session lost, gateway draining, connection lost);
* the gateway sends ``suspended`` (it lost its ZooKeeper connection, so leadership is
  uncertain and a successor may be elected after ``stop_within``);
* nothing at all arrives for ``silence_limit`` while leading (the gateway sends a heartbeat at
  least every ``silence_limit / 3``, so silence means a frozen or unreachable gateway, which
  may already have lost the znode).

In each case :attr:`Campaign.lost` is set and the stream is cancelled, which releases the znode
so that the next candidate can be elected: like Curator's ``LeaderSelector``, the helper gives
leadership up rather than waiting for a suspension to resolve. Campaign again to rejoin.

Typical use::

    with zkgate.elect("127.0.0.1:50051", "billing-cron", "host-1") as leadership:
        while not leadership.lost.is_set():
            run_one_batch(fencing_token=leadership.fencing_token)
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Callable, Iterator, Optional, Union

import grpc

from zkgate.v1 import election_pb2 as pb
from zkgate.v1 import election_pb2_grpc as pb_grpc

Target = Union[str, grpc.Channel]

__all__ = [
    "Campaign",
    "LeadershipLost",
    "elect",
    "leader",
    "observe",
]


class LeadershipLost(Exception):
    """This campaign is not (or no longer) the leader; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _End:
    """The stream finished: its gRPC status."""

    def __init__(self, code: grpc.StatusCode, details: str):
        self.code = code
        self.details = details


def _seconds(d) -> float:
    """A ``google.protobuf.Duration`` in seconds."""
    return d.seconds + d.nanos / 1e9


def _channel(target: Target) -> tuple[grpc.Channel, bool]:
    """A channel for ``target`` and whether we own (and must close) it."""
    if isinstance(target, str):
        return grpc.insecure_channel(target), True
    return target, False


class Campaign:
    """One candidacy in ``election``: joins on construction, leaves on :meth:`close`.

    Attributes set from the stream (read them from any thread):

    * ``lease``: the capability for ``Resign``/``Proclaim`` from anywhere (secret: do not log).
    * ``position``: candidates ahead of this one when it joined.
    * ``leader``: the ``zkgate.v1.Leader`` message once elected (updated by proclaims).
    * ``silence_limit``: seconds of silence after which a leader must assume it lost.
    * ``queued``, ``elected``, ``lost``: :class:`threading.Event` s. ``lost`` is set once the
      campaign is over or its leadership can no longer be trusted; ``lost_reason`` says why.
    * ``end_code``, ``end_details``: the stream's final gRPC status, once it ended.

    ``on_lost(reason)`` is called (on the helper's thread) when leadership ends other than by
    this object's own :meth:`resign`/:meth:`close`.
    """

    def __init__(
        self,
        target: Target,
        election: str,
        candidate: str,
        value: bytes = b"",
        *,
        on_lost: Optional[Callable[[str], None]] = None,
    ):
        self.election = election
        self.candidate = candidate
        self.lease: Optional[str] = None
        self.position: Optional[int] = None
        self.leader: Optional[pb.Leader] = None
        self.silence_limit: Optional[float] = None
        self.queued = threading.Event()
        self.elected = threading.Event()
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self.end_code: Optional[grpc.StatusCode] = None
        self.end_details: Optional[str] = None
        self._on_lost = on_lost
        self._closing = False
        self._done = threading.Event()
        self._state = threading.Condition()
        self._channel, self._own_channel = _channel(target)
        self._stub = pb_grpc.ElectionStub(self._channel)
        self._outbox: "queue.Queue[Optional[pb.CampaignRequest]]" = queue.Queue()
        self._inbox: "queue.Queue[Union[pb.CampaignResponse, _End]]" = queue.Queue()
        self._outbox.put(
            pb.CampaignRequest(
                join=pb.Join(election=election, candidate=candidate, value=value)
            )
        )
        self._call = self._stub.Campaign(self._requests())
        threading.Thread(target=self._read, name=f"zkgate-read-{election}", daemon=True).start()
        threading.Thread(target=self._watch, name=f"zkgate-watch-{election}", daemon=True).start()

    # ----------------------------------------------------------------------------- queries

    @property
    def is_leader(self) -> bool:
        """Elected, and nothing since says otherwise."""
        return self.elected.is_set() and not self.lost.is_set()

    @property
    def fencing_token(self) -> Optional[int]:
        """This leader's fencing token: pass it to services that fence writes (``Validate``)."""
        return self.leader.fencing_token if self.leader is not None else None

    def check(self) -> None:
        """Raises :class:`LeadershipLost` unless this campaign currently leads."""
        if not self.is_leader:
            raise LeadershipLost(self.lost_reason or "not elected (yet)")

    def wait_queued(self, timeout: Optional[float] = None) -> int:
        """Waits for the ``queued`` event; returns the position.

        Raises :class:`LeadershipLost` if the stream ended first (e.g. a refused ``join``),
        :class:`TimeoutError` after ``timeout`` seconds.
        """
        self._wait_for(self.queued, timeout, "queued")
        assert self.position is not None
        return self.position

    def wait_elected(self, timeout: Optional[float] = None) -> pb.Leader:
        """Blocks until this campaign leads; returns the ``Leader``.

        Raises :class:`LeadershipLost` if the campaign ended first, :class:`TimeoutError` after
        ``timeout`` seconds (the campaign goes on: call :meth:`close` to give up).
        """
        self._wait_for(self.elected, timeout, "elected")
        assert self.leader is not None
        return self.leader

    def _wait_for(self, event: threading.Event, timeout: Optional[float], what: str) -> None:
        with self._state:
            ok = self._state.wait_for(lambda: event.is_set() or self.lost.is_set(), timeout)
        if not ok:
            raise TimeoutError(f"not {what} within {timeout} s")
        if self.lost.is_set() and not (event is self.queued and event.is_set()):
            raise LeadershipLost(self.lost_reason or "campaign ended")

    # ----------------------------------------------------------------------------- actions

    def proclaim(self, value: bytes, timeout: float = 10.0) -> pb.Leader:
        """Replaces the leader's value (the unary ``Proclaim`` by lease, so a refusal does not
        end the campaign). Raises ``grpc.RpcError`` (``FAILED_PRECONDITION`` if not leader)."""
        if self.lease is None:
            self.wait_queued(timeout)
        response = self._stub.Proclaim(
            pb.ProclaimRequest(lease=self.lease, value=value), timeout=timeout
        )
        return response.leader

    def resign(self, timeout: float = 5.0) -> None:
        """Leaves the election and waits until the gateway has deleted the znode (the stream then
        ends ``OK``). Falls back to cancelling the stream after ``timeout`` seconds."""
        with self._state:
            self._closing = True
        if not self._done.is_set():
            self._outbox.put(pb.CampaignRequest(resign=pb.ResignCandidacy()))
            if not self._done.wait(timeout):
                self.cancel()
                self._done.wait(timeout)

    def cancel(self) -> None:
        """Drops the stream at once; the gateway deletes the znode within milliseconds."""
        with self._state:
            self._closing = True
        self._call.cancel()

    def close(self) -> None:
        """Resigns (if still campaigning) and releases the channel if this object made it."""
        try:
            self.resign()
        finally:
            self._outbox.put(None)  # ends the request iterator
            if self._own_channel:
                self._channel.close()

    def __enter__(self) -> "Campaign":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------------------- internals

    def _requests(self) -> Iterator[pb.CampaignRequest]:
        # Never half-close on our own: grpc would be fine (half-closed candidates stay), but
        # keeping the request side open lets resign() still reach the gateway.
        while True:
            msg = self._outbox.get()
            if msg is None:
                return
            yield msg

    def _read(self) -> None:
        try:
            for response in self._call:
                self._inbox.put(response)
            self._inbox.put(_End(grpc.StatusCode.OK, ""))
        except grpc.RpcError as e:
            self._inbox.put(_End(e.code(), e.details() or ""))

    def _watch(self) -> None:
        while True:
            silence = self.silence_limit if self.is_leader else None
            try:
                item = self._inbox.get(timeout=silence)
            except queue.Empty:
                self._lose(
                    f"no message from the gateway for the silence limit ({silence:.3f} s): "
                    "it may be frozen or cut off"
                )
                self._call.cancel()
                continue
            if isinstance(item, _End):
                self._finish(item)
                return
            self._handle(item)

    def _handle(self, response: pb.CampaignResponse) -> None:
        kind = response.WhichOneof("event")
        with self._state:
            if kind == "queued":
                self.lease = response.queued.lease
                self.position = response.queued.position
                self.queued.set()
            elif kind == "elected":
                self.leader = response.elected.leader
                if response.elected.HasField("silence_limit"):
                    self.silence_limit = _seconds(response.elected.silence_limit)
                if not self.lost.is_set():
                    self.elected.set()
            elif kind == "proclaimed":
                self.leader = response.proclaimed.leader
            self._state.notify_all()
        if kind == "suspended" and self.is_leader:
            stop = _seconds(response.suspended.stop_within)
            self._lose(
                "suspended: the gateway lost its ZooKeeper connection "
                f"(a successor may be elected after {stop:.3f} s)"
            )
            self._call.cancel()

    def _lose(self, reason: str) -> None:
        with self._state:
            if self.lost.is_set():
                return
            was_leader = self.elected.is_set()
            requested = self._closing
            self.lost_reason = reason
            self.lost.set()
            self._state.notify_all()
        if was_leader and not requested and self._on_lost is not None:
            self._on_lost(reason)

    def _finish(self, end: _End) -> None:
        self.end_code, self.end_details = end.code, end.details
        if end.code == grpc.StatusCode.OK:
            reason = "resigned"
        else:
            reason = f"stream ended {end.code.name}: {end.details}"
        self._lose(reason)
        self._outbox.put(None)
        self._done.set()


@contextlib.contextmanager
def elect(
    target: Target,
    election: str,
    candidate: str,
    value: bytes = b"",
    *,
    timeout: Optional[float] = None,
    on_lost: Optional[Callable[[str], None]] = None,
) -> Iterator[Campaign]:
    """Campaigns, waits until elected, yields the :class:`Campaign`, and resigns on exit.

    Inside the block, leader-only work must stop as soon as ``campaign.lost`` is set (poll
    ``campaign.is_leader``, wait on ``campaign.lost``, or call ``campaign.check()``).
    Raises :class:`LeadershipLost` or :class:`TimeoutError` if it is never elected.
    """
    campaign = Campaign(target, election, candidate, value, on_lost=on_lost)
    try:
        campaign.wait_elected(timeout)
        yield campaign
    finally:
        campaign.close()


def leader(target: Target, election: str, timeout: float = 10.0) -> Optional[pb.Leader]:
    """The election's current leader, or ``None`` when nobody leads."""
    channel, own = _channel(target)
    try:
        stub = pb_grpc.ElectionStub(channel)
        return stub.Leader(pb.LeaderRequest(election=election), timeout=timeout).leader
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise
    finally:
        if own:
            channel.close()


def observe(target: Target, election: str) -> Iterator[Optional[pb.Leader]]:
    """Yields the election's leader (``None`` while vacant): the current state first, then one
    value per change. Closing the generator (e.g. ``break``) ends the stream."""
    channel, own = _channel(target)
    call = pb_grpc.ElectionStub(channel).Observe(pb.ObserveRequest(election=election))
    try:
        for response in call:
            yield response.leader if response.HasField("leader") else None
    finally:
        call.cancel()
        if own:
            channel.close()
