"""The app-facing proxy: HTTP proxy and SOCKS5 on one port, sniffed from the first byte.

For every connection request the listener builds a ``ConnectionRequest`` and awaits the
handler supplied by its user, which answers with ``Connected`` (a byte stream to the destination)
or ``Refused``. The listener answers the app in its own protocol, splices bytes both ways and
reports a ``ConnectionStats`` per request. The parsing lives in the sans-IO modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

from cornus_core.proxy._address import authority, host_for_url
from cornus_core.proxy.httpproxy import (
    CONNECT_ESTABLISHED,
    Body,
    Closed,
    EndOfBody,
    ForwardRequest,
    HttpProxyError,
    HttpProxyServer,
    HttpUpstream,
    Pending,
    ResponseHead,
    TunnelRequest,
    error_response,
)
from cornus_core.proxy.socks5 import Command, Greeting, Reply, Request, Socks5Error, Socks5Server, build_reply
from cornus_core.proxy.socks5 import Pending as SocksPending
from cornus_core.proxy.splice import CHUNK, ByteCount, ByteReader, ByteWriter, splice

DEFAULT_PORT = 15002
log = logging.getLogger(__name__)

ProxyProtocol = Literal["socks5", "http-connect", "http", "transparent"]
RefusalKind = Literal["deny", "refused", "timeout", "error"]
Outcome = Literal["ok", "deny", "refused", "timeout", "error", "bad-request"]

SOCKS_REPLY: dict[RefusalKind, Reply] = {
    "deny": Reply.NOT_ALLOWED,
    "refused": Reply.CONNECTION_REFUSED,
    "timeout": Reply.TTL_EXPIRED,
    "error": Reply.HOST_UNREACHABLE,
}
HTTP_STATUS: dict[RefusalKind, int] = {"deny": 403, "refused": 502, "timeout": 504, "error": 502}
# SOCKS4 "request rejected": the one answer a SOCKS4 client gets.
_SOCKS4_REJECTED = b"\x00\x5b" + bytes(6)


@dataclass(frozen=True)
class ConnectionRequest:
    """One destination an app asked for; at least one of ``host`` and ``ip`` is set."""

    host: str | None
    ip: str | None
    port: int
    url: str  # what a PAC script sees
    protocol: ProxyProtocol

    @property
    def destination(self) -> str:
        """``host:port`` (IPv6 in brackets), the name preferred over the address."""
        return authority(self.host or self.ip or "", self.port)


@dataclass(frozen=True)
class Connected:
    """An open byte stream to the destination; one object may serve as both halves."""

    reader: ByteReader
    writer: ByteWriter


@dataclass(frozen=True)
class Refused:
    kind: RefusalKind
    reason: str


ConnectResult = Connected | Refused
Handler = Callable[[ConnectionRequest], Awaitable[ConnectResult]]


@dataclass(frozen=True)
class ConnectionStats:
    request: ConnectionRequest | None  # None when the app never made a valid request
    peer: str
    outcome: Outcome
    reason: str
    bytes_up: int
    bytes_down: int
    duration: float


StatsCallback = Callable[[ConnectionStats], None]


def tcp_url(host: str, port: int) -> str:
    return f"tcp://{authority(host, port)}/"


def connect_url(host: str, port: int) -> str:
    """The PAC url for an HTTP CONNECT: port 443 is taken to be HTTPS."""
    return f"https://{host_for_url(host)}/" if port == 443 else tcp_url(host, port)


_E = TypeVar("_E")


class ProxyListener:
    """``asyncio.start_server`` callback serving HTTP proxy and SOCKS5 on one port."""

    def __init__(
        self,
        handler: Handler,
        *,
        on_stats: StatsCallback | None = None,
        handshake_timeout: float = 10.0,
        idle_timeout: float = 60.0,
    ) -> None:
        self._handler = handler
        self._on_stats = on_stats
        self.handshake_timeout = handshake_timeout
        self.idle_timeout = idle_timeout
        self._tasks: set[asyncio.Task[object]] = set()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = peer_name(writer)
        started = time.monotonic()
        try:
            with self.serving():
                await self._serve(reader, writer, peer, started)
        except OSError:
            pass  # the app went away
        finally:
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str, started: float
    ) -> None:
        try:
            async with asyncio.timeout(self.handshake_timeout):
                first = await reader.read(CHUNK)
        except TimeoutError:
            return
        if not first:
            return
        if first[0] == 0x05:
            await self._serve_socks(first, reader, writer, peer, started)
        elif first[0] == 0x04:
            writer.write(_SOCKS4_REJECTED)
            self.report(
                None, peer, "bad-request", "SOCKS4 is not supported, use SOCKS5", ByteCount(), started
            )
        else:
            await self._serve_http(first, reader, writer, peer)

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Track the current task as one served connection, so ``aclose`` can end it."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            yield
        finally:
            self._tasks.discard(task)

    async def aclose(self) -> None:
        """Cancel every connection still being served."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def connect(self, request: ConnectionRequest) -> ConnectResult:
        """The handler's answer; a handler that raises refuses with kind ``error``."""
        try:
            return await self._handler(request)
        except Exception as exc:
            log.exception("proxy handler failed for %s", request.destination)
            return Refused("error", f"handler failed: {exc!r}")

    def report(
        self,
        request: ConnectionRequest | None,
        peer: str,
        outcome: Outcome,
        reason: str,
        count: ByteCount,
        started: float,
    ) -> None:
        if self._on_stats is None:
            return
        stats = ConnectionStats(
            request, peer, outcome, reason, count.up, count.down, time.monotonic() - started
        )
        try:
            self._on_stats(stats)
        except Exception:
            log.exception("proxy stats callback failed")

    # ---- SOCKS5 ----

    async def _serve_socks(
        self,
        first: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
        started: float,
    ) -> None:
        conn = Socks5Server()
        try:
            async with asyncio.timeout(self.handshake_timeout):
                conn.receive_data(first)
                greeting = await _next_socks(conn, reader, Greeting)
                writer.write(conn.select_method(greeting))
                if not greeting.acceptable:
                    raise Socks5Error(
                        f"greeting: methods 0x{greeting.methods.hex()} lack 0x00 (no authentication)"
                    )
                await writer.drain()
                request = await _next_socks(conn, reader, Request)
        except TimeoutError:
            self.report(
                None,
                peer,
                "bad-request",
                _timeout_reason("SOCKS5", self.handshake_timeout),
                ByteCount(),
                started,
            )
            return
        except Socks5Error as exc:
            if conn.state == "request":
                writer.write(build_reply(exc.reply))
            self.report(None, peer, "bad-request", f"SOCKS5 {exc}", ByteCount(), started)
            return
        target = request.host or request.ip or ""
        creq = ConnectionRequest(
            request.host, request.ip, request.port, tcp_url(target, request.port), "socks5"
        )
        if request.command is not Command.CONNECT:
            writer.write(conn.reply(Reply.COMMAND_NOT_SUPPORTED))
            reason = f"SOCKS5 command {request.command.name} is not supported"
            self.report(creq, peer, "bad-request", reason, ByteCount(), started)
            return
        result = await self.connect(creq)
        if isinstance(result, Refused):
            writer.write(conn.reply(SOCKS_REPLY[result.kind]))
            self.report(creq, peer, result.kind, result.reason, ByteCount(), started)
            return
        writer.write(conn.reply(Reply.SUCCEEDED))
        await self.tunnel(creq, peer, started, reader, writer, result, conn.trailing_data)

    async def tunnel(
        self,
        request: ConnectionRequest,
        peer: str,
        started: float,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        dest: Connected,
        first_up: bytes,
        first_down: bytes = b"",
    ) -> None:
        count = ByteCount()
        try:
            await splice(
                (reader, writer), (dest.reader, dest.writer), count, first_up=first_up, first_down=first_down
            )
        finally:
            dest.writer.close()
            self.report(request, peer, "ok", "", count, started)

    # ---- HTTP ----

    async def _serve_http(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        conn = HttpProxyServer()
        conn.receive_data(first)
        first_request = True
        while True:
            started = time.monotonic()
            try:
                async with asyncio.timeout(self.handshake_timeout if first_request else self.idle_timeout):
                    event = await _next_http(conn, reader)
            except TimeoutError:
                if first_request:  # an idle keep-alive connection just ends
                    reason = _timeout_reason("HTTP", self.handshake_timeout)
                    writer.write(error_response(408, reason))
                    self.report(None, peer, "bad-request", reason, ByteCount(), started)
                return
            except HttpProxyError as exc:
                writer.write(error_response(exc.status, str(exc)))
                self.report(None, peer, "bad-request", str(exc), ByteCount(), started)
                return
            if isinstance(event, Closed):
                return
            if isinstance(event, TunnelRequest):
                await self._serve_connect(conn, event, reader, writer, peer, started)
                return
            if not await self._forward(conn, event, reader, writer, peer, started):
                return
            first_request = False

    async def _serve_connect(
        self,
        conn: HttpProxyServer,
        tunnel: TunnelRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
        started: float,
    ) -> None:
        target = tunnel.host or tunnel.ip or ""
        creq = ConnectionRequest(
            tunnel.host, tunnel.ip, tunnel.port, connect_url(target, tunnel.port), "http-connect"
        )
        result = await self.connect(creq)
        if isinstance(result, Refused):
            writer.write(error_response(HTTP_STATUS[result.kind], result.reason))
            self.report(creq, peer, result.kind, result.reason, ByteCount(), started)
            return
        writer.write(CONNECT_ESTABLISHED)
        await self.tunnel(creq, peer, started, reader, writer, result, conn.trailing_data)

    async def _forward(
        self,
        conn: HttpProxyServer,
        request: ForwardRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
        started: float,
    ) -> bool:
        """Relay one absolute-form request; True when the app connection may carry another."""
        creq = ConnectionRequest(request.host, request.ip, request.port, request.url, "http")
        result = await self.connect(creq)
        if isinstance(result, Refused):
            writer.write(error_response(HTTP_STATUS[result.kind], result.reason))
            self.report(creq, peer, result.kind, result.reason, ByteCount(), started)
            return False
        exchange = _Exchange(conn, request, reader, writer, result)
        try:
            await exchange.run()
        except BaseException as exc:
            result.writer.close()
            if not isinstance(exc, HttpProxyError | OSError):
                raise
            status = exc.status if isinstance(exc, HttpProxyError) else 502
            reason = str(exc) if isinstance(exc, HttpProxyError) else f"{creq.destination}: {exc!r}"
            if not exchange.answered:
                writer.write(error_response(status, reason))
            outcome: Outcome = "bad-request" if status < 500 else "error"
            self.report(creq, peer, outcome, reason, exchange.count, started)
            return False
        if exchange.switched:
            await self.tunnel(
                creq,
                peer,
                started,
                reader,
                writer,
                result,
                conn.trailing_data,
                exchange.upstream.trailing_data,
            )
            return False
        result.writer.close()
        self.report(creq, peer, "ok", "", exchange.count, started)
        return conn.start_next_request()  # False when an early response cut the body short


class _Exchange:
    """One absolute-form request relayed to its destination, and the response relayed back."""

    def __init__(
        self,
        conn: HttpProxyServer,
        request: ForwardRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        dest: Connected,
    ) -> None:
        self.conn = conn
        self.request = request
        self.reader = reader
        self.writer = writer
        self.dest = dest
        self.upstream = HttpUpstream(request)
        self.count = ByteCount()
        self.answered = False  # a final response head went to the app
        self.switched = False  # 101 Switching Protocols: a tunnel follows

    async def run(self) -> None:
        """Relay the request and the response; the response may end before the request body."""
        self._send_up(self.upstream.request_head())
        body = asyncio.create_task(self._request_body())
        response = asyncio.create_task(self._response())
        try:
            done, _ = await asyncio.wait({body, response}, return_when=asyncio.FIRST_COMPLETED)
            if body in done and body.exception() is None:
                await asyncio.wait({response})
            for task in (body, response):  # the app's own errors are reported first
                error = task.exception() if task.done() else None
                if error is not None:
                    raise error
        finally:
            for task in (body, response):
                task.cancel()
            await asyncio.gather(body, response, return_exceptions=True)

    def _send_up(self, data: bytes) -> None:
        self.dest.writer.write(data)
        self.count.up += len(data)

    async def _request_body(self) -> None:
        while True:
            event = self.conn.next_event()
            if event is Pending.NEED_DATA:
                self.conn.receive_data(await self.reader.read(CHUNK))
                continue
            if isinstance(event, Body):
                self._send_up(self.upstream.send_body(event.data))
            elif isinstance(event, EndOfBody):
                self._send_up(self.upstream.send_end(event.trailers))
            else:
                raise HttpProxyError(f"request to {self.request.url}: unexpected {event!r} in the body")
            await self.dest.writer.drain()
            if isinstance(event, EndOfBody):
                return

    async def _response(self) -> None:
        while True:
            event = self.upstream.next_event()
            if event is Pending.NEED_DATA:
                self.upstream.receive_data(await self.dest.reader.read(CHUNK))
                continue
            if isinstance(event, ResponseHead):
                out = self.conn.send_response(event)
                self.answered = self.answered or not event.informational
                self.switched = event.status == 101
            elif isinstance(event, Body):
                out = self.conn.send_body(event.data)
            elif isinstance(event, EndOfBody):
                out = self.conn.send_end(event.trailers)
            else:
                raise HttpProxyError(f"response from {self.request.url}: unexpected {event!r}", 502)
            self.writer.write(out)
            self.count.down += len(out)
            await self.writer.drain()
            if isinstance(event, EndOfBody) or self.switched:
                return


async def _next_socks(conn: Socks5Server, reader: asyncio.StreamReader, kind: type[_E]) -> _E:
    while True:
        event = conn.next_event()
        if isinstance(event, kind):
            return event
        if event is not SocksPending.NEED_DATA:
            raise AssertionError(f"SOCKS5 state {conn.state}: unexpected {event!r}")
        data = await reader.read(CHUNK)
        if not data:
            raise Socks5Error(f"connection closed in SOCKS5 {conn.state}")
        conn.receive_data(data)


async def _next_http(
    conn: HttpProxyServer, reader: asyncio.StreamReader
) -> TunnelRequest | ForwardRequest | Closed:
    while True:
        event = conn.next_event()
        if event is Pending.NEED_DATA:
            conn.receive_data(await reader.read(CHUNK))
            continue
        if not isinstance(event, TunnelRequest | ForwardRequest | Closed):
            raise AssertionError(f"unexpected {event!r} between HTTP requests")
        return event


def _timeout_reason(protocol: str, seconds: float) -> str:
    return f"{protocol} handshake not finished within {seconds:g} s"


def peer_name(writer: asyncio.StreamWriter) -> str:
    address = writer.get_extra_info("peername")
    if isinstance(address, tuple) and len(address) >= 2:
        return authority(str(address[0]), int(address[1]))
    return str(address)


async def start_listener(
    handler: Handler,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    on_stats: StatsCallback | None = None,
    handshake_timeout: float = 10.0,
    idle_timeout: float = 60.0,
) -> tuple[asyncio.Server, ProxyListener]:
    """Listen on ``host:port``; close the server, then ``await listener.aclose()`` to stop."""
    listener = ProxyListener(
        handler, on_stats=on_stats, handshake_timeout=handshake_timeout, idle_timeout=idle_timeout
    )
    server = await asyncio.start_server(listener, host, port)
    return server, listener
