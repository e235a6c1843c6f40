"""Sans-IO SOCKS5 server side (RFC 1928): greeting, CONNECT request, replies.

Feed bytes with ``receive_data``, pull ``Greeting`` / ``Request`` with ``next_event``, answer
with ``select_method`` and ``reply`` (both return the bytes to send). Only "no authentication"
is offered, which fits a listener bound to loopback. Everything malformed raises ``Socks5Error``,
which names the byte and carries the reply code to send back (when a reply is still possible).
"""

from __future__ import annotations

import enum
import ipaddress
import struct
from dataclasses import dataclass

from cornus_core.proxy._address import classify_host

VERSION = 0x05
NO_AUTH = 0x00
NO_ACCEPTABLE_METHOD = 0xFF
# Bytes a client may send beyond the handshake before it sees our reply (optimistic data).
_MAX_BUFFER = 64 * 1024 + 600


class Reply(enum.IntEnum):
    SUCCEEDED = 0x00
    GENERAL_FAILURE = 0x01
    NOT_ALLOWED = 0x02
    NETWORK_UNREACHABLE = 0x03
    HOST_UNREACHABLE = 0x04
    CONNECTION_REFUSED = 0x05
    TTL_EXPIRED = 0x06
    COMMAND_NOT_SUPPORTED = 0x07
    ADDRESS_TYPE_NOT_SUPPORTED = 0x08


class Command(enum.IntEnum):
    CONNECT = 0x01
    BIND = 0x02
    UDP_ASSOCIATE = 0x03


class AddressType(enum.IntEnum):
    IPV4 = 0x01
    DOMAIN = 0x03
    IPV6 = 0x04


class Pending(enum.Enum):
    NEED_DATA = "need data"
    PAUSED = "paused"  # waiting for select_method() / reply()


class Socks5Error(Exception):
    """A malformed or unsupported SOCKS5 message; ``reply`` is the code to answer with."""

    def __init__(self, message: str, reply: Reply = Reply.GENERAL_FAILURE) -> None:
        super().__init__(message)
        self.reply = reply


@dataclass(frozen=True)
class Greeting:
    methods: bytes

    @property
    def acceptable(self) -> bool:
        return NO_AUTH in self.methods


@dataclass(frozen=True)
class Request:
    """A request; exactly one of ``host`` (a DNS name, socks5h) and ``ip`` is set."""

    command: Command
    host: str | None
    ip: str | None
    port: int


Event = Greeting | Request | Pending
_COMMANDS = frozenset(int(c) for c in Command)


class _State(enum.Enum):
    GREETING = "greeting"
    METHOD = "method"
    REQUEST = "request"
    REPLY = "reply"
    TUNNEL = "tunnel"
    CLOSED = "closed"


