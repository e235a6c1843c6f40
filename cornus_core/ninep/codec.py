"""Sans-IO 9P2000.L codec: ``encode(msg) -> bytes``, ``decode(frame) -> msg`` and a streaming
:class:`Decoder` that takes arbitrary byte chunks and returns whole messages.

Frames are ``size[4] type[1] tag[2] body``, little endian. Layouts come from each message class's
``WIRE`` string (see :mod:`.messages`) and are compiled once into ``struct`` runs. A frame that lies
inside one received chunk is decoded as a zero-copy ``memoryview`` of it, so a ``Twrite`` payload
reaches ``pwrite`` without being copied. Malformed input raises :class:`ProtocolError`, nothing else.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from typing import Any

from .constants import DEFAULT_MAX_MSIZE, HEADER_SIZE, RREAD_HEADER, MessageType
from .errors import ProtocolError
from .messages import MESSAGES, Buffer, DirEntry, Message, Qid

_HEADER = struct.Struct("<IBH")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_QID = struct.Struct("<BIQ")
_DIRENT_FIXED = struct.Struct("<BIQQB")  # qid, offset, type
_INT_CODES = "BHIQ"

_Reader = Callable[[memoryview, int], tuple[Any, int]]
_Writer = Callable[[Any, list[Buffer]], int]


def _encode_str(value: str) -> bytes:
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise ProtocolError(f"string {value!r} cannot be encoded as UTF-8: {exc.reason}") from None
    if len(raw) > 0xFFFF:
        raise ProtocolError(f"string of {len(raw)} bytes does not fit a 9P string (max 65535)")
    return raw


def _read_str(buf: memoryview, off: int) -> tuple[str, int]:
    (n,) = _U16.unpack_from(buf, off)
    end = off + 2 + n
    if end > len(buf):
        raise ProtocolError(f"string of {n} bytes at offset {off} runs past the end of the frame")
    return str(buf[off + 2 : end], "utf-8", "surrogateescape"), end


def _write_str(value: str, out: list[Buffer]) -> int:
    raw = _encode_str(value)
    out.append(_U16.pack(len(raw)))
    out.append(raw)
    return 2 + len(raw)


def _read_qid(buf: memoryview, off: int) -> tuple[Qid, int]:
    return Qid(*_QID.unpack_from(buf, off)), off + 13


def _write_qid(value: Qid, out: list[Buffer]) -> int:
    out.append(_QID.pack(value.type, value.version, value.path))
    return 13


def _read_strs(buf: memoryview, off: int) -> tuple[tuple[str, ...], int]:
    (n,) = _U16.unpack_from(buf, off)
    off += 2
    names = []
    for _ in range(n):
        name, off = _read_str(buf, off)
        names.append(name)
    return tuple(names), off


def _write_strs(value: tuple[str, ...], out: list[Buffer]) -> int:
    if len(value) > 0xFFFF:
        raise ProtocolError(f"{len(value)} names do not fit a 9P list (max 65535)")
    out.append(_U16.pack(len(value)))
    return 2 + sum(_write_str(name, out) for name in value)


def _read_qids(buf: memoryview, off: int) -> tuple[tuple[Qid, ...], int]:
    (n,) = _U16.unpack_from(buf, off)
    off += 2
    if off + 13 * n > len(buf):
        raise ProtocolError(f"{n} qids at offset {off} run past the end of the frame")
    qids = tuple(Qid(*_QID.unpack_from(buf, off + 13 * i)) for i in range(n))
    return qids, off + 13 * n


def _write_qids(value: tuple[Qid, ...], out: list[Buffer]) -> int:
    if len(value) > 0xFFFF:
        raise ProtocolError(f"{len(value)} qids do not fit a 9P list (max 65535)")
    out.append(_U16.pack(len(value)))
    return 2 + sum(_write_qid(q, out) for q in value)


def _read_data(buf: memoryview, off: int) -> tuple[memoryview, int]:
    (n,) = _U32.unpack_from(buf, off)
    end = off + 4 + n
    if end > len(buf):
        raise ProtocolError(f"data count {n} at offset {off} runs past the end of the frame")
    return buf[off + 4 : end], end


def _write_data(value: Buffer, out: list[Buffer]) -> int:
    n = len(value) if not isinstance(value, memoryview) else value.nbytes
    out.append(_U32.pack(n))
    out.append(value)
    return 4 + n


_VARIABLE: dict[str, tuple[_Reader, _Writer]] = {
    "s": (_read_str, _write_str),
    "q": (_read_qid, _write_qid),
    "S": (_read_strs, _write_strs),
    "W": (_read_qids, _write_qids),
    "d": (_read_data, _write_data),
}


class _Layout:
    """One message class's wire layout, compiled into runs of fixed-width ints and variable fields."""

    __slots__ = ("cls", "names", "segments")

    def __init__(self, cls: type[Message]) -> None:
        self.cls = cls
        self.names = tuple(f.name for f in fields(cls))[1:]  # every field after the tag
        if len(self.names) != len(cls.WIRE):
            raise TypeError(f"{cls.__name__}: WIRE {cls.WIRE!r} does not match its fields {self.names}")
        # each segment: (number of fields, Struct for an int run or None, variable codec or None)
        self.segments: list[tuple[int, struct.Struct | None, tuple[_Reader, _Writer] | None]] = []
        run = ""
        for code in cls.WIRE:
            if code in _INT_CODES:
                run += code
                continue
            if run:
                self.segments.append((len(run), struct.Struct("<" + run), None))
                run = ""
            self.segments.append((1, None, _VARIABLE[code]))
        if run:
            self.segments.append((len(run), struct.Struct("<" + run), None))

    def decode(self, tag: int, body: memoryview) -> Message:
        values: list[Any] = []
        off = 0
        for _n, st, var in self.segments:
            if st is not None:
                values.extend(st.unpack_from(body, off))
                off += st.size
            else:
                assert var is not None
                value, off = var[0](body, off)
                values.append(value)
        if off != len(body):
            raise ProtocolError(f"{len(body) - off} trailing bytes after the {self.cls.__name__} fields")
        return self.cls(tag, *values)

    def encode(self, msg: Message) -> bytes:
        values = [getattr(msg, name) for name in self.names]
        out: list[Buffer] = [b""]
        size = HEADER_SIZE
        i = 0
        for n, st, var in self.segments:
            if st is not None:
                out.append(st.pack(*values[i : i + n]))
                size += st.size
            else:
                assert var is not None
                size += var[1](values[i], out)
            i += n
        out[0] = _HEADER.pack(size, self.cls.TYPE, msg.tag)
        return b"".join(out)


