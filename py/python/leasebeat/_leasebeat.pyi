"""Native core of the ``leasebeat`` package (import ``leasebeat`` instead)."""

import enum
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final, Protocol, final

from typing_extensions import Self

__all__ = [
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "JournalInvalidRecord",
    "JournalIOError",
    "JournalNotFinished",
    "JournalMisplaced",
    "JournalNoDirectory",
    "JournalNoSpace",
    "JournalNotADirectory",
    "JournalNotWritable",
    "JournalScan",
    "JournalSymlink",
    "MigratedRecord",
    "QuarantinedRecord",
    "Replay",
    "SkippedFile",
    "__version__",
    "DEFAULT_TTL_MS",
    "MIN_TTL_MS",
    "MAX_TTL_MS",
    "MAX_KEY_CHARS",
    "INFINITE_NS",
    "StopReason",
    "Mode",
    "KeyUse",
    "AttemptKind",
    "Next",
    "OutcomeClass",
    "DecisionWarning",
    "TransportFailure",
    "ActionKind",
    "LeaseError",
    "InvalidConfig",
    "InvalidArgument",
    "TimeWentBackwards",
    "NotOutstanding",
    "NotSent",
    "AlreadySent",
    "Stopped",
    "InvalidKey",
    "RetryAfterError",
    "Heartbeat",
    "Settlement",
    "SettlementAction",
    "SettlementDecision",
    "SettleActionKind",
    "SettleClass",
    "SettleMode",
    "SettleNext",
    "SettleOutcome",
    "SettleWarning",
    "Decision",
    "Numbers",
    "Attempt",
    "Action",
    "PrimarySchedule",
    "RetryWindow",
    "FallbackCadence",
    "primary_schedule",
    "retry_window",
    "parse_retry_after",
    "_reseed_after_fork",
    "attempt_budget",
    "safety_margin",
    "retry_reserve",
    "hold_cadence",
    "fallback_cadence",
    "fallback_skips",
    "ceil_ms",
]

__version__: Final[str]
DEFAULT_TTL_MS: Final[int]
MIN_TTL_MS: Final[int]
MAX_TTL_MS: Final[int]
MAX_KEY_CHARS: Final[int]
INFINITE_NS: Final[int]

# A millisecond quantity: an int, or float('inf') / float('-inf').
_Ms = int | float
_Bytes = bytes | bytearray | memoryview | str
_HeaderValue = str | bytes | Sequence[str | bytes]
_HeaderPairs = Iterable[tuple[str | bytes, str | bytes]]

class _MultiItemsHeaders(Protocol):
    """httpx.Headers and look-alikes: every header, repeated ones repeated."""

    def multi_items(self) -> _HeaderPairs: ...

class _ItemsHeaders(Protocol):
    """http.client.HTTPMessage, multidict and other containers with items()."""

    def items(self) -> _HeaderPairs: ...

_Headers = (
    Mapping[str, _HeaderValue]
    | Mapping[bytes, _HeaderValue]
    | _MultiItemsHeaders
    | _ItemsHeaders
    | _HeaderPairs
)

class StopReason(str, enum.Enum):
    """Why a heartbeat stopped (stable strings, equal to the members)."""

    def __new__(cls, value: object) -> Self: ...

    LEASE_TOO_SHORT = "lease_too_short"
    RETRY_WINDOW_EXHAUSTED = "retry_window_exhausted"
    NO_PROGRESS = "no_progress"
    THROTTLED = "throttled"
    EXPIRED = "expired"
    FINALIZED = "finalized"
    MAX_EXTENSIONS = "max_extensions"
    TENANT_CLOSED = "tenant_closed"
    NOT_FOUND = "not_found"
    REJECTED = "rejected"
    UNEXPECTED_STATUS = "unexpected_status"
    CREATE_FAILED = "create_failed"
    CREATE_REJECTED = "create_rejected"
    NO_RESERVATION = "no_reservation"
    CANCELLED = "cancelled"

class Mode(str, enum.Enum):
    """Which algorithm decided."""

    def __new__(cls, value: object) -> Self: ...

    PRIMARY = "primary"
    FALLBACK = "fallback"

