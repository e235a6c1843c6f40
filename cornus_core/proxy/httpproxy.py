"""Sans-IO HTTP proxy: the app-facing server side and the destination-facing client side.

HTTP/1.1 framing (request heads, Content-Length and chunked bodies, keep-alive, protocol switches)
is h11's job; this module adds what makes it a proxy: telling ``CONNECT host:port`` from
absolute-form ``GET http://host:port/path`` requests, bounding the request line and head, rewriting
absolute-form to origin-form with hop-by-hop headers removed (``Proxy-Authorization`` is never
forwarded), and cleaning responses on the way back. ``HttpProxyError`` is the one error type; its
``status`` is the HTTP status to answer with.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from http import HTTPStatus

import h11

from cornus_core.proxy._address import authority, classify_host, host_for_url, split_authority

MAX_REQUEST_LINE = 8 * 1024
MAX_HEAD = 64 * 1024

Headers = list[tuple[bytes, bytes]]

# Headers that describe one hop, never the message (RFC 9110 §7.6.1), plus proxy credentials.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
    }
)
# A Connection header may name other headers to drop, but never the ones that frame the message.
_FRAMING = frozenset({b"content-length", b"transfer-encoding", b"host"})
_ABSOLUTE = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<rest>[/?][^#]*)?(#.*)?"
)


class HttpProxyError(Exception):
    """A request or response the proxy cannot handle; ``status`` is the answer for the app."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Pending(enum.Enum):
    NEED_DATA = "need data"
    PAUSED = "paused"  # a tunnel or protocol switch follows, or the other side must answer first


@dataclass(frozen=True)
class TunnelRequest:
    """``CONNECT host:port``; exactly one of ``host`` and ``ip`` is set."""

    host: str | None
    ip: str | None
    port: int


@dataclass(frozen=True)
class ForwardRequest:
    """An absolute-form request, already rewritten for the destination."""

    method: bytes
    url: str  # scheme://authority/path?query, without userinfo or fragment
    host: str | None
    ip: str | None
    port: int
    target: bytes  # origin-form
    headers: Headers  # forwardable headers, Host first
    upgrade: bool


@dataclass(frozen=True)
class ResponseHead:
    status: int
    reason: bytes
    headers: Headers

    @property
    def informational(self) -> bool:
        return self.status < 200


@dataclass(frozen=True)
class Body:
    data: bytes


@dataclass(frozen=True)
class EndOfBody:
    trailers: Headers = field(default_factory=list)


@dataclass(frozen=True)
class Closed:
    """The peer closed the connection cleanly between messages."""


ServerEvent = TunnelRequest | ForwardRequest | Body | EndOfBody | Closed | Pending
ClientEvent = ResponseHead | Body | EndOfBody | Closed | Pending


class HttpProxyServer:
    """The app side: parses proxy requests and serialises the responses relayed back."""

    def __init__(self) -> None:
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._requests = 0

    def receive_data(self, data: bytes) -> None:
        """Bytes from the app; ``b""`` means it closed its side."""
        try:
            self._conn.receive_data(data)
        except h11.RemoteProtocolError as exc:
            raise self._error(exc) from None

    def next_event(self) -> ServerEvent:
        try:
            event = self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise self._error(exc) from None
        if isinstance(event, h11.Request):
            self._requests += 1
            return self._classify(event)
        return _common_event(event)

    @property
    def trailing_data(self) -> bytes:
        """Bytes the app sent after a CONNECT or an upgrade request (the tunnel's first bytes)."""
        return bytes(self._conn.trailing_data[0])

    def send_response(self, head: ResponseHead) -> bytes:
        """Serialise a relayed response head (hop-by-hop headers removed; h11 frames the body)."""
        if head.status == 101:
            headers = [*_strip_hop_by_hop(head.headers, keep_upgrade=True), (b"Connection", b"upgrade")]
            event: h11.Event = h11.InformationalResponse(status_code=101, headers=headers, reason=head.reason)
        elif head.informational:
            event = h11.InformationalResponse(
                status_code=head.status, headers=_strip_hop_by_hop(head.headers), reason=head.reason
            )
        else:
            headers = [
                (n, v) for n, v in _strip_hop_by_hop(head.headers) if n.lower() != b"transfer-encoding"
            ]
            event = h11.Response(status_code=head.status, headers=headers, reason=head.reason)
        return self._send(event)

    def send_body(self, data: bytes) -> bytes:
        return self._send(h11.Data(data=data))

    def send_end(self, trailers: Headers | None = None) -> bytes:
        return self._send(h11.EndOfMessage(headers=trailers or []))

    def start_next_request(self) -> bool:
        """After a complete exchange: ready the next keep-alive request, or False to close."""
        if self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE:
            self._conn.start_next_cycle()
            return True
        return False

    def _send(self, event: h11.Event) -> bytes:
        return self._conn.send(event) or b""

    def _where(self) -> str:
        return f"request {self._requests + 1} on this connection"

    def _error(self, exc: h11.RemoteProtocolError) -> HttpProxyError:
        return HttpProxyError(f"{self._where()}: {exc}", exc.error_status_hint)

    def _classify(self, request: h11.Request) -> TunnelRequest | ForwardRequest:
        line_length = len(request.method) + len(request.target) + len(request.http_version) + 7
        where = f"request {self._requests} line"
        if line_length > MAX_REQUEST_LINE:
            raise HttpProxyError(f"{where}: {line_length} bytes, more than {MAX_REQUEST_LINE}", 414)
        try:
            target = request.target.decode("ascii")
        except UnicodeDecodeError:
            raise HttpProxyError(f"{where}: target is not ASCII") from None
        if request.method == b"CONNECT":
            host, ip, port = _destination(target, None, where)
            return TunnelRequest(host, ip, port)
        match = _ABSOLUTE.fullmatch(target)
        if match is None:
            raise HttpProxyError(f"{where}: target {target[:80]!r} is not an absolute http:// URL or CONNECT")
        if match["scheme"].lower() != "http":
            raise HttpProxyError(f"{where}: scheme {match['scheme']!r} is not proxied; use CONNECT", 501)
        hostport = match["authority"].rpartition("@")[2]  # userinfo is never forwarded
        host, ip, port = _destination(hostport, 80, where)
        name = host or ip or ""
        host_header = host_for_url(name) if port == 80 else authority(name, port)
        rest = match["rest"] or "/"
        origin = rest if rest.startswith("/") else "/" + rest
        headers = request.headers.raw_items()
        upgrade = _wants_upgrade(headers)
        forwarded = [
            (b"Host", host_header.encode()),
            *((n, v) for n, v in _strip_hop_by_hop(headers, keep_upgrade=upgrade) if n.lower() != b"host"),
            (b"Connection", b"upgrade" if upgrade else b"close"),
        ]
        return ForwardRequest(
            method=request.method,
            url=f"http://{host_header}{origin}",
            host=host,
            ip=ip,
            port=port,
            target=origin.encode(),
            headers=forwarded,
            upgrade=upgrade,
        )