_LAYOUTS: dict[int, _Layout] = {t: _Layout(cls) for t, cls in MESSAGES.items()}


def encode(msg: Message) -> bytes:
    """Serialise one message to a complete frame. Out-of-range values raise :class:`ProtocolError`."""
    try:
        return _LAYOUTS[msg.TYPE].encode(msg)
    except struct.error as exc:
        raise ProtocolError(f"cannot encode {type(msg).__name__} (tag {msg.tag}): {exc}") from None
    except KeyError:
        raise ProtocolError(f"{type(msg).__name__} is not a 9P2000.L message") from None


def decode(frame: Buffer) -> Message:
    """Parse one complete frame (size field included)."""
    buf = memoryview(frame).cast("B") if not isinstance(frame, bytes) else memoryview(frame)
    if len(buf) < HEADER_SIZE:
        raise ProtocolError(f"frame of {len(buf)} bytes is shorter than the 7-byte header", fatal=True)
    size, type_, tag = _HEADER.unpack_from(buf, 0)
    if size != len(buf):
        raise ProtocolError(f"frame size field says {size} bytes but the frame has {len(buf)}", fatal=True)
    layout = _LAYOUTS.get(type_)
    if layout is None:
        raise ProtocolError(f"unknown 9P2000.L message type {type_} (tag {tag})", tag=tag, unsupported=True)
    try:
        return layout.decode(tag, buf[HEADER_SIZE:])
    except ProtocolError as exc:
        raise ProtocolError(f"malformed {layout.cls.__name__} (tag {tag}): {exc}", tag=tag) from None
    except struct.error:
        raise ProtocolError(
            f"malformed {layout.cls.__name__} (tag {tag}): body of {size - HEADER_SIZE} bytes is too short",
            tag=tag,
        ) from None