class KeyUse(str, enum.Enum):
    """New idempotency key, or the previous attempt's key and body."""

    def __new__(cls, value: object) -> Self: ...

    NEW = "new"
    SAME = "same"

class AttemptKind(str, enum.Enum):
    """The request an attempt makes."""

    def __new__(cls, value: object) -> Self: ...

    CREATE = "create"
    EXTEND = "extend"

class Next(str, enum.Enum):
    """What a decision says to do next."""

    def __new__(cls, value: object) -> Self: ...

    CREATE = "create"
    EXTEND = "extend"
    STOP = "stop"

class OutcomeClass(str, enum.Enum):
    """How the deciding outcome was classified."""

    def __new__(cls, value: object) -> Self: ...

    SUCCESS = "success"
    AMBIGUOUS = "ambiguous"
    TRANSPORT_FAILURE = "transport_failure"
    SERVER_ERROR = "server_error"
    THROTTLED = "throttled"
    PERMANENT = "permanent"
    REJECTED = "rejected"
    UNEXPECTED = "unexpected"
    CANCELLED = "cancelled"

class DecisionWarning(str, enum.Enum):
    """A warning attached to a decision."""

    def __new__(cls, value: object) -> Self: ...

    EXTENSION_BUDGET_DEPLETING = "extension_budget_depleting"

class TransportFailure(str, enum.Enum):
    """A transport failure of one attempt."""

    def __new__(cls, value: object) -> Self: ...

    TIMEOUT = "timeout"
    CONNECT = "connect"
    RESET = "reset"

class ActionKind(str, enum.Enum):
    """What poll_action() asks for."""

    def __new__(cls, value: object) -> Self: ...

    SEND = "send"
    AWAIT_OUTCOME = "await_outcome"
    STOP = "stop"

class SettleOutcome(str, enum.Enum):
    """How a settlement ended."""

    def __new__(cls, value: object) -> Self: ...

    COMMITTED = "committed"
    APPLIED = "applied"
    RELEASED = "released"
    REJECTED = "rejected"
    AUTH_FAILED = "auth_failed"
    UNCLASSIFIED = "unclassified"
    EXHAUSTED = "exhausted"
    EXPIRED_UNRECORDED = "expired_unrecorded"
    NO_ACTUAL = "no_actual"

class SettleMode(str, enum.Enum):
    """A settlement's mode, also an attempt's endpoint."""

    def __new__(cls, value: object) -> Self: ...

    COMMIT = "commit"
    EVENT = "event"
    RELEASE = "release"

class SettleNext(str, enum.Enum):
    """What a settlement decision says to do next."""

    def __new__(cls, value: object) -> Self: ...

    PERSIST = "persist"
    COMMIT = "commit"
    EVENT = "event"
    RELEASE = "release"
    WAIT = "wait"
    DONE = "done"

class SettleClass(str, enum.Enum):
    """How the event behind a settlement decision was classified."""

    def __new__(cls, value: object) -> Self: ...

    START = "start"
    RESTART = "restart"
    PERSISTED = "persisted"
    PERSIST_FAILED = "persist_failed"
    SENT = "sent"
    SUCCESS = "success"
    AMBIGUOUS = "ambiguous"
    TRANSPORT = "transport"
    SERVER_ERROR = "server_error"
    THROTTLED = "throttled"
    EXPIRED = "expired"
    AUTH = "auth"
    REJECTED = "rejected"
    UNCLASSIFIED = "unclassified"

class SettleWarning(str, enum.Enum):
    """A warning of a settlement decision."""

    def __new__(cls, value: object) -> Self: ...

    PERSIST_FAILED = "persist_failed"
    RETRY_AFTER_UNUSABLE = "retry_after_unusable"
    RETRY_AFTER_CAPPED = "retry_after_capped"

class SettleActionKind(str, enum.Enum):
    """What Settlement.poll_action() asks for."""

    def __new__(cls, value: object) -> Self: ...

    PERSIST = "persist"
    SEND = "send"
    WAIT = "wait"
    DONE = "done"

class LeaseError(Exception):
    """Base class of every error the leasebeat core reports."""

    code: ClassVar[str]

class InvalidConfig(LeaseError, ValueError):
    """The configuration is out of range."""

class InvalidArgument(LeaseError, ValueError):
    """An argument is out of range."""

