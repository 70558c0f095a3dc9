"""Python client for zkgate, the gRPC coordination gateway over ZooKeeper.

``zkgate.v1`` holds the generated stubs; this package adds small helpers for leader election
(``zkgate.election``) and locks (``zkgate.lock``) that implement the client's side of the
contract: the silence-limit watchdog, and suspension and stream end as loss of the hold.
"""

from zkgate.election import Campaign, LeadershipLost, elect, leader, observe
from zkgate.lock import Lock, LockLost, NotAcquired, holders, lock, release, validate

__all__ = [
    "Campaign",
    "LeadershipLost",
    "Lock",
    "LockLost",
    "NotAcquired",
    "elect",
    "holders",
    "leader",
    "lock",
    "observe",
    "release",
    "validate",
]
