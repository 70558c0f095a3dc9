"""Stay a candidate (or a lock waiter) across losses and gateway failures: auto-requeue.

:class:`Standby` keeps one :class:`~zkgate.Campaign` or :class:`~zkgate.Lock` open at a time
and, whenever it ends, opens the next (clients/CONFORMANCE.md):

* a loss of the hold is reported once, as one of ``suspended``, ``silence``, ``unavailable``,
  ``ended`` (``on_lost(reason, stream)``), at the moment it is decided; the stream is cancelled;
* it campaigns/acquires again — on the fleet's next endpoint after ``unavailable`` or
  ``silence``, on the same one otherwise — after a full-jitter backoff (50 ms doubling to 2 s,
  reset once a stream is ``queued``);
* a waiter whose gateway drains or dies moves on the same way (nothing is reported: it held
  nothing);
* a refusal that trying again cannot fix (a bad name, permits that disagree, a refused
  certificate) stops it: ``error`` is set and ``on_error(exc)`` called.

:func:`run_while_leader` and :func:`run_while_holding` run a function for exactly as long as
each hold lasts, like Curator's ``LeaderSelector`` with auto-requeue and ``consul lock``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

import grpc

from zkgate._fleet import FATAL_CODES, SILENCE, UNAVAILABLE, Backoff, Target, fleet_for
from zkgate._stream import HolderStream
from zkgate.election import Campaign
from zkgate.lock import Lock

__all__ = ["Refused", "Standby", "standby_campaign", "standby_lock", "run_while_leader", "run_while_holding"]


class Refused(Exception):
    """The gateway refused the request in a way that trying again cannot fix."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class Standby:
    """Holds again after every loss; see the module doc.

    ``open_stream(fleet, start, loss_hook, grant_hook)`` opens one :class:`HolderStream`
    starting on endpoint ``start`` (use :func:`standby_campaign` / :func:`standby_lock`). Callbacks run on
    the helper's threads: ``on_granted(stream)`` when elected/acquired, ``on_lost(reason,
    stream)`` when a hold is lost, ``on_error(exc)`` when it gives up. ``work(stream)``, if
    given, runs on the helper's thread while each hold lasts and must return once
    ``stream.lost`` is set; if it returns while still holding, the hold is given up and the
    helper stops (``result`` is what it returned). ``requeue=False``: stop after the first
    loss.

    ``current`` is the stream now open; ``holding`` an event set while a hold lasts;
    :meth:`close` gives the hold up (resign/release) and stops.
    """

    def __init__(
        self,
        target: Target,
        open_stream: Callable[..., HolderStream],
        *,
        on_granted: Optional[Callable[[HolderStream], None]] = None,
        on_lost: Optional[Callable[[str, HolderStream], None]] = None,
        on_error: Optional[Callable[[BaseException], None]] = None,
        work: Optional[Callable[[HolderStream], Any]] = None,
        requeue: bool = True,
    ):
        self._fleet, self._own_fleet = fleet_for(target)
        self._open_stream = open_stream
        self._on_granted = on_granted
        self._on_lost = on_lost
        self._on_error = on_error
        self._work = work
        self._requeue = requeue
        self.current: Optional[HolderStream] = None
        self.holding = threading.Event()
        self.stopped = threading.Event()
        self.error: Optional[BaseException] = None
        self.result: Any = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="zkgate-standby", daemon=True)
        self._thread.start()

    def _report_grant(self, stream: HolderStream) -> None:
        self.holding.set()
        if self._on_granted is not None:
            self._on_granted(stream)

    def _report_loss(self, stream: HolderStream) -> None:
        self.holding.clear()
        if self._on_lost is not None:
            self._on_lost(stream.loss or "ended", stream)

    def _run(self) -> None:
        backoff = Backoff()
        index = self._fleet.current
        try:
            while not self._stop.is_set():
                with self._lock:
                    if self._stop.is_set():
                        break
                    s = self._open_stream(
                        self._fleet, index, self._report_loss, self._report_grant
                    )
                    self.current = s
                with s._state:
                    s._state.wait_for(lambda: s.queued.is_set() or s.lost.is_set())
                    if s.queued.is_set():
                        backoff.reset()
                    s._state.wait_for(lambda: s._granted.is_set() or s.lost.is_set())
                    granted = s._granted.is_set() and not s.lost.is_set()
                if granted:
                    if self._work is not None:
                        self.result = self._work(s)
                        if not s.lost.is_set():  # the work is done: give the hold up, stop
                            self._stop.set()
                            s.close()
                            break
                s.lost.wait()
                s._done.wait(5.0)
                self.holding.clear()
                s.close()
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
                self._stop.wait(backoff.next())
        except BaseException as e:  # noqa: BLE001 - handed to on_error
            self.error = e
            if self._on_error is not None:
                self._on_error(e)
        finally:
            self.stopped.set()

    def wait_granted(self, timeout: Optional[float] = None) -> HolderStream:
        """Waits until a hold is current; returns its stream. Raises the helper's error if it
        stopped, :class:`TimeoutError` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.holding.wait(0.05):
            if self.stopped.is_set():
                raise self.error or RuntimeError("the standby stopped")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"not granted within {timeout} s")
        assert self.current is not None
        return self.current

    def close(self, timeout: float = 5.0) -> None:
        """Gives the current hold up (resign/release; a queued request is withdrawn) and stops."""
        with self._lock:
            self._stop.set()
            s = self.current
        if s is not None:
            s.close()
        self._thread.join(timeout)
        if self._own_fleet:
            self._fleet.close()

    def __enter__(self) -> "Standby":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def standby_campaign(
    target: Target, election: str, candidate: str, value: bytes = b"", **kwargs
) -> Standby:
    """A :class:`Standby` campaigning in ``election`` (``kwargs``: :class:`Standby`'s)."""
    return Standby(
        target,
        lambda fleet, start, lost, granted: Campaign(
            fleet, election, candidate, value, start=start, _loss_hook=lost, _grant_hook=granted
        ),
        **kwargs,
    )


def standby_lock(
    target: Target,
    name: str,
    *,
    owner: str,
    permits: int = 1,
    mode: str = "write",
    ttl: Optional[float] = None,
    **kwargs,
) -> Standby:
    """A :class:`Standby` queueing for lock ``name`` (``kwargs``: :class:`Standby`'s)."""
    return Standby(
        target,
        lambda fleet, start, lost, granted: Lock(
            fleet, name, owner=owner, permits=permits, mode=mode, ttl=ttl, start=start,
            _loss_hook=lost, _grant_hook=granted,
        ),
        **kwargs,
    )


def run_while_leader(
    work: Callable[[Campaign], Any],
    target: Target,
    election: str,
    candidate: str,
    value: bytes = b"",
    **kwargs,
) -> Any:
    """Calls ``work(campaign)`` each time this candidate is elected, campaigning again after
    every loss (``work`` must return once ``campaign.lost`` is set: wait on it). Returns what
    ``work`` returns when it returns while still leading (leadership is then resigned).
    ``kwargs``: :class:`Standby`'s (``on_lost``, ``requeue``, …)."""
    return _run(standby_campaign(target, election, candidate, value, work=work, **kwargs))


def run_while_holding(work: Callable[[Lock], Any], target: Target, name: str, **kwargs) -> Any:
    """:func:`run_while_leader` for lock ``name`` (``owner=`` is required)."""
    return _run(standby_lock(target, name, work=work, **kwargs))


def _run(standby: Standby) -> Any:
    try:
        standby.stopped.wait()
    finally:
        standby.close()
    if standby.error is not None:
        raise standby.error
    return standby.result
