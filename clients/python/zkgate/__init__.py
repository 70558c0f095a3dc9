"""Python client for zkgate, the gRPC coordination gateway over ZooKeeper.

``zkgate.v1`` holds the generated stubs; this package adds a small helper for leader election
that implements the client's side of the contract (the silence-limit watchdog, suspension and
stream end as loss of leadership). See ``zkgate.election``.
"""

from zkgate.election import Campaign, LeadershipLost, elect, leader, observe

__all__ = ["Campaign", "LeadershipLost", "elect", "leader", "observe"]
