"""The fleet rules (clients/CONFORMANCE.md) in the threaded API: endpoint lists and
ZKGATE_ENDPOINT, failover past a dead endpoint, paging, and auto-requeue across a drain."""

import os
import signal
import threading
import time
import uuid

import grpc
import pytest

import zkgate
from zkgate._fleet import Backoff

STEP = 10.0


def test_endpoints_come_from_code_or_zkgate_endpoint(monkeypatch):
    monkeypatch.setenv("ZKGATE_ENDPOINT", "http://a:1, https://b:2,c:3")
    assert [str(e) for e in zkgate.parse_endpoints()] == ["http://a:1", "https://b:2", "http://c:3"]
    assert [str(e) for e in zkgate.parse_endpoints(["x:9"])] == ["http://x:9"]
    monkeypatch.delenv("ZKGATE_ENDPOINT")
    assert [str(e) for e in zkgate.parse_endpoints()] == ["http://127.0.0.1:50051"]
    with pytest.raises(ValueError):
        zkgate.parse_endpoints("grpc://a:1")
    with pytest.raises(ValueError):
        zkgate.parse_endpoints("no-port")


def test_the_token_comes_from_code_a_file_or_zkgate_token(monkeypatch, tmp_path):
    from zkgate._fleet import resolve_token

    monkeypatch.setenv("ZKGATE_TOKEN", " from-env\n")
    f = tmp_path / "token"
    f.write_text("from-file\n")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert resolve_token("from-code", str(f)) == "from-code"
    assert resolve_token(None, str(f)) == "from-file"
    assert resolve_token() == "from-env"
    with pytest.raises(ValueError):
        resolve_token(None, str(empty))
    monkeypatch.delenv("ZKGATE_TOKEN")
    assert resolve_token() is None


