"""The asyncio API (zkgate.aio) against a real gateway: hand-over, a lock with ttl, failover past
a dead endpoint, auto-requeue, paging and observe."""

import asyncio
import time
import uuid

import grpc
import pytest

import zkgate.aio as zk

STEP = 10.0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_aclose_waits_for_the_channels_at_most_its_timeout():
    class Channel:
        def __init__(self, release):
            self.release = release
            self.closed = False

        async def close(self):
            await self.release.wait()
            self.closed = True

    async def main():
        quick, stuck = asyncio.Event(), asyncio.Event()
        quick.set()
        fleet = zk.Fleet("x:1,y:2")
        first, second = Channel(quick), Channel(quick)
        fleet._channels = {0: first, 1: second}
        assert await fleet.aclose(timeout=STEP) is True
        assert first.closed and second.closed
        # A channel whose close blocks: aclose() gives it up after its timeout.
        blocked = Channel(stuck)
        fleet._channels = {0: blocked}
        assert await fleet.aclose(timeout=0.1) is False
        assert not blocked.closed
        assert await fleet.aclose() is True  # nothing left to close

    run(main())


def test_candidates_are_elected_in_order_with_growing_tokens(addr, election):
    async def main():
        async with zk.Fleet(["127.0.0.1:1", addr]) as fleet:
            a = zk.Campaign(fleet, election, "a", b"va")
            leader_a = await a.wait_elected(STEP)
            assert a.endpoint == f"http://{addr}", "the dead first endpoint was skipped"
            b = zk.Campaign(fleet, election, "b")
            assert await b.wait_queued(STEP) == 1
            assert [c.candidate for c in (await zk.candidates(fleet, election, page_size=1)).candidates] == ["a", "b"]
            seen = zk.observe(fleet, election)
            assert (await seen.__anext__()).candidate == "a"
            await a.resign()
            assert a.lost.is_set() and a.lost_reason == "resigned" and a.end_code == grpc.StatusCode.OK
            leader_b = await b.wait_elected(STEP)
            assert leader_b.fencing_token > leader_a.fencing_token
            nxt = await seen.__anext__()
            if nxt is None:
                nxt = await seen.__anext__()
            assert nxt.candidate == "b"
            await seen.aclose()
            assert (await zk.leader(fleet, election)).candidate == "b"
            await b.resign()  # ends OK once the gateway has deleted the znode
            assert b.end_code == grpc.StatusCode.OK
            assert await zk.leader(fleet, election) is None
            await b.close()

    run(main())


def test_lock_with_ttl_and_try_lock(addr):
    name = f"aio-{uuid.uuid4().hex[:8]}"

    async def main():
        async with zk.lock(addr, name, owner="a", ttl=0.6, timeout=STEP) as held:
            await asyncio.sleep(2.0)  # only the helper's keep_alive keeps it
            held.check()
            assert [h.owner for h in (await zk.holders(addr, name)).holders] == ["a"]
            assert await zk.validate(addr, name, held.fencing_token)
            with pytest.raises(zk.NotAcquired):
                async with zk.lock(addr, name, owner="b", wait_timeout=0, timeout=STEP):
                    pytest.fail("a held lock was acquired by a try-lock")
        assert held.lost.is_set()

    run(main())


def test_standby_and_run_while_leader(addr, election):
    async def main():
        granted, lost = [], []
        sb = zk.standby_campaign(addr, election, "s", on_granted=granted.append,
                                 on_lost=lambda r, s: lost.append(r))
        first = await sb.wait_granted(STEP)
        # Resigned from elsewhere: the hold ends ("ended") and the standby campaigns again.
        from zkgate.v1 import election_pb2 as pb, election_pb2_grpc as pbg
        async with grpc.aio.insecure_channel(addr) as ch:
            await pbg.ElectionStub(ch).Resign(pb.ResignRequest(lease=first.lease))
        deadline = asyncio.get_running_loop().time() + STEP
        while len(granted) < 2:
            assert asyncio.get_running_loop().time() < deadline, (granted, lost)
            await asyncio.sleep(0.02)
        assert lost == ["ended"]
        assert granted[1].fencing_token > granted[0].fencing_token
        await sb.close()

        async def work(c):
            return ("worked", c.fencing_token > 0)

        assert await zk.run_while_leader(work, addr, election, "w") == ("worked", True)

    run(main())


def test_a_leader_holds_on_its_answered_pings(addr, election):
    """As the threaded test: three silence limits held on answered pings alone."""

    async def main():
        async with zk.elect(addr, election, "a", timeout=STEP) as lead:
            assert lead._lease is not None, "the gateway answers pings"
            limit = lead.silence_limit
            first = lead._deadline
            await asyncio.sleep(limit * 3)
            assert lead.is_leader and not lead.lost.is_set()
            assert lead._lease.last_seq >= 8, "a holder pings every quarter of the limit"
            assert lead._deadline >= first + limit * 2
            assert lead._deadline <= time.monotonic() + limit

    run(main())
