"""Locks and semaphores through a zkgate gateway, with the same watchdog as elections.

A :class:`Lock` is one open ``zkgate.v1.Lock/Acquire`` stream: one request for ``permits`` of
the lock ``name`` (1: a mutex; N: a semaphore), holding one ZooKeeper znode at the gateway for
as long as the stream is open. The hold is lost — :attr:`Lock.lost` set, the stream cancelled so
the next waiter gets it — when the stream ends, when the gateway says ``suspended``, and when
its lease runs out while holding (pings answered, or with an older gateway anything heard,
within ``silence_limit``: see ``zkgate._stream``). With ``ttl`` the
helper sends ``keep_alive`` every ``ttl / 3`` for as long as the object lives.

Typical use::

    with zkgate.lock("127.0.0.1:50051", "invoice-42", owner="host-1") as held:
        write_invoice(fencing_token=held.fencing_token)
        held.check()  # raises LockLost if the hold can no longer be trusted
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Optional

import grpc
from google.protobuf import duration_pb2

from zkgate._fleet import Target
from zkgate._stream import HolderStream, unary
from zkgate.v1 import common_pb2
from zkgate.v1 import lock_pb2 as pb
from zkgate.v1 import lock_pb2_grpc as pb_grpc

__all__ = ["Lock", "LockLost", "NotAcquired", "lock", "holders", "release", "validate"]

_MODES = {"write": pb.LOCK_MODE_WRITE, "read": pb.LOCK_MODE_READ}


class LockLost(Exception):
    """This request does not (or no longer) hold the lock; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class NotAcquired(LockLost):
    """``wait_timeout`` passed (or, with 0, the lock was taken): the request was withdrawn."""


def _duration(seconds: Optional[float]) -> Optional[duration_pb2.Duration]:
    if seconds is None:
        return None
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class Lock(HolderStream):
    """One request for ``permits`` of lock ``name``: queues on construction, releases on
    :meth:`close`.

    ``mode`` is ``"write"`` (exclusive, the default) or ``"read"`` (shared with other readers).
    ``wait_timeout`` (seconds): give up if not acquired in time (0: try once); ``None`` waits.
    ``ttl`` (seconds): the gateway releases the lock unless it hears ``keep_alive`` within each
    ttl; the helper sends one every ``ttl / 3``.

    Attributes as for :class:`zkgate.Campaign` (``lease``, ``position``, ``silence_limit``,
    ``queued``, ``lost``, ``lost_reason``, ``end_code``), plus ``acquired`` (an event) and
    ``fencing_token`` once acquired. ``on_lost(reason)`` is called when a hold ends other than
    by this object's own :meth:`release`/:meth:`close`.
    """

    lost_error = LockLost
    ok_end_reason = "released"

    def __init__(
        self,
        target: Target,
        name: str,
        *,
        owner: str,
        permits: int = 1,
        mode: str = "write",
        wait_timeout: Optional[float] = None,
        ttl: Optional[float] = None,
        on_lost: Optional[Callable[[str], None]] = None,
        start: Optional[int] = None,
        _loss_hook: Optional[Callable[[HolderStream], None]] = None,
        _grant_hook: Optional[Callable[[HolderStream], None]] = None,
    ):
        if mode not in _MODES:
            raise ValueError(f"mode must be 'write' or 'read', not {mode!r}")
        self.name = name
        self.owner = owner
        self.fencing_token: Optional[int] = None
        request = pb.AcquireLock(
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
            lambda channel, requests: pb_grpc.LockStub(channel).Acquire(requests),
            pb.AcquireRequest(acquire=request),
            name,
            on_lost,
            start,
            _loss_hook,
            _grant_hook,
        )
        self.acquired = self._granted
        if ttl is not None:
            threading.Thread(
                target=self._keep_alive, args=(ttl / 3,), name=f"zkgate-ttl-{name}", daemon=True
            ).start()

    def _leave_request(self) -> pb.AcquireRequest:
        return pb.AcquireRequest(release=pb.ReleaseLock())

    def _ping_request(self, seq: int) -> pb.AcquireRequest:
        return pb.AcquireRequest(ping=common_pb2.Ping(seq=seq))

    def _on_message(self, kind: str, response: pb.AcquireResponse) -> bool:
        if kind == "acquired":
            self.fencing_token = response.acquired.fencing_token
            return True
        return False

    def _keep_alive(self, every: float) -> None:
        while not self._done.wait(every):
            self._send(pb.AcquireRequest(keep_alive=pb.KeepAlive()))

    @property
    def is_held(self) -> bool:
        """Acquired, and nothing since says otherwise."""
        return self._holding

    def wait_acquired(self, timeout: Optional[float] = None) -> int:
        """Blocks until the lock is held; returns the fencing token.

        Raises :class:`NotAcquired` when ``wait_timeout`` ran out (the gateway withdrew the
        request), :class:`LockLost` if the stream ended otherwise, :class:`TimeoutError` after
        ``timeout`` seconds (the request stays queued: call :meth:`close` to give up).
        """
        try:
            self._wait_for(self.acquired, timeout, "acquired")
        except LockLost as e:
            if self.end_code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise NotAcquired(e.reason) from None
            raise
        assert self.fencing_token is not None
        return self.fencing_token

    def release(self, timeout: float = 5.0) -> None:
        """Releases (or withdraws) in-stream and waits until the gateway deleted the znode (the
        stream then ends ``OK``). Falls back to cancelling the stream after ``timeout``."""
        self._leave(timeout)


