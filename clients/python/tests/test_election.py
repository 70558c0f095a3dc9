"""The Python helper against a real gateway: ordering, failover, the context manager, the
watchdog on a frozen gateway, and observe."""

import os
import signal
import time

import grpc
import pytest

import zkgate

STEP = 10.0


def test_second_candidate_is_elected_when_the_first_resigns(addr, election):
    a = zkgate.Campaign(addr, election, "a", b"va")
    b = None
    try:
        assert a.wait_queued(STEP) == 0
        leader_a = a.wait_elected(STEP)
        b = zkgate.Campaign(addr, election, "b", b"vb")
        assert (leader_a.candidate, leader_a.value) == ("a", b"va")
        assert b.wait_queued(STEP) == 1
        time.sleep(0.2)
        assert not b.elected.is_set(), "only the head of the queue is elected"
        assert zkgate.leader(addr, election).candidate == "a"

        a.resign()
        assert a.lost.is_set() and a.lost_reason == "resigned"
        assert a.end_code == grpc.StatusCode.OK
        leader_b = b.wait_elected(STEP)
        assert leader_b.candidate == "b"
        assert leader_b.fencing_token > leader_a.fencing_token
        assert b.is_leader and b.silence_limit and b.silence_limit > 0
    finally:
        a.close()
        if b is not None:
            b.close()
    assert zkgate.leader(addr, election) is None


def test_failover_when_the_leader_process_drops_its_stream(addr, election):
    lost = []
    a = zkgate.Campaign(addr, election, "a", on_lost=lost.append)
    a.wait_elected(STEP)
    b = zkgate.Campaign(addr, election, "b")
    try:
        b.wait_queued(STEP)
        a.cancel()  # as if the process died: stream loss is release
        assert b.wait_elected(STEP).candidate == "b"
        assert a.lost.is_set() and a.end_code == grpc.StatusCode.CANCELLED
        assert lost == [], "on_lost is not called for our own cancel"
    finally:
        a.close()
        b.close()


def test_elect_context_manager_and_proclaim(addr, election):
    with zkgate.elect(addr, election, "solo", b"v1", timeout=STEP) as leadership:
        leadership.check()
        assert leadership.fencing_token > 0
        new = leadership.proclaim(b"v2")
        assert new.value == b"v2" and new.fencing_token == leadership.fencing_token
        assert zkgate.leader(addr, election).value == b"v2"
        deadline = time.monotonic() + STEP
        while leadership.leader.value != b"v2" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert leadership.leader.value == b"v2", "proclaimed arrives on the stream too"
    assert leadership.lost.is_set()
    with pytest.raises(zkgate.LeadershipLost):
        leadership.check()
    assert zkgate.leader(addr, election) is None


def test_proclaim_by_a_waiting_candidate_is_refused_and_keeps_the_campaign(addr, election):
    a = zkgate.Campaign(addr, election, "a")
    a.wait_elected(STEP)
    b = zkgate.Campaign(addr, election, "b")
    try:
        b.wait_queued(STEP)
        with pytest.raises(grpc.RpcError) as err:
            b.proclaim(b"nope")
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert not b.lost.is_set()
    finally:
        a.close()
        b.close()


def test_a_refused_join_ends_the_campaign(addr):
    c = zkgate.Campaign(addr, "bad name!", "x")
    with pytest.raises(zkgate.LeadershipLost) as err:
        c.wait_elected(STEP)
    assert c.end_code == grpc.StatusCode.INVALID_ARGUMENT
    assert "election" in err.value.reason
    c.close()


def test_observe_sees_vacancy_then_leaders(addr, election):
    seen = zkgate.observe(addr, election)
    assert next(seen) is None, "current state first: vacant"
    a = zkgate.Campaign(addr, election, "a")
    a.wait_elected(STEP)
    b = zkgate.Campaign(addr, election, "b")
    try:
        assert next(seen).candidate == "a"
        b.wait_queued(STEP)
        a.resign()
        b.wait_elected(STEP)
        nxt = next(seen)
        if nxt is None:  # the vacancy between two leaders may be reported
            nxt = next(seen)
        assert nxt.candidate == "b"
    finally:
        a.close()
        b.close()
        seen.close()