def encode_rread_header(buf: bytearray | memoryview, tag: int, count: int) -> None:
    """Write an Rread header into the first 11 bytes of ``buf`` whose payload follows in place."""
    _HEADER.pack_into(buf, 0, RREAD_HEADER + count, MessageType.RREAD, tag)
    _U32.pack_into(buf, 7, count)


def dirent_size(name: str) -> int:
    """Bytes one directory entry takes in an Rreaddir payload."""
    return 24 + len(name.encode("utf-8", "surrogateescape"))


def encode_dirents(entries: Iterable[DirEntry]) -> bytes:
    out: list[Buffer] = []
    for e in entries:
        out.append(_DIRENT_FIXED.pack(e.qid.type, e.qid.version, e.qid.path, e.offset, e.type))
        _write_str(e.name, out)
    return b"".join(out)


def decode_dirents(data: Buffer) -> list[DirEntry]:
    buf = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    entries = []
    off = 0
    try:
        while off < len(buf):
            qtype, qversion, qpath, offset, type_ = _DIRENT_FIXED.unpack_from(buf, off)
            name, off = _read_str(buf, off + _DIRENT_FIXED.size)
            entries.append(DirEntry(Qid(qtype, qversion, qpath), offset, type_, name))
    except (struct.error, ProtocolError):
        raise ProtocolError(
            f"directory entry {len(entries)} at offset {off} of a {len(buf)}-byte readdir payload is truncated"
        ) from None
    return entries


class Decoder:
    """Turns a byte stream into messages; feed it chunks of any size.

    ``max_size`` bounds a frame (the negotiated msize); a larger or impossible size field is fatal
    because the stream cannot be re-synchronised. A well-framed but malformed message raises a
    non-fatal :class:`ProtocolError` carrying its tag; the frame is consumed and decoding continues.
    """

    def __init__(self, max_size: int = DEFAULT_MAX_MSIZE) -> None:
        self.max_size = max_size
        self._chunks: deque[memoryview] = deque()
        self._buffered = 0
        self._failure: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        return self._buffered

    def feed(self, data: Buffer) -> None:
        if not data:
            return
        # bytes are immutable, so frames may point into them; anything else the caller may reuse
        chunk = memoryview(data) if isinstance(data, bytes) else memoryview(bytes(data))
        self._chunks.append(chunk)
        self._buffered += len(chunk)

    def next_frame(self) -> memoryview | None:
        """The next complete frame, or None when more bytes are needed."""
        if self._failure is not None:
            raise self._failure
        if self._buffered < 4:
            return None
        first = self._chunks[0]
        head = first[:4] if len(first) >= 4 else self._peek(4)
        (size,) = _U32.unpack_from(head, 0)
        if size < HEADER_SIZE or size > self.max_size:
            self._failure = ProtocolError(
                f"frame size {size} is outside 7..{self.max_size} (the negotiated msize)", fatal=True
            )
            raise self._failure
        if self._buffered < size:
            return None
        return self._take(size)

    def next_message(self) -> Message | None:
        frame = self.next_frame()
        return None if frame is None else decode(frame)

    def __iter__(self) -> Iterator[Message]:
        while (msg := self.next_message()) is not None:
            yield msg

    def _peek(self, n: int) -> bytes:
        out = bytearray()
        for chunk in self._chunks:
            out += chunk[: n - len(out)]
            if len(out) >= n:
                break
        return bytes(out)

    def _take(self, n: int) -> memoryview:
        self._buffered -= n
        first = self._chunks[0]
        if len(first) >= n:  # the common case: zero-copy slice of one chunk
            if len(first) == n:
                self._chunks.popleft()
            else:
                self._chunks[0] = first[n:]
            return first[:n]
        out = bytearray(n)
        filled = 0
        while filled < n:
            chunk = self._chunks[0]
            take = min(len(chunk), n - filled)
            out[filled : filled + take] = chunk[:take]
            filled += take
            if take == len(chunk):
                self._chunks.popleft()
            else:
                self._chunks[0] = chunk[take:]
        return memoryview(out)
