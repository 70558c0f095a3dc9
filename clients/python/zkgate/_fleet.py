"""The gateway fleet: endpoints, channels, TLS, deadlines, failover and backoff.

These are the rules of ``clients/CONFORMANCE.md`` that every zkgate client shares:

* an endpoint is ``host:port``, ``http://host:port`` (plaintext) or ``https://host:port`` (TLS);
  a client takes a list of them (the fleet), from code or else from ``ZKGATE_ENDPOINT`` (a comma
  separated list), else ``http://127.0.0.1:50051``;
* endpoints are tried in order from the first; a transport failure or ``UNAVAILABLE`` (a
  draining gateway) moves to the next one, round robin, after a backoff with full jitter (base
  50 ms, doubling, capped at 2 s, reset once a stream has been ``queued``);
* unary calls have a deadline (5 s by default);
* a bearer token (``token=`` / ``token_file=``, else ``ZKGATE_TOKEN``) is sent as
  ``authorization: Bearer <token>`` on every call and stream, on every endpoint (so also after a
  failover): gateways with ``--auth-policy`` identify the caller by it.

Both APIs (threads: ``zkgate``; asyncio: ``zkgate.aio``) build on :class:`Fleet` and
:class:`Backoff`; only the channel type differs.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import grpc
import grpc.aio

DEFAULT_ENDPOINT = "http://127.0.0.1:50051"
#: The bearer token's environment variable, used when no token is given in code.
TOKEN_ENV = "ZKGATE_TOKEN"
#: Deadline of unary calls, seconds.
DEFAULT_DEADLINE = 5.0
BACKOFF_BASE = 0.05
BACKOFF_CAP = 2.0

#: Statuses that move a client to the next endpoint: the gateway is draining, down or
#: unreachable (grpc reports refused connections and broken transports as UNAVAILABLE).
FAILOVER_CODES = frozenset({grpc.StatusCode.UNAVAILABLE})

#: Statuses after which a requeuing helper stops instead of trying again: the request itself is
#: wrong (a bad name, permits that disagree, a refused certificate), so trying again cannot help.
FATAL_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)

#: The four reasons a hold is lost (CONFORMANCE.md).
SUSPENDED, SILENCE, UNAVAILABLE, ENDED = "suspended", "silence", "unavailable", "ended"


def loss_for_status(code: grpc.StatusCode) -> str:
    """The loss reason for a stream that ended with ``code``."""
    return UNAVAILABLE if code in FAILOVER_CODES else ENDED


@dataclass(frozen=True)
class Tls:
    """TLS settings for ``https://`` endpoints. Each of ``ca``, ``cert`` and ``key`` is PEM
    bytes or a file path. ``ca``: the CA bundle to trust (default: the system's); ``cert`` +
    ``key``: a client certificate for mTLS; ``server_name``: verify the gateway's certificate
    against this name instead of the endpoint's host."""

    ca: Union[bytes, str, None] = None
    cert: Union[bytes, str, None] = None
    key: Union[bytes, str, None] = None
    server_name: Optional[str] = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("a client certificate needs its key, and a key its certificate")

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.ca),
            private_key=_pem(self.key),
            certificate_chain=_pem(self.cert),
        )


def _pem(v: Union[bytes, str, None]) -> Optional[bytes]:
    if v is None or isinstance(v, bytes):
        return v
    with open(v, "rb") as f:
        return f.read()


@dataclass(frozen=True)
class Endpoint:
    """One gateway: ``address`` (``host:port``) and whether it speaks TLS."""

    address: str
    tls: bool

    @classmethod
    def parse(cls, text: str) -> "Endpoint":
        t = text.strip()
        tls = False
        if t.startswith("https://"):
            t, tls = t[len("https://") :], True
        elif t.startswith("http://"):
            t = t[len("http://") :]
        elif "://" in t:
            raise ValueError(f"endpoint {text!r}: only http:// and https:// are understood")
        t = t.rstrip("/")
        if not t or ":" not in t:
            raise ValueError(f"endpoint {text!r} is not host:port")
        return cls(t, tls)

    def __str__(self) -> str:
        return ("https://" if self.tls else "http://") + self.address


Endpoints = Union[str, Sequence[str], None]


def parse_endpoints(endpoints: Endpoints = None) -> list[Endpoint]:
    """The fleet: ``endpoints`` (a list, or one comma-separated string), else
    ``ZKGATE_ENDPOINT``, else ``http://127.0.0.1:50051``."""
    if endpoints is None:
        endpoints = os.environ.get("ZKGATE_ENDPOINT") or DEFAULT_ENDPOINT
    if isinstance(endpoints, str):
        endpoints = endpoints.split(",")
    parsed = [Endpoint.parse(e) for e in endpoints if e.strip()]
    if not parsed:
        raise ValueError("no gateway endpoint given")
    return parsed