def test_observe_many_follows_a_prefix_and_later_elections(addr, election):
    prefix = election + "."
    a = zkgate.Campaign(addr, prefix + "one", "a")
    a.wait_elected(STEP)
    seen = zkgate.observe_many(addr, prefix, [prefix + "named"])
    b = None
    try:
        snapshot = {}
        for m in seen:
            if m == zkgate.SNAPSHOT_COMPLETE:
                break
            snapshot[m.election] = m.leader
        assert snapshot[prefix + "one"].candidate == "a"
        assert snapshot[prefix + "named"] is None, "a named election that does not exist is vacant"
        b = zkgate.Campaign(addr, prefix + "two", "b")
        b.wait_elected(STEP)
        m = next(seen)
        # A new election may first show as vacant: listed before its leader is confirmed.
        while m.election == prefix + "two" and m.leader is None:
            m = next(seen)
        assert (m.election, m.leader.candidate) == (prefix + "two", "b")
        a.resign()
        assert next(seen) == zkgate.ElectionState(prefix + "one", None), "a vacancy is reported"
    finally:
        a.close()
        if b is not None:
            b.close()
        seen.close()


def test_a_leader_holds_on_its_answered_pings(addr, election):
    """The gateway answers pings, so it sends the leader no unsolicited heartbeats (the join
    was ping 1): the leadership lasts three silence limits only because the helper pings and
    its deadline moves with each answered ping, each time from the ping's send."""
    with zkgate.elect(addr, election, "a", timeout=STEP) as leadership:
        assert leadership._lease is not None, "the gateway answers pings"
        limit = leadership.silence_limit
        first = leadership._deadline
        time.sleep(limit * 3)
        assert leadership.is_leader and not leadership.lost.is_set()
        assert leadership._lease.last_seq >= 8, "a holder pings every quarter of the limit"
        assert leadership._deadline >= first + limit * 2
        assert leadership._deadline <= time.monotonic() + limit


def test_watchdog_declares_loss_when_the_gateway_freezes(addr, election):
    pid = os.environ.get("ZKGATE_PID")
    if not pid:
        pytest.skip("needs ZKGATE_PID: the gateway process to freeze")
    pid = int(pid)
    lost = []
    with zkgate.elect(addr, election, "a", timeout=STEP, on_lost=lost.append) as leadership:
        limit = leadership.silence_limit
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert leadership.lost.wait(limit * 3), "no loss declared while the gateway was frozen"
            waited = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
        assert not leadership.is_leader
        assert "silence limit" in leadership.lost_reason
        assert lost == [leadership.lost_reason]
        # Heartbeats come every limit/3, so loss is declared within (limit/3, limit] + scheduling.
        assert limit / 3 <= waited <= limit + 2.0, (waited, limit)
    # The helper gave its candidacy up: once the gateway runs again, another is elected. (The
    # freeze may have cost the gateway its ZooKeeper connection for a moment: retry UNAVAILABLE.)
    deadline = time.monotonic() + STEP
    while True:
        follower = zkgate.Campaign(addr, election, "b")
        try:
            assert follower.wait_elected(STEP).candidate == "b"
            break
        except zkgate.LeadershipLost:
            if follower.end_code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            follower.close()


def test_unread_observers_do_not_cost_the_leadership(addr, election):
    """Observers nobody reads, on the campaign's own fleet, cost it nothing: each unread
    ``observe`` generator is simply not iterated, and gRPC's per-stream flow control holds that
    stream alone. (The Rust client had to read on instead: its transport, h2, ends the whole
    connection once ≈ 13,000 small messages wait unread; clients/CONFORMANCE.md.) 200 unread
    observers and 120 proclaims are ≈ 24,000 messages."""
    fleet = zkgate.Fleet(addr)
    a = zkgate.Campaign(fleet, election, "a", b"v")
    observers = []
    try:
        a.wait_elected(STEP)
        for _ in range(200):
            seen = zkgate.observe(fleet, election)
            assert next(seen).candidate == "a"
            observers.append(seen)
        for i in range(120):
            a.proclaim(f"v{i}".encode(), timeout=STEP)
        assert a.is_leader, "the leadership survived"
        # Read at last: every observer still follows, to the newest value.
        for seen in observers:
            while next(seen).value != b"v119":
                pass
        assert a.is_leader
    finally:
        for seen in observers:
            seen.close()
        a.close()
        fleet.close()