class TimeWentBackwards(LeaseError, ValueError):
    """An event's time is earlier than the previous event's time."""

class NotOutstanding(LeaseError):
    """The attempt id named is not the outstanding attempt."""

class NotSent(LeaseError):
    """An outcome was reported for an attempt never marked sent."""

class AlreadySent(LeaseError):
    """handle_sent() was called twice for the same attempt."""

class Stopped(LeaseError):
    """The heartbeat has stopped; a stop is final."""

class InvalidKey(LeaseError):
    """The key source produced an unusable idempotency key."""

class RetryAfterError(ValueError):
    """parse_retry_after() could not use the Retry-After values."""

    reason: str

@final
class Numbers:
    """The numbers behind one decision, in ms (int, inf or -inf; None = n/a)."""

    NAMES: ClassVar[tuple[str, ...]]
    @property
    def rtt(self) -> _Ms | None: ...
    @property
    def max_rtt(self) -> _Ms | None: ...
    @property
    def lead_floor(self) -> _Ms | None: ...
    @property
    def attempt_budget(self) -> _Ms | None: ...
    @property
    def safety_margin(self) -> _Ms | None: ...
    @property
    def retry_reserve(self) -> _Ms | None: ...
    @property
    def next_delay(self) -> _Ms | None: ...
    @property
    def lead(self) -> _Ms | None: ...
    @property
    def retry_window(self) -> _Ms | None: ...
    @property
    def retry_delay(self) -> _Ms | None: ...
    @property
    def lead_min(self) -> _Ms | None: ...
    @property
    def grant(self) -> _Ms | None: ...
    @property
    def cadence(self) -> _Ms | None: ...
    @property
    def skips(self) -> _Ms | None: ...
    def to_dict(self) -> dict[str, _Ms]: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

@final
class Decision:
    """One decision of the scheduler (immutable, hashable)."""

    @property
    def reservation_id(self) -> str | None: ...
    @property
    def next(self) -> Next: ...
    @property
    def at_ns(self) -> int | None: ...
    @property
    def key_use(self) -> KeyUse | None: ...
    @property
    def key_index(self) -> int | None: ...
    @property
    def reason(self) -> StopReason | None: ...
    @property
    def mode(self) -> Mode | None: ...
    @property
    def numbers(self) -> Numbers: ...
    @property
    def warnings(self) -> tuple[DecisionWarning, ...]: ...
    @property
    def outcome(self) -> OutcomeClass: ...
    @property
    def detail(self) -> str | None: ...
    @property
    def is_stop(self) -> bool: ...
    @property
    def proven_until_ns(self) -> int | None: ...
    @property
    def expires_at_ms(self) -> int | None: ...
    @property
    def remaining_ttl_ms(self) -> int | None: ...
    def to_json(self) -> dict[str, Any]: ...
    def to_json_str(self) -> str: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

@final
class Attempt:
    """One attempt to send (or in flight)."""

    @property
    def id(self) -> int: ...
    @property
    def kind(self) -> AttemptKind: ...
    @property
    def due_ns(self) -> int | None: ...
    @property
    def key(self) -> str: ...
    @property
    def key_index(self) -> int: ...
    @property
    def key_use(self) -> KeyUse: ...
    @property
    def body(self) -> bytes: ...
    @property
    def sent_ns(self) -> int | None: ...
    @property
    def is_zero_window_retry(self) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

@final
class Action:
    """What the caller must do now (result of Heartbeat.poll_action())."""

    @property
    def action(self) -> ActionKind: ...
    @property
    def attempt(self) -> Attempt | None: ...
    @property
    def reason(self) -> StopReason | None: ...
    @property
    def is_send(self) -> bool: ...
    @property
    def is_stop(self) -> bool: ...
    @property
    def kind(self) -> AttemptKind | None: ...
    @property
    def attempt_id(self) -> int | None: ...
    @property
    def due_ns(self) -> int | None: ...
    @property
    def key(self) -> str | None: ...
    @property
    def key_index(self) -> int | None: ...
    @property
    def key_use(self) -> KeyUse | None: ...
    @property
    def body(self) -> bytes | None: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