def resolve_token(token: Optional[str] = None, token_file: Optional[str] = None) -> Optional[str]:
    """The bearer token: ``token``, else the content of ``token_file`` (trimmed; an empty file
    is an error), else ``ZKGATE_TOKEN``, else none."""
    if token is not None and token.strip():
        return token.strip()
    if token_file is not None:
        with open(token_file, encoding="utf-8") as f:
            text = f.read().strip()
        if not text:
            raise ValueError(f"token file {token_file}: the file is empty")
        return text
    env = os.environ.get(TOKEN_ENV, "").strip()
    return env or None


class _Details(
    collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _Bearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``authorization: Bearer <token>`` to every call of a (threaded) channel."""

    def __init__(self, token: str):
        self._header = ("authorization", "Bearer " + token)

    def _details(self, d):
        return _Details(
            d.method,
            d.timeout,
            list(d.metadata or []) + [self._header],
            d.credentials,
            getattr(d, "wait_for_ready", None),
            getattr(d, "compression", None),
        )

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


def _aio_bearer(token: str) -> list:
    """The same for ``grpc.aio`` channels: one interceptor per call type (grpc.aio files each
    interceptor under the first type it is)."""
    header = ("authorization", "Bearer " + token)

    def details(d):
        return d._replace(metadata=grpc.aio.Metadata(*(tuple(d.metadata or ())), header))

    class UU(grpc.aio.UnaryUnaryClientInterceptor):
        async def intercept_unary_unary(self, continuation, d, request):
            return await continuation(details(d), request)

    class US(grpc.aio.UnaryStreamClientInterceptor):
        async def intercept_unary_stream(self, continuation, d, request):
            return await continuation(details(d), request)

    class SU(grpc.aio.StreamUnaryClientInterceptor):
        async def intercept_stream_unary(self, continuation, d, requests):
            return await continuation(details(d), requests)

    class SS(grpc.aio.StreamStreamClientInterceptor):
        async def intercept_stream_stream(self, continuation, d, requests):
            return await continuation(details(d), requests)

    return [UU(), US(), SU(), SS()]


class Backoff:
    """Full-jitter exponential backoff: the n-th wait is uniform in
    ``[0, min(cap, base * 2**n)]``; :meth:`reset` once a stream was queued."""

    def __init__(self, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP):
        self.base, self.cap, self.attempt = base, cap, 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 32)
        return random.uniform(0, ceiling)

    def reset(self) -> None:
        self.attempt = 0


class Fleet:
    """The endpoints of one gateway fleet and a channel to each, made when first used.

    ``endpoints``: see :func:`parse_endpoints`. ``tls``: a :class:`Tls` for ``https://``
    endpoints (default: the system's CA bundle; its ``cert`` + ``key`` are the client
    certificate). ``deadline``: seconds for unary calls. ``token``: a bearer token sent with
    every call and stream (``token_file``: read it from a file; neither: ``ZKGATE_TOKEN``).
    ``options``: extra grpc channel options. ``aio``: make ``grpc.aio`` channels (the asyncio
    API does that). A fleet is shared by every call made through it; :meth:`close` it when done.

    ``current`` is the endpoint new calls start on: the first, until a failover moves it on.
    """

    def __init__(
        self,
        endpoints: Endpoints = None,
        *,
        tls: Optional[Tls] = None,
        deadline: float = DEFAULT_DEADLINE,
        options: Sequence[tuple[str, Any]] = (),
        aio: bool = False,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
    ):
        self.endpoints = parse_endpoints(endpoints)
        self._token = resolve_token(token, token_file)
        self.tls = tls
        self.deadline = deadline
        self._options = list(options)
        if tls is not None and tls.server_name:
            self._options.append(("grpc.ssl_target_name_override", tls.server_name))
        self._aio = aio
        self._channels: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.current = 0

    def __len__(self) -> int:
        return len(self.endpoints)

    def channel(self, index: int):
        """The channel to endpoint ``index`` (modulo the fleet's size)."""
        index %= len(self.endpoints)
        with self._lock:
            ch = self._channels.get(index)
            if ch is None:
                ch = self._make(self.endpoints[index])
                self._channels[index] = ch
            return ch

    def _make(self, ep: Endpoint):
        if self._aio:
            extra = {"interceptors": _aio_bearer(self._token)} if self._token else {}
            if ep.tls:
                creds = (self.tls or Tls()).credentials()
                return grpc.aio.secure_channel(ep.address, creds, options=self._options, **extra)
            return grpc.aio.insecure_channel(ep.address, options=self._options, **extra)
        if ep.tls:
            creds = (self.tls or Tls()).credentials()
            ch = grpc.secure_channel(ep.address, creds, options=self._options)
        else:
            ch = grpc.insecure_channel(ep.address, options=self._options)
        return grpc.intercept_channel(ch, _Bearer(self._token)) if self._token else ch

    def moved_on(self, from_index: int) -> int:
        """Endpoint ``from_index`` failed: the next one becomes current; returns it."""
        nxt = (from_index + 1) % len(self.endpoints)
        self.current = nxt
        return nxt

    # How long :meth:`close` waits for the channels by default.
    CLOSE_TIMEOUT = 5.0

    def close(self, timeout: Optional[float] = CLOSE_TIMEOUT) -> bool:
        """Closes every channel (threaded fleets; asyncio fleets use :meth:`aclose`), waiting at
        most ``timeout`` seconds (``None``: for ever); returns whether they all closed in time.

        grpc-python's ``Channel.close()`` can block for good after a stream ended abnormally
        (grpc/grpc#20026, #34364; after a keepalive timeout, #19910). A program giving its holds
        up must not hang on it: the channels are closed on a daemon thread, which finishes in
        the background (or is left behind at exit) if they take longer."""
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        if not channels:
            return True

        def close_all() -> None:
            for ch in channels:
                ch.close()

        if timeout is None:
            close_all()
            return True
        closer = threading.Thread(target=close_all, name="zkgate-fleet-close", daemon=True)
        closer.start()
        closer.join(timeout)
        return not closer.is_alive()

    async def aclose(self, timeout: Optional[float] = CLOSE_TIMEOUT) -> bool:
        """:meth:`close` for asyncio fleets: waits at most ``timeout`` seconds (``None``: for
        ever), then gives the close up (cancelled) and returns ``False``."""
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}

        async def close_all() -> None:
            for ch in channels:
                await ch.close()

        if timeout is None:
            await close_all()
            return True
        try:
            await asyncio.wait_for(close_all(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def call(self, fn: Callable[[Any, float], Any]):
        """Runs a unary call ``fn(channel, deadline)`` on the current endpoint, moving on to the
        next one on ``UNAVAILABLE`` (one round through the fleet, with backoff between tries);
        raises the last error if every endpoint failed."""
        backoff = Backoff()
        start = self.current
        for i in range(len(self.endpoints)):
            index = (start + i) % len(self.endpoints)
            try:
                result = fn(self.channel(index), self.deadline)
                self.current = index
                return result
            except grpc.RpcError as e:
                if e.code() not in FAILOVER_CODES or i == len(self.endpoints) - 1:
                    raise
                self.moved_on(index)
                threading.Event().wait(backoff.next())
        raise AssertionError("unreachable")

    async def acall(self, fn):
        """:meth:`call` for the asyncio API: ``await fn(channel, deadline)``."""
        import asyncio

        backoff = Backoff()
        start = self.current
        for i in range(len(self.endpoints)):
            index = (start + i) % len(self.endpoints)
            try:
                result = await fn(self.channel(index), self.deadline)
                self.current = index
                return result
            except grpc.RpcError as e:
                if e.code() not in FAILOVER_CODES or i == len(self.endpoints) - 1:
                    raise
                self.moved_on(index)
                await asyncio.sleep(backoff.next())
        raise AssertionError("unreachable")


class _OneChannel(Fleet):
    """A "fleet" of one channel the caller made (and closes): no failover."""

    def __init__(self, channel, aio: bool = False):
        self.endpoints = [Endpoint("<channel>", False)]
        self.tls = None
        self.deadline = DEFAULT_DEADLINE
        self._options = []
        self._token = None
        self._aio = aio
        self._channels = {0: channel}
        self._lock = threading.Lock()
        self.current = 0

    def close(self, timeout: Optional[float] = None) -> bool:  # the caller's channel
        return True

    async def aclose(self, timeout: Optional[float] = None) -> bool:
        return True


Target = Union[Fleet, grpc.Channel, str, Sequence[str], None]


def fleet_for(target: Target, *, aio: bool = False, **kwargs) -> tuple[Fleet, bool]:
    """A :class:`Fleet` for ``target`` — a fleet (shared), a channel (used as is), endpoints
    (a list, a comma-separated string) or ``None`` (``ZKGATE_ENDPOINT``) — and whether the
    caller made it here and so must close it."""
    if isinstance(target, Fleet):
        return target, False
    if isinstance(target, (grpc.Channel, grpc.aio.Channel)):
        return _OneChannel(target, aio=aio), False
    return Fleet(target, aio=aio, **kwargs), True