@contextlib.contextmanager
def lock(
    target: Target,
    name: str,
    *,
    owner: str,
    permits: int = 1,
    mode: str = "write",
    wait_timeout: Optional[float] = None,
    ttl: Optional[float] = None,
    timeout: Optional[float] = None,
    on_lost: Optional[Callable[[str], None]] = None,
) -> Iterator[Lock]:
    """Acquires, yields the :class:`Lock` while held, and releases on exit.

    Inside the block, work that needs the lock must stop as soon as ``held.lost`` is set (wait
    on it, poll ``held.is_held``, or call ``held.check()``); pass ``held.fencing_token`` to the
    services you write to. ``wait_timeout=0`` is a try-lock: :class:`NotAcquired` if taken.
    """
    held = Lock(
        target,
        name,
        owner=owner,
        permits=permits,
        mode=mode,
        wait_timeout=wait_timeout,
        ttl=ttl,
        on_lost=on_lost,
    )
    try:
        held.wait_acquired(timeout)
        yield held
    finally:
        held.close()


def holders(
    target: Target, name: str, page_size: int = 0, timeout: Optional[float] = None
) -> pb.HoldersResponse:
    """The lock's current holders (no leases), ``waiting`` and ``total``, following
    ``next_page_token`` through every page (``page_size`` per request; 0: as many as fit)."""
    out = pb.HoldersResponse()
    token = ""
    while True:
        req = pb.HoldersRequest(name=name, page_size=page_size, page_token=token)
        page = unary(target, lambda ch, t: pb_grpc.LockStub(ch).Holders(req, timeout=t), timeout)
        out.holders.extend(page.holders)
        out.waiting, out.total = page.waiting, page.total
        token = page.next_page_token
        if not token:
            return out


# How much longer than the fleet's deadline ``release`` by lease may take when no timeout is
# given: the gateway answers once the holder has been told and its znode is gone, which for a
# holder that does not end its stream is its silence_limit plus the gateway's keepalive timeout
# plus a second (8.5 s with the gateway's defaults).
BY_LEASE_EXTRA = 10.0


def release(target: Target, lease: str, timeout: Optional[float] = None) -> None:
    """Releases a hold (or withdraws a request) by its lease, from any process or gateway.
    Without ``timeout``: the fleet's deadline plus ``BY_LEASE_EXTRA``."""
    req = pb.ReleaseRequest(lease=lease)
    extra = BY_LEASE_EXTRA if timeout is None else 0.0
    unary(target, lambda ch, t: pb_grpc.LockStub(ch).Release(req, timeout=t + extra), timeout)


def validate(
    target: Target, name: str, fencing_token: int, timeout: Optional[float] = None
) -> bool:
    """Whether ``fencing_token`` belongs to a current holder of ``name``."""
    req = pb.LockValidateRequest(name=name, fencing_token=fencing_token)
    return unary(
        target, lambda ch, t: pb_grpc.LockStub(ch).Validate(req, timeout=t), timeout
    ).current
