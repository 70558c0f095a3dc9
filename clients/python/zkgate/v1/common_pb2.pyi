import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SuspendReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUSPEND_REASON_UNSPECIFIED: _ClassVar[SuspendReason]
    SUSPEND_REASON_CONNECTION: _ClassVar[SuspendReason]
    SUSPEND_REASON_DRAIN: _ClassVar[SuspendReason]
    SUSPEND_REASON_LEASE_EXPIRED: _ClassVar[SuspendReason]
    SUSPEND_REASON_END_REQUESTED: _ClassVar[SuspendReason]
    SUSPEND_REASON_RIGHT_WITHDRAWN: _ClassVar[SuspendReason]
SUSPEND_REASON_UNSPECIFIED: SuspendReason
SUSPEND_REASON_CONNECTION: SuspendReason
SUSPEND_REASON_DRAIN: SuspendReason
SUSPEND_REASON_LEASE_EXPIRED: SuspendReason
SUSPEND_REASON_END_REQUESTED: SuspendReason
SUSPEND_REASON_RIGHT_WITHDRAWN: SuspendReason

class Queued(_message.Message):
    __slots__ = ("lease", "position", "answers_pings", "silence_limit")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_PINGS_FIELD_NUMBER: _ClassVar[int]
    SILENCE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    lease: str
    position: int
    answers_pings: bool
    silence_limit: _duration_pb2.Duration
    def __init__(self, lease: _Optional[str] = ..., position: _Optional[int] = ..., answers_pings: _Optional[bool] = ..., silence_limit: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Suspended(_message.Message):
    __slots__ = ("stop_within", "reason")
    STOP_WITHIN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    stop_within: _duration_pb2.Duration
    reason: SuspendReason
    def __init__(self, stop_within: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[_Union[SuspendReason, str]] = ...) -> None: ...

class Resumed(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...
