"""Sans-IO hostname sniffing for transparently captured connections.

Given the first bytes a client sent, ``sniff_hostname`` returns the TLS ClientHello's server name
(SNI) or the HTTP/1.x ``Host`` (or absolute-form target), ``NEED_MORE`` when the bytes so far are
a valid prefix, or ``None`` when the stream is neither or names no host. It never raises: sniffing
is best effort and the caller still holds the original destination address.
"""

from __future__ import annotations

import enum
import re
from typing import Final

from cornus_core.proxy._address import classify_host, split_authority

DEFAULT_LIMIT = 16 * 1024 + 5  # one maximal TLS record


class NeedMore(enum.Enum):
    NEED_MORE = "need more"


NEED_MORE: Final = NeedMore.NEED_MORE
SniffResult = str | NeedMore | None

_TLS_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_SERVER_NAME_EXTENSION = 0x0000
_HOST_NAME = 0x00
_MAX_RECORD = 16 * 1024 + 2048

_METHOD_PREFIX = re.compile(rb"[A-Z]{0,20}")
_REQUEST_LINE = re.compile(rb"[A-Z]{1,20} (\S+) HTTP/1\.[0-9]\r?")
_ABSOLUTE_HOST = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?([^/?#]*)")


def sniff_hostname(data: bytes, *, limit: int = DEFAULT_LIMIT) -> SniffResult:
    """The host name the client's first bytes ask for (see the module docstring)."""
    if not data:
        return NEED_MORE
    if data[0] == _TLS_HANDSHAKE:
        return _sniff_tls(data, limit)
    return _sniff_http(data, limit)


def _classify(text: bytes) -> tuple[str | None, str | None]:
    try:
        return classify_host(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None, None


# ---- TLS ----


def _sniff_tls(data: bytes, limit: int) -> SniffResult:
    # A ClientHello may span several handshake records: gather their payloads first.
    handshake = bytearray()
    pos = 0
    while True:
        if len(handshake) >= 4:
            if handshake[0] != _CLIENT_HELLO:
                return None
            needed = 4 + int.from_bytes(handshake[1:4], "big")
            if len(handshake) >= needed:
                return _client_hello_sni(bytes(handshake[4:needed]))
            if needed > limit:
                return None
        if len(data) < pos + 5:
            return NEED_MORE if len(data) < limit else None
        if data[pos] != _TLS_HANDSHAKE or data[pos + 1] != 0x03:
            return None
        length = int.from_bytes(data[pos + 3 : pos + 5], "big")
        if length == 0 or length > _MAX_RECORD:
            return None
        end = pos + 5 + length
        if len(data) < end:
            return NEED_MORE if end <= limit else None
        handshake += data[pos + 5 : end]
        pos = end


class _Truncated(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise _Truncated
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> _Reader:
        return _Reader(self.take(self.number(length_bytes)))

    @property
    def done(self) -> bool:
        return self.pos >= len(self.data)


def _client_hello_sni(body: bytes) -> str | None:
    try:
        hello = _Reader(body)
        hello.take(2 + 32)  # legacy_version, random
        hello.vector(1)  # session id
        hello.vector(2)  # cipher suites
        hello.vector(1)  # compression methods
        if hello.done:
            return None  # no extensions
        extensions = hello.vector(2)
        while not extensions.done:
            kind = extensions.number(2)
            payload = extensions.vector(2)
            if kind != _SERVER_NAME_EXTENSION:
                continue
            names = payload.vector(2)
            while not names.done:
                name_type = names.number(1)
                name = names.vector(2).data
                if name_type == _HOST_NAME:
                    return _classify(name)[0]  # an IP literal is no valid SNI (RFC 6066 §3)
    except _Truncated:
        return None
    return None


# ---- HTTP/1.x ----


def _sniff_http(data: bytes, limit: int) -> SniffResult:
    window = data[:limit]
    first_end = window.find(b"\n")
    if first_end < 0:
        prefix = _METHOD_PREFIX.match(window)
        assert prefix is not None  # {0,} always matches
        rest = window[prefix.end() :]
        looks_http = not rest or (prefix.end() > 0 and rest[:1] == b" ")
        return NEED_MORE if looks_http and len(data) < limit else None
    line = _REQUEST_LINE.fullmatch(window[:first_end])
    if line is None:
        return None
    absolute = _ABSOLUTE_HOST.match(line[1])
    if absolute is not None:
        return _host_value(absolute[1])
    pos = first_end + 1
    while True:
        end = window.find(b"\n", pos)
        if end < 0:
            return NEED_MORE if len(data) < limit else None
        header = window[pos:end].rstrip(b"\r")
        if not header:
            return None  # end of head, no Host
        name, sep, value = header.partition(b":")
        if sep and name.lower() == b"host":
            return _host_value(value.strip())
        pos = end + 1


def _host_value(value: bytes) -> str | None:
    try:
        text, _port = split_authority(value.decode("ascii"), 80)
    except (UnicodeDecodeError, ValueError):
        return None
    host, ip = _classify(text.encode("ascii"))
    return host or ip
