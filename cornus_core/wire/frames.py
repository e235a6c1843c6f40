"""yamux v0 framing: the 12-byte header, frame encoding and an incremental decoder.

Header (big endian): version u8 (always 0), type u8, flags u16, stream id u32, length u32. ``length`` is
the payload size for DATA frames, the window delta for WINDOW_UPDATE, the opaque value for PING and the
error code for GO_AWAY; only DATA frames carry a payload.

The decoder accepts arbitrary chunks and returns whole frames. A payload that lies inside one chunk is
returned as a zero-copy ``memoryview`` of that chunk; only payloads split across chunks are joined.
Malformed input raises :class:`ProtocolError` and nothing else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag

from .errors import ProtocolError

VERSION = 0
HEADER_SIZE = 12
_HEADER = struct.Struct(">BBHII")
MAX_U32 = 0xFFFFFFFF


class FrameType(IntEnum):
    DATA = 0
    WINDOW_UPDATE = 1
    PING = 2
    GO_AWAY = 3


class Flag(IntFlag):
    SYN = 0x1
    ACK = 0x2
    FIN = 0x4
    RST = 0x8


class GoAwayCode(IntEnum):
    NORMAL = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2


_ALL_FLAGS = int(Flag.SYN | Flag.ACK | Flag.FIN | Flag.RST)
_DATA = int(FrameType.DATA)
_WINDOW_UPDATE = int(FrameType.WINDOW_UPDATE)
_PING = int(FrameType.PING)
_GO_AWAY = int(FrameType.GO_AWAY)

Payload = bytes | memoryview


@dataclass(frozen=True, slots=True)
class Frame:
    type: int
    flags: int
    stream_id: int
    length: int
    payload: Payload = b""


def encode_header(type_: int, flags: int, stream_id: int, length: int) -> bytes:
    return _HEADER.pack(VERSION, type_, flags, stream_id, length)


def encode_frame(frame: Frame) -> bytes:
    """Encode one frame; DATA frames take their length from the payload."""
    if frame.type == _DATA:
        return encode_header(_DATA, frame.flags, frame.stream_id, len(frame.payload)) + bytes(frame.payload)
    return encode_header(frame.type, frame.flags, frame.stream_id, frame.length)


def _check_header(
    version: int, type_: int, flags: int, stream_id: int, length: int, max_payload: int, offset: int
) -> None:
    where = f"in frame header at byte {offset}"
    if version != VERSION:
        raise ProtocolError(f"unsupported yamux version {version} {where} (expected {VERSION})")
    if type_ > _GO_AWAY:
        raise ProtocolError(f"unknown frame type {type_} {where}")
    if flags & ~_ALL_FLAGS:
        raise ProtocolError(f"unknown flags {flags:#06x} {where}")
    if type_ in (_DATA, _WINDOW_UPDATE):
        if stream_id == 0:
            raise ProtocolError(f"{FrameType(type_).name} frame for stream 0 {where}")
        if type_ == _DATA and length > max_payload:
            raise ProtocolError(
                f"DATA frame of {length} bytes on stream {stream_id} exceeds the {max_payload}-byte limit {where}"
            )
    elif stream_id != 0:
        raise ProtocolError(f"{FrameType(type_).name} frame names stream {stream_id} (must be 0) {where}")
    elif type_ == _PING and flags not in (Flag.SYN, Flag.ACK):
        raise ProtocolError(f"PING frame with flags {flags:#06x} (must be SYN or ACK) {where}")
    elif type_ == _GO_AWAY and flags:
        raise ProtocolError(f"GO_AWAY frame with flags {flags:#06x} {where}")


class FrameDecoder:
    """Incremental yamux frame decoder (sans-IO)."""

    def __init__(self, max_payload: int = 16 * 1024 * 1024) -> None:
        self.max_payload = max_payload
        self._head = bytearray()
        self._fields: tuple[int, int, int, int] | None = None  # header awaiting its payload
        self._parts: list[memoryview] = []
        self._missing = 0
        self._offset = 0  # stream offset of the next unread byte, for error messages
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._head) + sum(len(p) for p in self._parts)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self._error is not None:
            raise self._error
        view = data if isinstance(data, memoryview) else memoryview(data)
        if not view.readonly:  # payload views must not alias a buffer the caller may reuse
            view = memoryview(bytes(view))
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        try:
            return self._feed(view)
        except ProtocolError as exc:
            self._error = exc
            raise

    def _feed(self, view: memoryview) -> list[Frame]:
        frames: list[Frame] = []
        pos = 0
        end = len(view)
        while pos < end:
            if self._fields is not None:  # collecting a payload split across chunks
                take = min(self._missing, end - pos)
                self._parts.append(view[pos : pos + take])
                pos += take
                self._missing -= take
                if self._missing:
                    break
                type_, flags, stream_id, length = self._fields
                payload = b"".join(self._parts)
                self._parts = []
                self._fields = None
                frames.append(Frame(type_, flags, stream_id, length, payload))
                continue
            header_at = self._offset + pos - len(self._head)
            if self._head or end - pos < HEADER_SIZE:
                take = min(HEADER_SIZE - len(self._head), end - pos)
                self._head += view[pos : pos + take]
                pos += take
                if len(self._head) < HEADER_SIZE:
                    break
                version, type_, flags, stream_id, length = _HEADER.unpack(self._head)
                self._head.clear()
            else:
                version, type_, flags, stream_id, length = _HEADER.unpack_from(view, pos)
                pos += HEADER_SIZE
            _check_header(version, type_, flags, stream_id, length, self.max_payload, header_at)
            if type_ != _DATA or length == 0:
                frames.append(Frame(type_, flags, stream_id, length))
            elif end - pos >= length:
                frames.append(Frame(type_, flags, stream_id, length, view[pos : pos + length]))
                pos += length
            else:
                self._fields = (type_, flags, stream_id, length)
                self._missing = length
        self._offset += end
        return frames
