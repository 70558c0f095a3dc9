"""Leader election through a zkgate gateway, with the client-side watchdog the API asks for.

A :class:`Campaign` is one open ``zkgate.v1.Election/Campaign`` stream: one candidate in one
election, holding one ZooKeeper znode at the gateway for as long as the stream is open. It reads
the stream on a background thread and decides when this process must stop acting as leader:

* the stream ends, for any reason (resigned, session lost, gateway draining, connection lost);
* the gateway sends ``suspended`` (it lost its ZooKeeper connection, so leadership is
  uncertain and a successor may be elected after ``stop_within``);
* its lease runs out while leading: with a gateway that answers pings, no ping sent within
  ``silence_limit`` was answered (the lease is anchored on this process's clock, see
  ``zkgate._stream``); with an older one, nothing at all arrived for ``silence_limit`` (it sends a
  heartbeat at least every ``silence_limit / 3``). Silence means a frozen, unreachable or slow
  gateway, which may already have lost the znode.

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
import threading
from typing import Callable, Iterator, NamedTuple, Optional, Sequence, Union

import grpc

from zkgate._fleet import FAILOVER_CODES, Backoff, Target, fleet_for
from zkgate._stream import HolderStream, unary
from zkgate.v1 import common_pb2
from zkgate.v1 import election_pb2 as pb
from zkgate.v1 import election_pb2_grpc as pb_grpc

__all__ = [
    "Campaign",
    "LeadershipLost",
    "candidates",
    "elect",
    "leader",
    "observe",
]


class LeadershipLost(Exception):
    """This campaign is not (or no longer) the leader; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Campaign(HolderStream):
    """One candidacy in ``election``: joins on construction, leaves on :meth:`close`.

    Attributes set from the stream (read them from any thread):

    * ``lease``: the capability for ``Resign``/``Proclaim`` from anywhere (secret: do not log).
    * ``position``: candidates ahead of this one when it joined.
    * ``leader``: the ``zkgate.v1.Leader`` message once elected (updated by proclaims).
    * ``silence_limit``: seconds after the send of its newest answered ping (or, with an older
      gateway, after the last message heard) at which a leader must assume it lost.
    * ``queued``, ``elected``, ``lost``: :class:`threading.Event` s. ``lost`` is set once the
      campaign is over or its leadership can no longer be trusted; ``lost_reason`` says why.
    * ``end_code``, ``end_details``: the stream's final gRPC status, once it ended.

    ``on_lost(reason)`` is called (on the helper's thread) when leadership ends other than by
    this object's own :meth:`resign`/:meth:`close`.
    """

    lost_error = LeadershipLost
    ok_end_reason = "resigned"

    def __init__(
        self,
        target: Target,
        election: str,
        candidate: str,
        value: bytes = b"",
        *,
        on_lost: Optional[Callable[[str], None]] = None,
        start: Optional[int] = None,
        _loss_hook: Optional[Callable[[HolderStream], None]] = None,
        _grant_hook: Optional[Callable[[HolderStream], None]] = None,
    ):
        self.election = election
        self.candidate = candidate
        self.leader: Optional[pb.Leader] = None
        self._open(
            target,
            lambda channel, requests: pb_grpc.ElectionStub(channel).Campaign(requests),
            # The join is ping 1 (zkgate._lease).
            pb.CampaignRequest(
                join=pb.Join(election=election, candidate=candidate, value=value, ping_seq=1)
            ),
            election,
            on_lost,
            start,
            _loss_hook,
            _grant_hook,
        )
        self.elected = self._granted

    def _leave_request(self) -> pb.CampaignRequest:
        return pb.CampaignRequest(resign=pb.ResignCandidacy())

    def _ping_request(self, seq: int) -> pb.CampaignRequest:
        return pb.CampaignRequest(ping=common_pb2.Ping(seq=seq))

    def _on_message(self, kind: str, response: pb.CampaignResponse) -> bool:
        if kind == "elected":
            self.leader = response.elected.leader
            return True
        if kind == "proclaimed":
            self.leader = response.proclaimed.leader
        return False

    # ----------------------------------------------------------------------------- queries

    @property
    def is_leader(self) -> bool:
        """Elected, and nothing since says otherwise."""
        return self._holding

    @property
    def fencing_token(self) -> Optional[int]:
        """This leader's fencing token: pass it to services that fence writes (``Validate``)."""
        return self.leader.fencing_token if self.leader is not None else None

    def wait_elected(self, timeout: Optional[float] = None) -> pb.Leader:
        """Blocks until this campaign leads; returns the ``Leader``.

        Raises :class:`LeadershipLost` if the campaign ended first, :class:`TimeoutError` after
        ``timeout`` seconds (the campaign goes on: call :meth:`close` to give up).
        """
        self._wait_for(self.elected, timeout, "elected")
        assert self.leader is not None
        return self.leader

    # ----------------------------------------------------------------------------- actions

    def proclaim(self, value: bytes, timeout: Optional[float] = None) -> pb.Leader:
        """Replaces the leader's value (the unary ``Proclaim`` by lease, so a refusal does not
        end the campaign). Raises ``grpc.RpcError`` (``FAILED_PRECONDITION`` if not leader)."""
        if self.lease is None:
            self.wait_queued(timeout)
        request = pb.ProclaimRequest(lease=self.lease, value=value)
        response = unary(
            self.fleet, lambda ch, t: pb_grpc.ElectionStub(ch).Proclaim(request, timeout=t), timeout
        )
        return response.leader

    def resign(self, timeout: float = 5.0) -> None:
        """Leaves the election and waits until the gateway has deleted the znode (the stream then
        ends ``OK``). Falls back to cancelling the stream after ``timeout`` seconds."""
        self._leave(timeout)


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


