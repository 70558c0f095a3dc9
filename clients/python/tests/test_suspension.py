"""The helper's rule for a suspension heard while queued, against a scripted gateway in this
process (a real gateway never grants while suspended; the rule is defence in depth): a
``suspended`` with no ``resumed`` before the grant is carried into it, so the hold is lost as it
is granted, with loss ``suspended``."""

import contextlib
import threading
from concurrent import futures

import grpc
import pytest
from google.protobuf import duration_pb2

import zkgate
import zkgate._stream
from zkgate.v1 import common_pb2 as common
from zkgate.v1 import election_pb2 as pb
from zkgate.v1 import election_pb2_grpc as pb_grpc

STEP = 10.0


class _Scripted(pb_grpc.ElectionServicer):
    def __init__(self, resumed: bool):
        self.resumed = resumed
        self.cancelled = threading.Event()

    def Campaign(self, request_iterator, context):
        context.add_callback(self.cancelled.set)
        first = next(request_iterator)
        yield pb.CampaignResponse(queued=common.Queued(lease="lease", position=1))
        yield pb.CampaignResponse(suspended=common.Suspended())
        if self.resumed:
            yield pb.CampaignResponse(resumed=common.Resumed())
        leader = pb.Leader(election=first.join.election, candidate=first.join.candidate, fencing_token=7)
        yield pb.CampaignResponse(elected=pb.Elected(leader=leader))
        # Then stays open until the client resigns (the stream ends OK) or cancels.
        for r in request_iterator:
            if r.HasField("resign"):
                return


def _serve(servicer):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ElectionServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


@contextlib.contextmanager
def _campaign(servicer):
    """A scripted gateway serving ``servicer`` and a threaded Campaign on it; both closed after."""
    server, addr = _serve(servicer)
    try:
        c = zkgate.Campaign(addr, "e", "a")
        try:
            yield c
        finally:
            c.close()
    finally:
        server.stop(None)


def _aio_campaign(servicer, body):
    """Runs ``await body(c)`` with an asyncio Campaign on a scripted gateway serving
    ``servicer``; both closed after."""
    import asyncio

    import zkgate.aio as zk

    server, addr = _serve(servicer)

    async def main():
        async with zk.Fleet([addr]) as fleet:
            c = zk.Campaign(fleet, "e", "a")
            try:
                await body(c)
            finally:
                await c.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        server.stop(None)


def test_a_grant_after_a_suspension_heard_while_queued_is_lost_at_once():
    for resumed in (False, True):
        servicer = _Scripted(resumed)
        with _campaign(servicer) as c:
            c.elected.wait(STEP)
            assert c.fencing_token == 7
            if resumed:
                assert c.is_leader, "resumed before the grant: it holds"
                assert not c.lost.is_set()
            else:
                assert c.lost.wait(STEP), "granted while suspended: lost at once"
                assert c.loss == "suspended"
                assert not c.is_leader
                assert servicer.cancelled.wait(STEP), "the helper cancelled the stream"


def test_the_asyncio_helper_carries_the_suspension_too():
    import asyncio

    async def body(c):
        await asyncio.wait_for(c.lost.wait(), STEP)
        assert c.loss == "suspended"
        assert c.fencing_token == 7
        assert not c.is_leader

    _aio_campaign(_Scripted(resumed=False), body)


class _Frozen(pb_grpc.ElectionServicer):
    """Elects the candidate with a silence limit of a minute, then sends one heartbeat when
    told: the heartbeat a frozen holder finds waiting in its socket when it runs again. With
    ``answers_pings`` (a gateway that answers pings) the grant names the join (ping 1) and the
    heartbeat answers the ping the holder sent on the grant (ping 2)."""

    def __init__(self, answers_pings: bool = False):
        self.answers_pings = answers_pings
        self.send_heartbeat = threading.Event()
        self.cancelled = threading.Event()

    def Campaign(self, request_iterator, context):
        context.add_callback(self.cancelled.set)
        first = next(request_iterator)
        queued = common.Queued(lease="lease", position=0, answers_pings=self.answers_pings)
        yield pb.CampaignResponse(queued=queued)
        leader = pb.Leader(election=first.join.election, candidate=first.join.candidate, fencing_token=7)
        limit = duration_pb2.Duration(seconds=60)
        ping_seq = 1 if self.answers_pings else 0
        elected = pb.Elected(leader=leader, silence_limit=limit, ping_seq=ping_seq)
        yield pb.CampaignResponse(elected=elected)
        self.send_heartbeat.wait(STEP)
        yield pb.CampaignResponse(heartbeat=common.Heartbeat(seq=2 if self.answers_pings else 0))
        self.cancelled.wait(STEP)


def _past_the_deadline(monkeypatch):
    """Moves the watchdog's clock an hour on: as a process frozen that long finds it."""
    real = zkgate._stream._clock
    monkeypatch.setattr(zkgate._stream, "_clock", lambda: real() + 3600.0)


@pytest.mark.parametrize("answers_pings", [False, True])
def test_a_heartbeat_heard_after_the_deadline_does_not_revive_the_hold(monkeypatch, answers_pings):
    """A holder frozen past its silence deadline finds, when it runs again, both its wait due
    and messages that waited in its socket meanwhile. Heard late they say nothing about now:
    the silence came first and is final (G3b), whichever of the two its wait returns — also
    when the late message answers a ping (the anchored lease)."""
    servicer = _Frozen(answers_pings)
    with _campaign(servicer) as c:
        assert c.elected.wait(STEP)
        assert c.is_leader
        _past_the_deadline(monkeypatch)
        # Asked now, before the watching thread has run: not leader any more.
        assert not c.is_leader
        servicer.send_heartbeat.set()
        assert c.lost.wait(STEP), "the late heartbeat revived the hold"
        assert c.loss == "silence"
        assert not c.is_leader
        assert servicer.cancelled.wait(STEP), "the helper cancelled the stream"


@pytest.mark.parametrize("answers_pings", [False, True])
def test_the_asyncio_helper_does_not_revive_either(monkeypatch, answers_pings):
    import asyncio

    servicer = _Frozen(answers_pings)

    async def body(c):
        await asyncio.wait_for(c.elected.wait(), STEP)
        assert c.is_leader
        _past_the_deadline(monkeypatch)
        servicer.send_heartbeat.set()
        await asyncio.wait_for(c.lost.wait(), STEP)
        assert c.loss == "silence"
        assert not c.is_leader

    _aio_campaign(servicer, body)
