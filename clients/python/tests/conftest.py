"""The tests need a running gateway: ZKGATE_ADDR=host:port (tests/python_client.rs starts
`zkgate dev` and sets it; by hand: `scripts/dev.sh`, then ZKGATE_ADDR=127.0.0.1:50051)."""

import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture
def addr() -> str:
    a = os.environ.get("ZKGATE_ADDR")
    if not a:
        pytest.skip("set ZKGATE_ADDR to a running gateway (e.g. scripts/dev.sh)")
    return a


@pytest.fixture
def election() -> str:
    return f"py-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def fleet() -> list:
    """Two gateways on one ZooKeeper (tests/python_client.rs sets ZKGATE_FLEET to
    ``http://g1,http://g2`` and ZKGATE_PID2 to g2's pid, which the drain test SIGTERMs)."""
    f = os.environ.get("ZKGATE_FLEET")
    if not f:
        pytest.skip("set ZKGATE_FLEET to two gateways on one ZooKeeper (comma-separated)")
    return f.split(",")
