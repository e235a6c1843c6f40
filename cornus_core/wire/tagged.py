"""Tagged stream headers: what a stream is for, written by its opener before any payload.

Format: one tag byte (an ASCII letter) directly followed by ``key: value`` lines, each ending in
``\n``, then an empty line. An egress stream from the caretaker, for example::

    b"Eroute: client\ndest: example.com:443\n\n"

Keys are lowercase tokens (``[a-z0-9][a-z0-9-]*``) and appear at most once; values are UTF-8 text
without CR, LF or NUL and may contain ``: ``. A line is at most 4 KiB including its ``\\n``; there are
at most 16 lines besides the empty one. Anything else is a :class:`ProtocolError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import ProtocolError
from .stream import MuxStream

MAX_LINE = 4096
MAX_LINES = 16
_KEY = re.compile(r"[a-z0-9][a-z0-9-]*")
_BAD_VALUE = re.compile(r"[\r\n\x00]")


def _valid_tag(tag: str) -> bool:
    return len(tag) == 1 and tag.isascii() and tag.isalpha()


@dataclass(frozen=True, slots=True)
class TaggedHeader:
    tag: str
    fields: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))

    def __getitem__(self, key: str) -> str:
        return self.fields[key]

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.fields.get(key, default)


def encode_header(tag: str, fields: Mapping[str, str] | None = None) -> bytes:
    """The header bytes; ``ValueError`` for a tag, key or value this format cannot carry."""
    if not _valid_tag(tag):
        raise ValueError(f"stream tag must be one ASCII letter, got {tag!r}")
    fields = fields or {}
    if len(fields) > MAX_LINES:
        raise ValueError(f"stream header has {len(fields)} fields, over the limit of {MAX_LINES}")
    out = [tag.encode()]
    for key, value in fields.items():
        if not _KEY.fullmatch(key):
            raise ValueError(f"stream header key {key!r} is not a lowercase token")
        if _BAD_VALUE.search(value):
            raise ValueError(f"stream header value for {key!r} contains CR, LF or NUL")
        line = f"{key}: {value}\n".encode()
        if len(line) > MAX_LINE:
            raise ValueError(f"stream header line for {key!r} is {len(line)} bytes, over {MAX_LINE}")
        out.append(line)
    out.append(b"\n")
    return b"".join(out)


class HeaderParser:
    """Sans-IO parser: ``feed`` bytes until it returns the header; the rest is in ``leftover``."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._tag: str | None = None
        self._fields: dict[str, str] = {}
        self._lines = 0
        self._done = False
        self.leftover = b""
        self.size = 0  # bytes fed so far


    def feed(self, data: bytes | bytearray | memoryview) -> TaggedHeader | None:
        if self._done:
            raise ProtocolError("stream header already complete")
        self.size += len(data)
        self._buffer += data
        if self._tag is None:
            if not self._buffer:
                return None
            tag = chr(self._buffer[0])
            if not _valid_tag(tag):
                raise ProtocolError(f"stream tag must be one ASCII letter, got byte {self._buffer[0]:#04x}")
            self._tag = tag
            del self._buffer[0]
        while True:
            end = self._buffer.find(b"\n", 0, MAX_LINE)
            if end < 0:
                if len(self._buffer) >= MAX_LINE:
                    raise ProtocolError(
                        f"stream {self._tag!r} header line {self._lines + 1} is longer than {MAX_LINE} bytes"
                    )
                return None
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if not line:
                self._done = True
                self.leftover = bytes(self._buffer)
                self._buffer.clear()
                return TaggedHeader(self._tag, self._fields)
            self._lines += 1
            if self._lines > MAX_LINES:
                raise ProtocolError(f"stream {self._tag!r} header has more than {MAX_LINES} lines")
            self._add(line)

    def _add(self, line: bytes) -> None:
        where = f"stream {self._tag!r} header line {self._lines}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"{where} is not UTF-8: {line[:60]!r}") from None
        key, sep, value = text.partition(": ")
        if not sep or not _KEY.fullmatch(key):
            raise ProtocolError(f"{where} is not 'key: value': {text[:60]!r}")
        if _BAD_VALUE.search(value):
            raise ProtocolError(f"{where} value for {key!r} contains CR or NUL")
        if key in self._fields:
            raise ProtocolError(f"{where} repeats key {key!r}")
        self._fields[key] = value


async def write_header(stream: MuxStream, tag: str, fields: Mapping[str, str] | None = None) -> None:
    """Write a tagged header on a stream this side opened."""
    stream.write(encode_header(tag, fields))
    await stream.drain()


async def read_header(stream: MuxStream) -> TaggedHeader:
    """Read the tagged header the opener wrote; the stream is left at the first payload byte."""
    parser = HeaderParser()
    header = None
    while header is None:  # whatever is buffered at a time: a header usually arrives in one piece
        chunk = await stream.read_chunk(MAX_LINE)
        if not chunk:
            raise ProtocolError(f"stream {stream.id} ended inside its header ({parser.size} bytes)")
        header = parser.feed(chunk)
    stream.unread(parser.leftover)
    return header
