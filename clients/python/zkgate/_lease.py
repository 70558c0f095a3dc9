"""A holder's lease on its own clock (contract G3b, the proto's ``Ping``): the pure rule the
holder streams follow with a gateway whose ``queued`` says ``answers_pings``.

A watchdog that restarts whenever a message *arrives* can be stretched by a slow link: a
heartbeat sent just before its gateway froze, arriving late, restarts it while ZooKeeper expires
the session and elects the successor. Here the holder numbers its pings and remembers when it
sent each (its first message, the join or acquire, is ping 1); the gateway answers one only
while its session vouches for the hold at least ``silence_limit`` past the moment it read it,
and a grant names the newest ping it had read. So the deadline is the *send* time of the newest
answered ping + ``silence_limit``: always before anyone else can be granted, however late the
answer arrives, and a late or replayed answer cannot move it past what the real one allowed.

Times are plain floats on one monotonic clock (``zkgate._stream._clock``); the class is not
thread-safe (each stream's watching thread or task owns its lease).
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Optional, Tuple

#: Pings remembered while unanswered. Waiters' pings are never answered (only the grant names
#: one), so the oldest are forgotten: one that old could only anchor a lease already over.
REMEMBERED = 64


class Lease:
    """The pings sent on one stream, and the deadline the answered ones give."""

    def __init__(self, first_sent: float):
        """A stream whose first message (the join or acquire) was ping 1, sent at
        ``first_sent`` (read before the stream opened: earlier only shortens the lease)."""
        self.sent: Deque[Tuple[int, float]] = deque([(1, first_sent)])
        self.last_seq = 1
        self.limit: Optional[float] = None
        self.until: Optional[float] = None

    def ping(self, now: float) -> int:
        """The number of the next ping, sent at ``now`` (recorded even if it cannot be sent:
        an unsent ping is never answered)."""
        self.last_seq += 1
        if len(self.sent) == REMEMBERED:
            self.sent.popleft()
        self.sent.append((self.last_seq, now))
        return self.last_seq

    def _take(self, seq: int) -> Optional[float]:
        """When ping ``seq`` was sent, forgetting it and every older one (answers come in
        order); ``None`` if this stream did not send it or forgot it."""
        at = next((t for s, t in self.sent if s == seq), None)
        while self.sent and self.sent[0][0] <= seq:
            self.sent.popleft()
        return at

    def granted(self, limit: Optional[float], ping_seq: int) -> Optional[float]:
        """The grant: ``ping_seq`` is the newest ping the gateway had read, ``limit`` its silence
        limit (seconds). Returns the deadline; ``None`` when the grant names no ping this stream
        sent (0, unknown, forgotten) or carries no limit: nothing anchors the hold, which is
        then lost at once. (Whether the deadline has already passed is the caller's question.)"""
        self.limit = limit
        at = self._take(ping_seq) if ping_seq > 0 else None
        self.until = None if at is None or limit is None else at + limit
        return self.until

    def answered(self, seq: int) -> Optional[float]:
        """``heartbeat{seq}``: the deadline, moved on if ``seq`` answers a ping sent later than
        the one that set it. Unsolicited (0), unknown, forgotten or older answers move nothing."""
        if seq > 0 and self.limit is not None:
            at = self._take(seq)
            if at is not None:
                moved = at + self.limit
                if self.until is None or moved > self.until:
                    self.until = moved
        return self.until
