"""Events the sans-IO :class:`~cornus_core.wire.session.Session` reports to its I/O layer."""

from __future__ import annotations

from dataclasses import dataclass

from .frames import Payload


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The peer opened a stream."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class DataReceived:
    """Payload for a stream; acknowledge it with ``Session.consumed`` once the application read it."""

    stream_id: int
    data: Payload


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The peer half-closed the stream (FIN): no more data will arrive on it."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class StreamResetReceived:
    """The peer reset (RST) the stream, or refused a stream this side opened."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class StreamClosed:
    """The session forgot the stream: both FINs exchanged, or reset by either side."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class PongReceived:
    """The peer answered a ping carrying ``opaque``."""

    opaque: int


@dataclass(frozen=True, slots=True)
class GoAwayReceived:
    """The peer will accept no new streams; ``code`` is a ``GoAwayCode`` value."""

    code: int


Event = (
    StreamOpened
    | DataReceived
    | StreamEnded
    | StreamResetReceived
    | StreamClosed
    | PongReceived
    | GoAwayReceived
)
