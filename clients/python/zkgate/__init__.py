"""Python client for zkgate, the gRPC coordination gateway over ZooKeeper.

``zkgate.v1`` holds the generated stubs; this package adds small helpers for leader election
(``zkgate.election``) and locks (``zkgate.lock``) that implement the client's side of the
contract: the silence-limit watchdog, and suspension and stream end as loss of the hold;
``zkgate.requeue`` stays a candidate across losses and gateway failures, and ``zkgate.aio`` is
the same API for asyncio. Every call takes a gateway fleet (``zkgate.Fleet``, a list of
endpoints, or ``None`` for ``ZKGATE_ENDPOINT``) and fails over between its gateways.
"""

from zkgate._fleet import Endpoint, Fleet, Tls, parse_endpoints
from zkgate.election import (
    SNAPSHOT_COMPLETE,
    Campaign,
    ElectionState,
    LeadershipLost,
    candidates,
    elect,
    leader,
    observe,
    observe_many,
)
from zkgate.lock import Lock, LockLost, NotAcquired, holders, lock, release, validate
from zkgate.requeue import (
    Refused,
    Standby,
    run_while_holding,
    run_while_leader,
    standby_campaign,
    standby_lock,
)

__all__ = [
    "Campaign",
    "Endpoint",
    "Fleet",
    "Refused",
    "Standby",
    "Tls",
    "candidates",
    "parse_endpoints",
    "run_while_holding",
    "run_while_leader",
    "standby_campaign",
    "standby_lock",
    "LeadershipLost",
    "Lock",
    "LockLost",
    "NotAcquired",
    "elect",
    "holders",
    "leader",
    "lock",
    "observe",
    "observe_many",
    "ElectionState",
    "SNAPSHOT_COMPLETE",
    "release",
    "validate",
]
