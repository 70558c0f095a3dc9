import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from zkgate.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LockMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOCK_MODE_WRITE: _ClassVar[LockMode]
    LOCK_MODE_READ: _ClassVar[LockMode]
LOCK_MODE_WRITE: LockMode
LOCK_MODE_READ: LockMode

class AcquireLock(_message.Message):
    __slots__ = ("name", "owner", "permits", "mode", "wait_timeout", "ttl", "ping_seq")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    PING_SEQ_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    permits: int
    mode: LockMode
    wait_timeout: _duration_pb2.Duration
    ttl: _duration_pb2.Duration
    ping_seq: int
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., permits: _Optional[int] = ..., mode: _Optional[_Union[LockMode, str]] = ..., wait_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ping_seq: _Optional[int] = ...) -> None: ...

class KeepAlive(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReleaseLock(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("acquire", "keep_alive", "release", "ping")
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    acquire: AcquireLock
    keep_alive: KeepAlive
    release: ReleaseLock
    ping: _common_pb2.Ping
    def __init__(self, acquire: _Optional[_Union[AcquireLock, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAlive, _Mapping]] = ..., release: _Optional[_Union[ReleaseLock, _Mapping]] = ..., ping: _Optional[_Union[_common_pb2.Ping, _Mapping]] = ...) -> None: ...

class Acquired(_message.Message):
    __slots__ = ("lease", "fencing_token", "silence_limit", "ping_seq")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SILENCE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    PING_SEQ_FIELD_NUMBER: _ClassVar[int]
    lease: str
    fencing_token: int
    silence_limit: _duration_pb2.Duration
    ping_seq: int
    def __init__(self, lease: _Optional[str] = ..., fencing_token: _Optional[int] = ..., silence_limit: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ping_seq: _Optional[int] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("queued", "acquired", "suspended", "resumed", "heartbeat")
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    queued: _common_pb2.Queued
    acquired: Acquired
    suspended: _common_pb2.Suspended
    resumed: _common_pb2.Resumed
    heartbeat: _common_pb2.Heartbeat
    def __init__(self, queued: _Optional[_Union[_common_pb2.Queued, _Mapping]] = ..., acquired: _Optional[_Union[Acquired, _Mapping]] = ..., suspended: _Optional[_Union[_common_pb2.Suspended, _Mapping]] = ..., resumed: _Optional[_Union[_common_pb2.Resumed, _Mapping]] = ..., heartbeat: _Optional[_Union[_common_pb2.Heartbeat, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: str
    def __init__(self, lease: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HoldersRequest(_message.Message):
    __slots__ = ("name", "page_size", "page_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    page_size: int
    page_token: str
    def __init__(self, name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class Holder(_message.Message):
    __slots__ = ("owner", "fencing_token", "since", "mode")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    owner: str
    fencing_token: int
    since: _timestamp_pb2.Timestamp
    mode: LockMode
    def __init__(self, owner: _Optional[str] = ..., fencing_token: _Optional[int] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., mode: _Optional[_Union[LockMode, str]] = ...) -> None: ...

class HoldersResponse(_message.Message):
    __slots__ = ("holders", "waiting", "next_page_token", "total")
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    holders: _containers.RepeatedCompositeFieldContainer[Holder]
    waiting: int
    next_page_token: str
    total: int
    def __init__(self, holders: _Optional[_Iterable[_Union[Holder, _Mapping]]] = ..., waiting: _Optional[int] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class LockValidateRequest(_message.Message):
    __slots__ = ("name", "fencing_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    fencing_token: int
    def __init__(self, name: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class LockValidateResponse(_message.Message):
    __slots__ = ("current",)
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    current: bool
    def __init__(self, current: _Optional[bool] = ...) -> None: ...