def leader(target: Target, election: str, timeout: Optional[float] = None) -> Optional[pb.Leader]:
    """The election's current leader, or ``None`` when nobody leads."""
    request = pb.LeaderRequest(election=election)
    try:
        return unary(
            target, lambda ch, t: pb_grpc.ElectionStub(ch).Leader(request, timeout=t), timeout
        ).leader
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise


def candidates(
    target: Target, election: str, page_size: int = 0, timeout: Optional[float] = None
) -> pb.CandidatesResponse:
    """The whole queue in order (``candidates``) and its size (``total``), following
    ``next_page_token`` through every page (``page_size`` per request; 0: as many as fit)."""
    stub_call = lambda ch, t, req: pb_grpc.ElectionStub(ch).Candidates(req, timeout=t)  # noqa: E731
    out = pb.CandidatesResponse()
    token = ""
    while True:
        req = pb.CandidatesRequest(election=election, page_size=page_size, page_token=token)
        page = unary(target, lambda ch, t: stub_call(ch, t, req), timeout)
        out.candidates.extend(page.candidates)
        out.total = page.total
        token = page.next_page_token
        if not token:
            return out


def observe(target: Target, election: str) -> Iterator[Optional[pb.Leader]]:
    """Yields the election's leader (``None`` while vacant): the current state first, then one
    value per change. Closing the generator (e.g. ``break``) ends the stream.

    When the stream fails (the gateway drains, dies, or loses its session) it observes again on
    the fleet's next endpoint after a backoff, and never yields a leader whose fencing token is
    lower than one it already yielded (a reconnect's first message may be older than what was
    seen). Errors other than ``UNAVAILABLE``/``ABORTED`` end the generator with the error.
    """
    fleet, own = fleet_for(target)
    backoff = Backoff()
    highest = 0
    index = fleet.current
    call = None
    try:
        while True:
            call = pb_grpc.ElectionStub(fleet.channel(index)).Observe(
                pb.ObserveRequest(election=election)
            )
            try:
                for response in call:
                    backoff.reset()
                    if response.HasField("leader"):
                        if response.leader.fencing_token < highest:
                            continue  # older than what was already delivered
                        highest = response.leader.fencing_token
                        yield response.leader
                    else:
                        yield None
                code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                code = e.code()
                if code not in FAILOVER_CODES and code != grpc.StatusCode.ABORTED:
                    raise
            if code in FAILOVER_CODES:
                index = fleet.moved_on(index)
            threading.Event().wait(backoff.next())
    finally:
        if call is not None:
            call.cancel()
        if own:
            fleet.close()


class ElectionState(NamedTuple):
    """One election's state in :func:`observe_many`: its leader, ``None`` while vacant."""

    election: str
    leader: Optional[pb.Leader]


#: What :func:`observe_many` yields once, after the first state of every election.
SNAPSHOT_COMPLETE = "snapshot_complete"


def observe_many(
    target: Target, prefix: str, elections: Sequence[str] = ()
) -> Iterator[Union[ElectionState, str]]:
    """Yields an :class:`ElectionState` for every election whose name starts with ``prefix``
    (elections created later included) plus every name in ``elections``: first one per
    election, then :data:`SNAPSHOT_COMPLETE` once, then one per change. Closing the generator
    ends the stream.

    Reconnects like :func:`observe`. Per election it never yields a lower fencing token than one
    it already yielded nor repeats an unchanged state after a reconnect, and an election that
    led before a reconnect but is missing from the new snapshot is yielded as vacant.
    """
    fleet, own = fleet_for(target)
    backoff = Backoff()
    index = fleet.current
    call = None
    completed = False
    # election -> [highest token, last state key, leads]
    known: dict = {}

    def key(leader):
        return None if leader is None else (leader.fencing_token, leader.candidate, leader.value)

    try:
        while True:
            call = pb_grpc.ElectionStub(fleet.channel(index)).ObserveMany(
                pb.ObserveManyRequest(prefix=prefix, elections=list(elections))
            )
            snapshot: Optional[set] = set()
            try:
                for response in call:
                    backoff.reset()
                    if response.HasField("snapshot_complete"):
                        for name, k in known.items():
                            if snapshot is not None and k[2] and name not in snapshot:
                                k[1], k[2] = None, False
                                yield ElectionState(name, None)
                        snapshot = None
                        if not completed:
                            completed = True
                            yield SNAPSHOT_COMPLETE
                        continue
                    state = response.state
                    leader = state.leader if state.HasField("leader") else None
                    first = snapshot is not None and state.election not in snapshot
                    if snapshot is not None:
                        snapshot.add(state.election)
                    k = known.setdefault(state.election, [-1, (), False])
                    if leader is not None and leader.fencing_token < k[0]:
                        continue  # older than what was already delivered
                    if first and k[1] == key(leader):
                        continue  # a reconnect repeating the same state
                    if leader is not None:
                        k[0] = leader.fencing_token
                    k[1], k[2] = key(leader), leader is not None
                    yield ElectionState(state.election, leader)
                code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                code = e.code()
                if code not in FAILOVER_CODES and code != grpc.StatusCode.ABORTED:
                    raise
            if code in FAILOVER_CODES:
                index = fleet.moved_on(index)
            threading.Event().wait(backoff.next())
    finally:
        if call is not None:
            call.cancel()
        if own:
            fleet.close()
