import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from zkgate.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Leader(_message.Message):
    __slots__ = ("election", "candidate", "value", "fencing_token", "since")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    election: str
    candidate: str
    value: bytes
    fencing_token: int
    since: _timestamp_pb2.Timestamp
    def __init__(self, election: _Optional[str] = ..., candidate: _Optional[str] = ..., value: _Optional[bytes] = ..., fencing_token: _Optional[int] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Join(_message.Message):
    __slots__ = ("election", "candidate", "value", "ping_seq")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    PING_SEQ_FIELD_NUMBER: _ClassVar[int]
    election: str
    candidate: str
    value: bytes
    ping_seq: int
    def __init__(self, election: _Optional[str] = ..., candidate: _Optional[str] = ..., value: _Optional[bytes] = ..., ping_seq: _Optional[int] = ...) -> None: ...

class ProclaimValue(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    def __init__(self, value: _Optional[bytes] = ...) -> None: ...

class ResignCandidacy(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CampaignRequest(_message.Message):
    __slots__ = ("join", "proclaim", "resign", "ping")
    JOIN_FIELD_NUMBER: _ClassVar[int]
    PROCLAIM_FIELD_NUMBER: _ClassVar[int]
    RESIGN_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    join: Join
    proclaim: ProclaimValue
    resign: ResignCandidacy
    ping: _common_pb2.Ping
    def __init__(self, join: _Optional[_Union[Join, _Mapping]] = ..., proclaim: _Optional[_Union[ProclaimValue, _Mapping]] = ..., resign: _Optional[_Union[ResignCandidacy, _Mapping]] = ..., ping: _Optional[_Union[_common_pb2.Ping, _Mapping]] = ...) -> None: ...

class Elected(_message.Message):
    __slots__ = ("leader", "silence_limit", "ping_seq")
    LEADER_FIELD_NUMBER: _ClassVar[int]
    SILENCE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    PING_SEQ_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    silence_limit: _duration_pb2.Duration
    ping_seq: int
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ..., silence_limit: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ping_seq: _Optional[int] = ...) -> None: ...

class Proclaimed(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class CampaignResponse(_message.Message):
    __slots__ = ("queued", "elected", "suspended", "resumed", "proclaimed", "heartbeat")
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    ELECTED_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    PROCLAIMED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    queued: _common_pb2.Queued
    elected: Elected
    suspended: _common_pb2.Suspended
    resumed: _common_pb2.Resumed
    proclaimed: Proclaimed
    heartbeat: _common_pb2.Heartbeat
    def __init__(self, queued: _Optional[_Union[_common_pb2.Queued, _Mapping]] = ..., elected: _Optional[_Union[Elected, _Mapping]] = ..., suspended: _Optional[_Union[_common_pb2.Suspended, _Mapping]] = ..., resumed: _Optional[_Union[_common_pb2.Resumed, _Mapping]] = ..., proclaimed: _Optional[_Union[Proclaimed, _Mapping]] = ..., heartbeat: _Optional[_Union[_common_pb2.Heartbeat, _Mapping]] = ...) -> None: ...

class ProclaimRequest(_message.Message):
    __slots__ = ("lease", "value")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    lease: str
    value: bytes
    def __init__(self, lease: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class ProclaimResponse(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class ResignRequest(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: str
    def __init__(self, lease: _Optional[str] = ...) -> None: ...

class ResignResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeaderRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class LeaderResponse(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class CandidatesRequest(_message.Message):
    __slots__ = ("election", "page_size", "page_token")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    election: str
    page_size: int
    page_token: str
    def __init__(self, election: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("candidate", "value", "position", "fencing_token", "joined", "leader")
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    JOINED_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    candidate: str
    value: bytes
    position: int
    fencing_token: int
    joined: _timestamp_pb2.Timestamp
    leader: bool
    def __init__(self, candidate: _Optional[str] = ..., value: _Optional[bytes] = ..., position: _Optional[int] = ..., fencing_token: _Optional[int] = ..., joined: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., leader: _Optional[bool] = ...) -> None: ...

class CandidatesResponse(_message.Message):
    __slots__ = ("candidates", "next_page_token", "total")
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    next_page_token: str
    total: int
    def __init__(self, candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class ElectionValidateRequest(_message.Message):
    __slots__ = ("election", "fencing_token")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    election: str
    fencing_token: int
    def __init__(self, election: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class ElectionValidateResponse(_message.Message):
    __slots__ = ("current", "leader")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    current: bool
    leader: Leader
    def __init__(self, current: _Optional[bool] = ..., leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class ObserveManyRequest(_message.Message):
    __slots__ = ("prefix", "elections")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    ELECTIONS_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    elections: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prefix: _Optional[str] = ..., elections: _Optional[_Iterable[str]] = ...) -> None: ...

class ElectionState(_message.Message):
    __slots__ = ("election", "leader")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    election: str
    leader: Leader
    def __init__(self, election: _Optional[str] = ..., leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class SnapshotComplete(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ObserveManyResponse(_message.Message):
    __slots__ = ("state", "snapshot_complete")
    STATE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    state: ElectionState
    snapshot_complete: SnapshotComplete
    def __init__(self, state: _Optional[_Union[ElectionState, _Mapping]] = ..., snapshot_complete: _Optional[_Union[SnapshotComplete, _Mapping]] = ...) -> None: ...