def test_the_token_rides_on_every_call_threaded_and_asyncio():
    import asyncio
    from concurrent import futures

    import zkgate.aio

    seen = []

    class Recorder(grpc.GenericRpcHandler):
        def service(self, details):
            def handle(request, context):
                seen.append(dict(context.invocation_metadata()).get("authorization"))
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "recorded")

            return grpc.unary_unary_rpc_method_handler(
                handle, request_deserializer=lambda b: b, response_serializer=lambda b: b
            )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((Recorder(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target = f"http://127.0.0.1:{port}"

    async def asyncio_call():
        async with zkgate.aio.Fleet(target, token="s3cret") as fleet:
            with pytest.raises(grpc.RpcError):
                await zkgate.aio.leader(fleet, "e")

    try:
        fleet = zkgate.Fleet(target, token="s3cret")
        with pytest.raises(grpc.RpcError):
            zkgate.leader(fleet, "e")
        fleet.close()
        asyncio.run(asyncio_call())
    finally:
        server.stop(None)
    assert seen == ["Bearer s3cret", "Bearer s3cret"]


def test_close_waits_for_the_channels_at_most_its_timeout():
    class Channel:
        def __init__(self, release):
            self.release = release
            self.closed = threading.Event()

        def close(self):
            self.release.wait()
            self.closed.set()

    quick, stuck = threading.Event(), threading.Event()
    quick.set()
    fleet = zkgate.Fleet("x:1,y:2")
    fleet._channels = {0: Channel(quick), 1: Channel(quick)}
    assert fleet.close(timeout=STEP) is True
    # A channel whose close blocks (grpc/grpc#20026): close() returns False after its timeout,
    # and the channel still closes in the background once it can.
    blocked = Channel(stuck)
    fleet._channels = {0: blocked}
    assert fleet.close(timeout=0.1) is False
    assert not blocked.closed.is_set()
    stuck.set()
    assert blocked.closed.wait(STEP)
    assert fleet.close() is True  # nothing left to close


def test_backoff_is_full_jitter_doubling_to_two_seconds():
    b = Backoff()
    for n in range(12):
        assert 0 <= b.next() <= min(2.0, 0.05 * 2**n)
    waits = [b.next() for _ in range(200)]
    assert max(waits) <= 2.0 and max(waits) > 1.0, "capped at 2 s, and jittered up to it"
    b.reset()
    assert b.next() <= 0.05


def test_a_dead_first_endpoint_is_skipped(addr, election):
    fleet = zkgate.Fleet(["127.0.0.1:1", addr])
    try:
        with zkgate.elect(fleet, election, "a", timeout=STEP) as lead:
            assert lead.endpoint == f"http://{addr}"
            assert zkgate.leader(fleet, election).candidate == "a"
            assert fleet.current == 1, "the fleet remembers where it got through"
    finally:
        fleet.close()


def test_holders_and_candidates_follow_pages(addr, election):
    name = f"page-{uuid.uuid4().hex[:8]}"
    locks = [zkgate.Lock(addr, name, owner=f"r{i}", mode="read") for i in range(3)]
    camps = []
    try:
        for h in locks:
            h.wait_acquired(STEP)
        for i in range(3):  # one after the other: the queue's order is the order of joining
            camps.append(zkgate.Campaign(addr, election, f"c{i}"))
            camps[-1].wait_queued(STEP)
        h = zkgate.holders(addr, name, page_size=1)
        assert sorted(x.owner for x in h.holders) == ["r0", "r1", "r2"] and h.total == 3
        c = zkgate.candidates(addr, election, page_size=1)
        assert [x.candidate for x in c.candidates] == ["c0", "c1", "c2"] and c.total == 3
    finally:
        for x in locks + camps:
            x.close()


def test_standby_lock_holds_again_and_run_while_holding_returns(addr):
    name = f"standby-{uuid.uuid4().hex[:8]}"
    granted, lost = [], []
    sb = zkgate.standby_lock(
        addr, name, owner="s", on_granted=lambda h: granted.append(h.fencing_token),
        on_lost=lambda reason, h: lost.append(reason),
    )
    try:
        first = sb.wait_granted(STEP)
        zkgate.release(addr, first.lease)  # from "elsewhere": the hold ends OK, reason `ended`
        deadline = time.monotonic() + STEP
        while len(granted) < 2:
            assert time.monotonic() < deadline, (granted, lost)
            time.sleep(0.01)
        assert lost == ["ended"] and granted[1] > granted[0]
    finally:
        sb.close()
    assert list(zkgate.holders(addr, name).holders) == [], "close() released it"

    def work(held):
        assert held.is_held
        return "worked"

    assert zkgate.run_while_holding(work, addr, name, owner="w") == "worked"
    with pytest.raises(zkgate.Refused):
        zkgate.run_while_holding(work, addr, "bad name!", owner="w")


def test_standby_requeues_on_the_next_gateway_when_one_drains(fleet, election):
    """g2 is drained (SIGTERM): the holder reports `suspended` (a drain revokes holds with
    `suspended` first, G3c) and both it and the waiter go on
    through g1; observe follows without going back in fencing tokens. Kills g2: run last."""
    pid2 = int(os.environ["ZKGATE_PID2"])
    g2_first = [fleet[1], fleet[0]]
    events = []
    granted = threading.Condition()

    def on_granted(who):
        def f(s):
            with granted:
                events.append((who, "granted", s.fencing_token, s.endpoint))
                granted.notify_all()

        return f

    def on_lost(who):
        return lambda reason, s: events.append((who, "lost", reason, s.endpoint))

    x = zkgate.standby_campaign(g2_first, election, "x", on_granted=on_granted("x"), on_lost=on_lost("x"))
    y = None
    seen = zkgate.observe(g2_first, election)
    try:
        x.wait_granted(STEP)
        assert events == [("x", "granted", events[0][2], fleet[1])]
        y = zkgate.standby_campaign(g2_first, election, "y", on_granted=on_granted("y"), on_lost=on_lost("y"))
        deadline = time.monotonic() + STEP
        while zkgate.candidates(fleet[0], election).total < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        first = next(seen)
        assert first.candidate == "x"

        os.kill(pid2, signal.SIGTERM)
        with granted:
            assert granted.wait_for(
                lambda: len([e for e in events if e[1] == "granted"]) == 2, STEP
            ), events
        assert ("x", "lost", "suspended", fleet[1]) in events
        second = [e for e in events if e[1] == "granted"][1]
        assert second[3] == fleet[0], "requeued through g1"
        assert second[2] > events[0][2], "a later grant has a larger token"
        # Observe moved to g1 too: its leader is the new one (after a vacancy, maybe).
        deadline = time.monotonic() + STEP
        tokens = [first.fencing_token]
        while True:
            nxt = next(seen)
            if nxt is not None:
                tokens.append(nxt.fencing_token)
                if nxt.fencing_token == second[2]:
                    break
            assert time.monotonic() < deadline
        assert tokens == sorted(tokens), tokens
    finally:
        seen.close()
        x.close()
        if y is not None:
            y.close()


def test_mutual_tls_with_a_server_name_override():
    """ZKGATE_TLS_ADDR: a gateway requiring client certificates signed by ZKGATE_TLS_DIR/ca.pem;
    its certificate names 127.0.0.1 and localhost."""
    addr, pki = os.environ.get("ZKGATE_TLS_ADDR"), os.environ.get("ZKGATE_TLS_DIR")
    if not addr or not pki:
        pytest.skip("set ZKGATE_TLS_ADDR and ZKGATE_TLS_DIR (tests/python_client.rs does)")
    port = addr.rsplit(":", 1)[1]
    files = {k: os.path.join(pki, f) for k, f in [("ca", "ca.pem"), ("cert", "client.pem"), ("key", "client.key")]}
    election = f"tls-{uuid.uuid4().hex[:8]}"
    # Dialled by another name than the certificate's: the override makes it verify "localhost".
    fleet = zkgate.Fleet(
        f"https://127.0.0.2:{port},https://127.0.0.1:{port}",
        tls=zkgate.Tls(server_name="localhost", **files),
    )
    try:
        with zkgate.elect(fleet, election, "t", timeout=STEP) as lead:
            assert zkgate.leader(fleet, election).candidate == "t"
            assert lead.fencing_token > 0
    finally:
        fleet.close()
    no_cert = zkgate.Fleet(f"https://127.0.0.1:{port}", tls=zkgate.Tls(ca=files["ca"]))
    try:
        with pytest.raises(grpc.RpcError):
            zkgate.leader(no_cert, election)
    finally:
        no_cert.close()
    with pytest.raises(ValueError):
        zkgate.Tls(cert=files["cert"]).credentials()