@final
class Heartbeat:
    """The heartbeat of one reservation: a sans-IO state machine."""

    def __new__(
        cls,
        ttl_ms: int = 60000,
        request_timeout_ms: int | None = None,
        *,
        create_request: Mapping[str, Any] | None = None,
        key_prefix: str | None = None,
    ) -> Heartbeat: ...
    @classmethod
    def for_reservation(
        cls,
        reservation_id: str,
        ttl_ms: int = 60000,
        request_timeout_ms: int | None = None,
        *,
        key_prefix: str | None = None,
    ) -> Heartbeat: ...
    @classmethod
    def adopt_create(
        cls,
        ttl_ms: int = 60000,
        request_timeout_ms: int | None = None,
        *,
        key: str,
        received_ns: int,
        sent_ns: int | None = None,
        status: int | None = None,
        headers: _Headers | None = None,
        body: _Bytes | None = None,
        failure: TransportFailure | str | None = None,
        request_body: _Bytes | None = None,
        create_request: Mapping[str, Any] | None = None,
        key_prefix: str | None = None,
        timing_unknown: bool = False,
    ) -> tuple[Heartbeat, Decision]: ...
    def poll_action(self) -> Action: ...
    def poll_timeout(self) -> int | None: ...
    def handle_sent(self, attempt_id: int, now_ns: int) -> None: ...
    def handle_response(
        self,
        attempt_id: int,
        now_ns: int,
        status: int,
        headers: _Headers | None = None,
        body: _Bytes | None = None,
        *,
        timing_unknown: bool = False,
    ) -> Decision: ...
    def handle_failure(
        self, attempt_id: int, now_ns: int, failure: TransportFailure | str
    ) -> Decision: ...
    def cancel(self, now_ns: int) -> Decision: ...
    @property
    def ttl_ms(self) -> int: ...
    @property
    def request_timeout_ms(self) -> int | None: ...
    @property
    def create_request(self) -> dict[str, Any]: ...
    @property
    def reservation_id(self) -> str | None: ...
    @property
    def stop_reason(self) -> StopReason | None: ...
    @property
    def is_stopped(self) -> bool: ...
    @property
    def mode(self) -> Mode | None: ...
    @property
    def max_rtt_ms(self) -> int: ...
    @property
    def last_decision(self) -> Decision | None: ...
    @property
    def attempt(self) -> Attempt | None: ...
    @property
    def last_event_ns(self) -> int: ...

@final
class PrimarySchedule:
    """The primary schedule from one success (ms; inf = +infinity)."""

    @property
    def lead_floor(self) -> _Ms: ...
    @property
    def attempt_budget(self) -> _Ms: ...
    @property
    def safety_margin(self) -> _Ms: ...
    @property
    def retry_reserve(self) -> _Ms: ...
    @property
    def next_delay(self) -> _Ms: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

@final
class RetryWindow:
    """Lead, window and delay after a transient failure."""

    @property
    def lead(self) -> _Ms: ...
    @property
    def window(self) -> _Ms: ...
    @property
    def delay(self) -> int | None: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

@final
class FallbackCadence:
    """The fallback cadence after an extension success."""

    @property
    def cadence(self) -> int: ...
    @property
    def hold(self) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

@final
class SettlementDecision:
    """One decision of a settlement (immutable, hashable)."""

    @property
    def next(self) -> SettleNext: ...
    @property
    def outcome(self) -> SettleOutcome | None: ...
    @property
    def at_ns(self) -> int | None: ...
    @property
    def key(self) -> int | None: ...
    @property
    def attempt(self) -> int | None: ...
    @property
    def mode(self) -> SettleMode: ...
    @property
    def record(self) -> str | None: ...
    @property
    def record_mode(self) -> SettleMode | None: ...
    @property
    def record_not_before_ms(self) -> int | None: ...
    @property
    def event_class(self) -> SettleClass: ...
    @property
    def code(self) -> str | None: ...
    @property
    def status(self) -> int | None: ...
    @property
    def delay_ms(self) -> int | None: ...
    @property
    def not_before_ms(self) -> int | None: ...
    @property
    def warnings(self) -> tuple[SettleWarning, ...]: ...
    @property
    def detail(self) -> str | None: ...
    @property
    def stop_heartbeat(self) -> bool: ...
    @property
    def is_done(self) -> bool: ...
    def to_json(self) -> dict[str, Any]: ...
    def to_json_str(self) -> str: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