class HttpUpstream:
    """The destination side of one forwarded request: the request out, the response in."""

    def __init__(self, request: ForwardRequest) -> None:
        self._conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self._request = request

    def request_head(self) -> bytes:
        r = self._request
        return self._send(h11.Request(method=r.method, target=r.target, headers=r.headers))

    def send_body(self, data: bytes) -> bytes:
        return self._send(h11.Data(data=data))

    def send_end(self, trailers: Headers | None = None) -> bytes:
        return self._send(h11.EndOfMessage(headers=trailers or []))

    def receive_data(self, data: bytes) -> None:
        """Bytes from the destination; ``b""`` means it closed."""
        try:
            self._conn.receive_data(data)
        except h11.RemoteProtocolError as exc:
            raise HttpProxyError(f"response from {self._request.url}: {exc}", 502) from None

    def next_event(self) -> ClientEvent:
        try:
            event = self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise HttpProxyError(f"response from {self._request.url}: {exc}", 502) from None
        if isinstance(event, h11.Response | h11.InformationalResponse):
            return ResponseHead(event.status_code, bytes(event.reason), list(event.headers.raw_items()))
        return _common_event(event)

    @property
    def trailing_data(self) -> bytes:
        """Bytes the destination sent after a 101 Switching Protocols."""
        return bytes(self._conn.trailing_data[0])

    def _send(self, event: h11.Event) -> bytes:
        return self._conn.send(event) or b""


def _common_event(
    event: h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA],
) -> Body | EndOfBody | Closed | Pending:
    if isinstance(event, h11.Data):
        return Body(bytes(event.data))
    if isinstance(event, h11.EndOfMessage):
        return EndOfBody(list(event.headers.raw_items()))
    if isinstance(event, h11.ConnectionClosed):
        return Closed()
    if event is h11.NEED_DATA:
        return Pending.NEED_DATA
    return Pending.PAUSED


def _destination(text: str, default_port: int | None, where: str) -> tuple[str | None, str | None, int]:
    try:
        host_text, port = split_authority(text, default_port)
        host, ip = classify_host(host_text)
    except ValueError as exc:
        raise HttpProxyError(f"{where}: bad destination {text[:80]!r}: {exc}") from None
    return host, ip, port


def _connection_tokens(headers: Headers) -> set[bytes]:
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() in (b"connection", b"proxy-connection")
        for token in value.split(b",")
    }


def _wants_upgrade(headers: Headers) -> bool:
    return b"upgrade" in _connection_tokens(headers) and any(n.lower() == b"upgrade" for n, _ in headers)


def _strip_hop_by_hop(headers: Headers, *, keep_upgrade: bool = False) -> Headers:
    drop = (_HOP_BY_HOP | _connection_tokens(headers)) - _FRAMING
    if keep_upgrade:
        drop = drop - {b"upgrade"}
    return [(name, value) for name, value in headers if name.lower() not in drop]


# ---- Responses the proxy itself gives, and the client side of CONNECT for the dialer ----

CONNECT_ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


def error_response(status: int, message: str) -> bytes:
    """A complete response that ends the connection: 400, 403, 502, 504, ..."""
    body = (message.rstrip("\n") + "\n").encode("utf-8", "replace")
    phrase = HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {phrase}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def connect_request(host: str, port: int, *, proxy_authorization: str | None = None) -> bytes:
    """``CONNECT host:port`` as sent to an upstream HTTP proxy."""
    target = authority(host, port)
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if proxy_authorization:
        lines.append(f"Proxy-Authorization: {proxy_authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?\r?\n")


def parse_connect_response(head: bytes) -> tuple[int, str]:
    """Status code and reason from a proxy's response head to CONNECT."""
    match = _STATUS_LINE.match(head)
    if match is None:
        first = head.split(b"\n", 1)[0][:80]
        raise HttpProxyError(f"proxy response line 1 is not an HTTP status line: {first!r}", 502)
    return int(match[1]), (match[2] or b"").decode("latin-1").strip()
