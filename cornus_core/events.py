"""Typed session events: what the server tells the caller on the control stream, and what every hop
reports about each egress connection. One JSON object per line on the wire.

Events never carry secrets: credential events name the source and the outcome, never a value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from pydantic import TypeAdapter, ValidationError

Hop = Literal["caretaker", "server", "client"]
HOPS: tuple[Hop, ...] = ("caretaker", "server", "client")


class EventError(ValueError):
    """An event line that is not valid JSON or not a known event shape."""


@dataclass(frozen=True)
class Event:
    type: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        # Shallow on purpose: events hold only plain values (asdict's deep copy costs 10x more).
        return {"type": self.type, **{name: getattr(self, name) for name in field_names(type(self))}}

    def encode(self) -> bytes:
        return _ENCODE(self.to_dict()).encode() + b"\n"


_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


_FIELD_NAMES: dict[type[Event], tuple[str, ...]] = {}


def field_names(cls: type[Event]) -> tuple[str, ...]:
    """The fields of an event class (``dataclasses.fields`` is slow enough to matter per event)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


@dataclass(frozen=True)
class Log(Event):
    type: ClassVar[str] = "log"
    source: str  # app, caretaker, server
    line: str
    stream: str = "stdout"


@dataclass(frozen=True)
class Status(Event):
    type: ClassVar[str] = "status"
    state: str  # validating, deploying, running, stopping, deleted, detached
    detail: str = ""


@dataclass(frozen=True)
class Ready(Event):
    type: ClassVar[str] = "ready"
    deployment: str
    backend: str = ""
    policy_version: str = ""


@dataclass(frozen=True)
class Error(Event):
    type: ClassVar[str] = "error"
    message: str
    fatal: bool = True


@dataclass(frozen=True)
class Exit(Event):
    """The workload's process ended."""

    type: ClassVar[str] = "exit"
    code: int


@dataclass(frozen=True)
class Done(Event):
    type: ClassVar[str] = "done"
    reason: str = ""


@dataclass(frozen=True)
class HopDecision(Event):
    """One hop's route decision for one connection (emitted before anything is dialed)."""

    type: ClassVar[str] = "hop"
    conn: str
    hop: str  # one of HOPS
    route: str
    reason: str
    version: str
    host: str | None = None
    ip: str | None = None
    port: int = 0
    t_ms: int = 0  # the connection's time, stamped by the first hop


@dataclass(frozen=True)
class ConnEnd(Event):
    """How a connection ended, reported by the hop that saw its bytes."""

    type: ClassVar[str] = "conn_end"
    conn: str
    hop: str
    outcome: str  # ok, deny, refused, timeout, error
    reason: str = ""
    bytes_up: int = 0
    bytes_down: int = 0
    duration_ms: float = 0.0


@dataclass(frozen=True)
class CredentialRequest(Event):
    type: ClassVar[str] = "credential"
    name: str
    delivery: str
    cache: str  # hit, fetched, stale
    outcome: str
    latency_ms: float = 0.0
    expiration: str | None = None


@dataclass(frozen=True)
class MountStats(Event):
    """Cumulative counters of one client-local mount, as served by the caller's 9P server."""

    type: ClassVar[str] = "mount"
    name: str
    source: str = ""
    target: str = ""
    read_only: bool = False
    ops: dict[str, int] = field(default_factory=dict)
    bytes_read: int = 0
    bytes_written: int = 0
    errors: int = 0
    latency_ms_sum: float = 0.0


@dataclass(frozen=True)
class PolicyApplied(Event):
    """A hop now decides with this policy version (after a live update from the caller)."""

    type: ClassVar[str] = "policy"
    hop: str
    version: str


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        Log, Status, Ready, Error, Exit, Done, HopDecision, ConnEnd, CredentialRequest, MountStats, PolicyApplied
    )
}
_ADAPTERS: dict[str, TypeAdapter[Event]] = {}  # built on first use: ~5 ms each, and encoders never need one


def _adapter(cls: type[Event]) -> TypeAdapter[Event]:
    adapter = _ADAPTERS.get(cls.type)
    if adapter is None:
        adapter = _ADAPTERS[cls.type] = TypeAdapter(cls)
    return adapter


def decode_event(line: bytes | str) -> Event:
    """Parse one JSON line into its event class; unknown keys are ignored for forward compatibility."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventError(f"event line is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise EventError("event line is not a JSON object")
    kind = obj.get("type")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventError(f"unknown event type {kind!r}")
    known = field_names(cls)
    try:
        event: Event = _adapter(cls).validate_python({k: obj[k] for k in known if k in obj})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise EventError(f"bad {kind!r} event: {problems}") from None
    return event