@final
class SettlementAction:
    """What a settlement asks for now (result of Settlement.poll_action())."""

    @property
    def kind(self) -> SettleActionKind: ...
    @property
    def record_json(self) -> str | None: ...
    @property
    def attempt_id(self) -> int | None: ...
    @property
    def endpoint(self) -> SettleMode | None: ...
    @property
    def key(self) -> str | None: ...
    @property
    def body(self) -> bytes | None: ...
    @property
    def due_ns(self) -> int | None: ...
    @property
    def attempt_number(self) -> int | None: ...
    @property
    def sent_ns(self) -> int | None: ...
    @property
    def outcome(self) -> SettleOutcome | None: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self, /) -> int: ...

_Body = Mapping[str, Any] | str | bytes

@final
class Settlement:
    """The settlement of one reservation: commit, event fallback, release."""

    @classmethod
    def commit(
        cls,
        reservation_id: str,
        commit: _Body | None,
        *,
        now_ns: int,
        wall_ms: int,
        event: _Body | None = None,
        base_url: str | None = None,
        max_attempts: int | None = None,
        initial_ms: int | None = None,
        max_ms: int | None = None,
        key_prefix: str | None = None,
    ) -> Settlement: ...
    @classmethod
    def release(
        cls,
        reservation_id: str,
        *,
        now_ns: int,
        wall_ms: int,
        reason: str | None = None,
        base_url: str | None = None,
        max_attempts: int | None = None,
        initial_ms: int | None = None,
        max_ms: int | None = None,
        key_prefix: str | None = None,
    ) -> Settlement: ...
    @classmethod
    def from_record(
        cls,
        record: str | bytes,
        *,
        now_ns: int,
        wall_ms: int,
        max_attempts: int | None = None,
        initial_ms: int | None = None,
        max_ms: int | None = None,
    ) -> Settlement: ...
    def poll_action(self) -> SettlementAction: ...
    def handle_persisted(self, now_ns: int) -> SettlementDecision: ...
    def handle_persist_failed(self, message: str, now_ns: int) -> SettlementDecision: ...
    def handle_sent(self, attempt_id: int, now_ns: int) -> SettlementDecision: ...
    def handle_response(
        self,
        attempt_id: int,
        now_ns: int,
        wall_ms: int,
        status: int,
        headers: _Headers | None = None,
        body: _Bytes | None = None,
    ) -> SettlementDecision: ...
    def handle_failure(
        self, attempt_id: int, failure: TransportFailure | str, now_ns: int
    ) -> SettlementDecision: ...
    @property
    def reservation_id(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def mode(self) -> SettleMode: ...
    @property
    def outcome(self) -> SettleOutcome | None: ...
    @property
    def record_json(self) -> str | None: ...
    @property
    def failures(self) -> int: ...
    @property
    def last_decision(self) -> SettlementDecision: ...

class JournalError(LeaseError, OSError):
    """A failure of the settlement journal (a LeaseError and an OSError)."""

    kind: ClassVar[str]
    path: str | None
    message: str
    quarantined_to: str | None

class JournalNotWritable(JournalError):
    """The journal directory (or a record in it) cannot be written."""

class JournalSymlink(JournalError):
    """A symbolic link where the journal expects its directory or a record."""

class JournalNoSpace(JournalError):
    """The file system is full; the previous record is intact."""

class JournalNotADirectory(JournalError):
    """The journal path exists and is not a directory."""

class JournalNoDirectory(JournalError):
    """No journal directory (none given, CYCLES_JOURNAL_DIR and HOME unset)."""

class JournalInvalidRecord(JournalError):
    """A record that would not read back, or a settlement not finished."""

class JournalCorrupt(JournalError):
    """A stored record did not parse or validate; renamed aside."""

class JournalMisplaced(JournalError):
    """The file under the id's name holds another reservation id."""

class JournalNotFinished(JournalError):
    """finish() of a settlement that has not ended: nothing was touched."""

class JournalIOError(JournalError):
    """Any other I/O error of the journal."""

@final
class QuarantinedRecord:
    """A record renamed aside (J-4)."""

    @property
    def file(self) -> str: ...
    @property
    def moved_to(self) -> str | None: ...
    @property
    def reason(self) -> str: ...

@final
class MigratedRecord:
    """A legacy-named record migrated (J-8)."""

    @property
    def from_file(self) -> str: ...
    @property
    def to_file(self) -> str: ...
    @property
    def reservation_id(self) -> str: ...
    @property
    def duplicate_removed(self) -> bool: ...

@final
class SkippedFile:
    """A .json file a scan left alone."""

    @property
    def file(self) -> str: ...
    @property
    def reason(self) -> str: ...

@final
class JournalScan:
    """What Journal.scan() found and did."""

    @property
    def records(self) -> list[str]: ...
    @property
    def foreign(self) -> list[str]: ...
    @property
    def quarantined(self) -> list[QuarantinedRecord]: ...
    @property
    def migrated(self) -> list[MigratedRecord]: ...
    @property
    def skipped(self) -> list[SkippedFile]: ...
    @property
    def reaped_temp_files(self) -> int: ...

@final
class Replay:
    """What Journal.replay() returns."""

    @property
    def settlements(self) -> list[Settlement]: ...
    @property
    def busy(self) -> list[str]: ...
    @property
    def quarantined(self) -> list[QuarantinedRecord]: ...
    @property
    def migrated(self) -> list[MigratedRecord]: ...
    @property
    def skipped(self) -> list[SkippedFile]: ...
    @property
    def foreign(self) -> list[str]: ...

_Path = str | bytes | os.PathLike[str] | os.PathLike[bytes]

@final
class Journal:
    """The settlement journal: one partition of durable records (J-1..J-8)."""

    @classmethod
    def open(
        cls, base_url: str, api_key: str, *, dir: _Path | None = None, tenant: str | None = None
    ) -> Journal: ...
    @classmethod
    def open_partition(cls, dir: _Path, base_url: str) -> Journal: ...
    @staticmethod
    def base_dir(dir: _Path | None = None) -> str: ...
    @staticmethod
    def partition_name(base_url: str, api_key: str, tenant: str | None = None) -> str: ...
    @staticmethod
    def record_file_name(reservation_id: str) -> str: ...
    @property
    def dir(self) -> str: ...
    @property
    def base_url(self) -> str: ...
    def persist(self, settlement: Settlement, now_ns: int) -> SettlementDecision: ...
    def finish(self, settlement: Settlement) -> None: ...
    def replay(
        self,
        now_ns: int,
        wall_ms: int,
        *,
        max_attempts: int | None = None,
        initial_ms: int | None = None,
        max_ms: int | None = None,
    ) -> Replay: ...
    def scan(self) -> JournalScan: ...
    def write(self, record: str | bytes) -> None: ...
    def load(self, reservation_id: str) -> str | None: ...
    def remove(self, reservation_id: str) -> bool: ...
    def quarantine(self, reservation_id: str) -> str | None: ...
    def release_claim(self, reservation_id: str) -> None: ...
    def holds_claim(self, reservation_id: str) -> bool: ...

def primary_schedule(
    remaining_ttl_ms: _Ms,
    rtt_ms: _Ms | None,
    request_timeout_ms: _Ms | None,
    max_rtt_ms: _Ms,
) -> PrimarySchedule: ...
def retry_window(
    lead_floor_ms: _Ms, elapsed_ms: _Ms, attempt_budget_ms: _Ms, safety_margin_ms: _Ms
) -> RetryWindow: ...
def parse_retry_after(values: str | bytes | Iterable[str | bytes]) -> int: ...
def _reseed_after_fork() -> bool: ...
def attempt_budget(request_timeout_ms: _Ms | None, max_rtt_ms: _Ms) -> _Ms: ...
def safety_margin(max_rtt_ms: _Ms) -> _Ms: ...
def retry_reserve(attempt_budget_ms: _Ms, safety_margin_ms: _Ms) -> _Ms: ...
def hold_cadence(ttl_ms: _Ms) -> int: ...
def fallback_cadence(grant_ms: int, elapsed_ms: _Ms, ttl_ms: _Ms) -> FallbackCadence: ...
def fallback_skips(lead_min_ms: int, grant_ms: int, cadence_ms: _Ms) -> int: ...
def ceil_ms(nanos: int) -> int: ...