class Socks5Server:
    def __init__(self) -> None:
        self._buffer = bytearray()
        self._state = _State.GREETING

    @property
    def state(self) -> str:
        return self._state.value

    def receive_data(self, data: bytes) -> None:
        self._buffer += data
        if self._state is not _State.TUNNEL and len(self._buffer) > _MAX_BUFFER:
            raise Socks5Error(f"{len(self._buffer)} bytes received before the SOCKS5 handshake finished")

    def next_event(self) -> Event:
        if self._state is _State.GREETING:
            return self._parse_greeting()
        if self._state is _State.REQUEST:
            return self._parse_request()
        if self._state in (_State.METHOD, _State.REPLY):
            return Pending.PAUSED
        return Pending.NEED_DATA

    def select_method(self, greeting: Greeting) -> bytes:
        """Bytes that pick "no authentication", or refuse with 0xFF when it was not offered."""
        self._expect(_State.METHOD, "select_method")
        if greeting.acceptable:
            self._state = _State.REQUEST
            return bytes((VERSION, NO_AUTH))
        self._state = _State.CLOSED
        return bytes((VERSION, NO_ACCEPTABLE_METHOD))

    def reply(self, code: Reply, bind: tuple[str, int] = ("0.0.0.0", 0)) -> bytes:
        """The reply to the request; success opens the tunnel, anything else ends the session."""
        self._expect(_State.REPLY, "reply")
        self._state = _State.TUNNEL if code is Reply.SUCCEEDED else _State.CLOSED
        return build_reply(code, bind)

    @property
    def trailing_data(self) -> bytes:
        """Bytes received after the request (the client's first tunnel bytes)."""
        return bytes(self._buffer) if self._state is _State.TUNNEL else b""

    def _expect(self, state: _State, what: str) -> None:
        if self._state is not state:
            raise RuntimeError(f"{what}() called in state {self._state.value}")

    def _parse_greeting(self) -> Event:
        buf = self._buffer
        if not buf:
            return Pending.NEED_DATA
        if buf[0] != VERSION:
            raise Socks5Error(f"greeting byte 0: version 0x{buf[0]:02x}, expected 0x05")
        if len(buf) < 2:
            return Pending.NEED_DATA
        count = buf[1]
        if count == 0:
            raise Socks5Error("greeting byte 1: no authentication methods offered")
        if len(buf) < 2 + count:
            return Pending.NEED_DATA
        methods = bytes(buf[2 : 2 + count])
        del buf[: 2 + count]
        self._state = _State.METHOD
        return Greeting(methods)

    def _parse_request(self) -> Event:
        buf = self._buffer
        if len(buf) < 4:
            if buf and buf[0] != VERSION:
                raise Socks5Error(f"request byte 0: version 0x{buf[0]:02x}, expected 0x05")
            return Pending.NEED_DATA
        version, command, reserved, atyp = buf[0], buf[1], buf[2], buf[3]
        if version != VERSION:
            raise Socks5Error(f"request byte 0: version 0x{version:02x}, expected 0x05")
        if command not in _COMMANDS:
            raise Socks5Error(f"request byte 1: unknown command 0x{command:02x}", Reply.COMMAND_NOT_SUPPORTED)
        if reserved != 0:
            raise Socks5Error(f"request byte 2: reserved byte is 0x{reserved:02x}, expected 0x00")
        host: str | None = None
        ip: str | None = None
        if atyp == AddressType.IPV4:
            end = 4 + 4
            if len(buf) < end + 2:
                return Pending.NEED_DATA
            ip = str(ipaddress.IPv4Address(bytes(buf[4:end])))
        elif atyp == AddressType.IPV6:
            end = 4 + 16
            if len(buf) < end + 2:
                return Pending.NEED_DATA
            ip = str(ipaddress.IPv6Address(bytes(buf[4:end])))
        elif atyp == AddressType.DOMAIN:
            if len(buf) < 5:
                return Pending.NEED_DATA
            end = 5 + buf[4]
            if len(buf) < end + 2:
                return Pending.NEED_DATA
            raw = bytes(buf[5:end])
            try:
                host, ip = classify_host(raw.decode("ascii"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise Socks5Error(f"request bytes 5..{end - 1}: bad domain name {raw!r}: {exc}") from None
        else:
            raise Socks5Error(
                f"request byte 3: address type 0x{atyp:02x} is not supported",
                Reply.ADDRESS_TYPE_NOT_SUPPORTED,
            )
        (port,) = struct.unpack_from("!H", buf, end)
        if port == 0:
            raise Socks5Error(f"request bytes {end}..{end + 1}: port 0")
        del buf[: end + 2]
        self._state = _State.REPLY
        return Request(Command(command), host, ip, port)


def build_reply(code: Reply, bind: tuple[str, int] = ("0.0.0.0", 0)) -> bytes:
    """A SOCKS5 reply carrying ``code`` and the bound address (IPv4 or IPv6)."""
    address = ipaddress.ip_address(bind[0])
    atyp = AddressType.IPV4 if address.version == 4 else AddressType.IPV6
    return bytes((VERSION, code, 0, atyp)) + address.packed + struct.pack("!H", bind[1])
