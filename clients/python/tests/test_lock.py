"""The Python lock helper against a real gateway: exclusion and fencing order, a semaphore,
try-lock, ttl with automatic keep-alive, and the watchdog on a frozen gateway."""

import os
import signal
import time
import uuid

import grpc
import pytest

import zkgate

STEP = 10.0


@pytest.fixture
def name() -> str:
    return f"pylock-{uuid.uuid4().hex[:12]}"


def test_mutex_is_handed_over_in_order_with_increasing_tokens(addr, name):
    a = zkgate.Lock(addr, name, owner="a")
    others = []
    try:
        token_a = a.wait_acquired(STEP)
        b = zkgate.Lock(addr, name, owner="b")
        others.append(b)
        assert b.wait_queued(STEP) == 1
        c = zkgate.Lock(addr, name, owner="c")
        others.append(c)
        assert c.wait_queued(STEP) == 2
        time.sleep(0.2)
        assert not b.acquired.is_set() and not c.acquired.is_set(), "one holder at a time"
        assert zkgate.validate(addr, name, token_a)

        a.release()
        assert a.lost.is_set() and a.lost_reason == "released"
        assert a.end_code == grpc.StatusCode.OK
        token_b = b.wait_acquired(STEP)
        assert token_b > token_a
        assert not zkgate.validate(addr, name, token_a), "a released: its token is stale"
        assert not c.acquired.is_set()
        b.cancel()  # as if b's process died: stream loss is release
        token_c = c.wait_acquired(STEP)
        assert token_c > token_b
        assert c.is_held and c.silence_limit and c.silence_limit > 0
    finally:
        for h in [a, *others]:
            h.close()
    assert list(zkgate.holders(addr, name).holders) == []


def test_semaphore_admits_permits_holders_and_queues_the_rest(addr, name):
    held = [zkgate.Lock(addr, name, owner=f"s{i}", permits=2) for i in range(2)]
    third = None
    try:
        for h in held:
            h.wait_acquired(STEP)
        third = zkgate.Lock(addr, name, owner="s2", permits=2)
        assert third.wait_queued(STEP) == 2
        time.sleep(0.2)
        assert not third.acquired.is_set(), "only two permits"
        h = zkgate.holders(addr, name)
        assert sorted(x.owner for x in h.holders) == ["s0", "s1"] and h.waiting == 1
        held[0].release()
        third.wait_acquired(STEP)
    finally:
        for x in held + ([third] if third else []):
            x.close()


def test_try_lock_on_a_held_lock_fails_and_leaves_no_waiter(addr, name):
    with zkgate.lock(addr, name, owner="holder", timeout=STEP) as held:
        with pytest.raises(zkgate.NotAcquired):
            with zkgate.lock(addr, name, owner="trier", wait_timeout=0, timeout=STEP):
                pytest.fail("a held lock was acquired by a try-lock")
        h = zkgate.holders(addr, name)
        assert [x.owner for x in h.holders] == ["holder"] and h.waiting == 0
        held.check()
    assert held.lost.is_set()
    with pytest.raises(zkgate.LockLost):
        held.check()


def test_ttl_hold_survives_with_automatic_keep_alive(addr, name):
    with zkgate.lock(addr, name, owner="ttl", ttl=0.6, timeout=STEP) as held:
        time.sleep(2.0)  # more than three ttls: only the helper's keep_alive keeps it
        held.check()
        assert [x.owner for x in zkgate.holders(addr, name).holders] == ["ttl"]


def test_release_by_lease_from_elsewhere_ends_the_hold(addr, name):
    lost = []
    held = zkgate.Lock(addr, name, owner="a", on_lost=lost.append)
    try:
        held.wait_acquired(STEP)
        zkgate.release(addr, held.lease)
        assert held.lost.wait(STEP)
        # The hold is lost at the gateway's notice (G3c: before anyone else can acquire); the
        # stream itself ends OK once the helper's own release{} is done.
        deadline = time.monotonic() + STEP
        while held.end_code is None or not lost:
            assert time.monotonic() < deadline, (held.end_code, lost)
            time.sleep(0.01)
        assert held.end_code == grpc.StatusCode.OK
        assert lost == ["released"], "released by someone else: on_lost is called"
    finally:
        held.close()


def test_watchdog_declares_loss_when_the_gateway_freezes(addr, name):
    pid = os.environ.get("ZKGATE_PID")
    if not pid:
        pytest.skip("needs ZKGATE_PID: the gateway process to freeze")
    pid = int(pid)
    lost = []
    with zkgate.lock(addr, name, owner="a", timeout=STEP, on_lost=lost.append) as held:
        limit = held.silence_limit
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert held.lost.wait(limit * 3), "no loss declared while the gateway was frozen"
            waited = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
        assert not held.is_held
        assert "silence limit" in held.lost_reason
        assert lost == [held.lost_reason]
        assert limit / 3 <= waited <= limit + 2.0, (waited, limit)
    # The helper gave the lock up: once the gateway runs again, another request gets it. (The
    # freeze may have cost the gateway its ZooKeeper connection for a moment: retry UNAVAILABLE.)
    deadline = time.monotonic() + STEP
    while True:
        nxt = zkgate.Lock(addr, name, owner="b")
        try:
            nxt.wait_acquired(STEP)
            break
        except zkgate.LockLost:
            if nxt.end_code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            nxt.close()
