"""The egress role: the app's proxy (HTTP + SOCKS5 on one loopback port) or, in transparent mode, the
listener the pod's capture rules redirect every app TCP connection to; the first hop's decision; and the
relay of `client`/`gateway` connections to the server."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import itertools
import os
import socket
import time
from typing import Literal

from cornus_core.events import ConnEnd, HopDecision
from cornus_core.policy import Destination, Policy, Route, compile_policy
from cornus_core.proxy.listener import (
    Connected,
    ConnectionRequest,
    ConnectionStats,
    ConnectResult,
    ProxyListener,
    Refused,
    tcp_url,
)
from cornus_core.proxy.settings import app_proxy_env, cluster_no_proxy
from cornus_core.proxy.transparent import TransparentListener
from cornus_core.spec import EgressSpec
from cornus_core.streams import TAG_EGRESS, EgressRequest
from cornus_core.wire import WireError, read_verdict, write_header

from ..link import LinkDown, ServerLink
from ..net import connect_marked
from ..telemetry import Telemetry
from .dns import NameMap

CLUSTER_DIAL_TIMEOUT = 10.0
VERDICT_TIMEOUT = 40.0  # the server and caller each bound their own dials below this
# Capture redirects IPv4 to 127.0.0.1 and IPv6 to ::1, so the transparent listener binds both.
TRANSPARENT_HOSTS = ("127.0.0.1", "::1")
BIND_ATTEMPTS = 5  # an ephemeral IPv4 port may be taken on ::1 already: pick another


class EgressRole:
    """One listener for the app, in proxy mode (HTTP + SOCKS5 on `host:port`) or transparent mode
    (redirected connections on 127.0.0.1 and ::1 at `port`; the host name comes from TLS SNI or HTTP
    Host, the address from the redirect, or else from the name the dns role's answer gave that address).
    With a socket `mark`, the role's own dials carry it."""

    def __init__(self, policy: Policy, link: ServerLink, telemetry: Telemetry, *, host: str, port: int,
                 mode: Literal["proxy", "transparent"] = "proxy", mark: int | None = None,
                 names: NameMap | None = None) -> None:
        self.policy = policy
        self.link = link
        self.telemetry = telemetry
        self.mode = mode
        self._host, self._port = host, port
        self._mark = mark
        self.names = names  # transparent mode: the dns role's answers name connections that carry no name
        self._ids = itertools.count(1)
        self._prefix = os.urandom(3).hex()
        self._servers: list[asyncio.Server] = []
        self._listener = ProxyListener(self.handle, on_stats=self._stats)
        self._conns: dict[int, str] = {}  # id(request) -> connection id, until its stats arrive

    @property
    def port(self) -> int:
        """The port the app's connections arrive at (after start)."""
        return int(self._servers[0].sockets[0].getsockname()[1])

    async def start(self) -> tuple[str, int]:
        if self.mode == "transparent":
            self._servers = await _serve_loopback(TransparentListener(self._listener), self._port)
        else:
            self._servers = [await asyncio.start_server(self._listener, self._host, self._port)]
        host, port = self._servers[0].sockets[0].getsockname()[:2]
        return host, port

    def app_env(self, egress: EgressSpec) -> dict[str, str]:
        """The workload's proxy variables; destinations surely routed cluster go in NO_PROXY."""
        return app_proxy_env(self.port, cluster_no_proxy(egress.rules, egress.script))

    def apply_policy(self, egress: EgressSpec) -> str:
        """Switch to a new policy (a live update); connections already routed keep their decision."""
        self.policy = compile_policy(egress)
        return self.policy.version

    async def handle(self, request: ConnectionRequest) -> ConnectResult:
        conn = f"{self._prefix}-{next(self._ids)}"
        t_ms = int(time.time() * 1000)
        self._conns[id(request)] = conn  # the listener reports stats on the request it made
        request = self._named(request)
        dest = Destination(host=request.host, ip=request.ip, port=request.port, url=request.url)
        decision = self.policy.route(dest, now_ms=t_ms)
        self.telemetry.emit(HopDecision(
            conn=conn, hop="caretaker", route=decision.route, reason=decision.reason, version=decision.version,
            host=request.host, ip=request.ip, port=request.port, t_ms=t_ms,
        ))
        if decision.route is Route.DENY:
            return Refused("deny", f"caretaker policy: {decision.reason}")
        if decision.route is Route.CLUSTER:
            return await self._dial_cluster(request)
        relayed = EgressRequest(
            conn=conn, host=request.host or request.ip or "", port=request.port, ip=request.ip,
            url=request.url, t_ms=t_ms, route=decision.route, version=decision.version,
        )
        try:
            stream = await self.link.open_stream()
        except LinkDown as exc:
            return Refused("refused", str(exc))
        try:
            await write_header(stream, TAG_EGRESS, relayed.to_fields())
            async with asyncio.timeout(VERDICT_TIMEOUT):  # no extra task per connection, unlike wait_for
                verdict = await read_verdict(stream)
        except TimeoutError:
            stream.reset()
            return Refused("timeout", "the server did not answer in time")
        except WireError as exc:
            stream.reset()
            return Refused("error", f"server connection: {exc}")
        if not verdict.ok:
            return Refused(verdict.kind.value, verdict.reason)  # type: ignore[arg-type]
        return Connected(stream, stream)

    def relays_name(self, name: str) -> bool:
        """Whether the current policy relays ``name`` (the dns role gives such names a stand-in address
        when the cluster cannot resolve them)."""
        return self.policy.relays_name(name)

    def _named(self, request: ConnectionRequest) -> ConnectionRequest:
        """A captured connection that carries no name of its own, named by the dns role's answer. A
        stand-in address means nothing beyond the pod: the connection goes on by its name alone."""
        if request.protocol != "transparent" or self.names is None:
            return request
        stand_in = self.names.is_stand_in(request.ip)
        if request.host is None and (name := self.names.name_for(request.ip)) is not None:
            request = dataclasses.replace(request, host=name, url=tcp_url(name, request.port))
        return dataclasses.replace(request, ip=None) if stand_in and request.host is not None else request

    async def _dial_cluster(self, request: ConnectionRequest) -> ConnectResult:
        # A captured connection goes where the app dialed; its sniffed name only informs the policy.
        target = request.ip if request.protocol == "transparent" else request.host or request.ip
        if target is None:  # the dns role's stand-in for a name the cluster cannot resolve
            return Refused("refused", f"{request.destination} does not resolve in the cluster")
        try:
            async with asyncio.timeout(CLUSTER_DIAL_TIMEOUT):
                if self._mark is None:
                    reader, writer = await asyncio.open_connection(target, request.port)
                else:
                    sock = await connect_marked(target, request.port, self._mark)
                    reader, writer = await asyncio.open_connection(sock=sock)
        except TimeoutError:
            return Refused("timeout", f"connect to {request.destination} timed out")
        except OSError as exc:
            return Refused("refused", f"connect to {request.destination}: {exc.strerror or exc}")
        return Connected(reader, writer)

    def _stats(self, stats: ConnectionStats) -> None:
        if stats.request is None:
            return
        conn = self._conns.pop(id(stats.request), None)
        if conn is None:
            return
        self.telemetry.emit(ConnEnd(
            conn=conn, hop="caretaker", outcome=stats.outcome, reason=stats.reason,
            bytes_up=stats.bytes_up, bytes_down=stats.bytes_down, duration_ms=stats.duration * 1000,
        ))

    async def aclose(self) -> None:
        for server in self._servers:
            server.close()
        await self._listener.aclose()


async def _serve_loopback(callback: TransparentListener, port: int) -> list[asyncio.Server]:
    """Listen on 127.0.0.1 and, where the namespace has IPv6, ::1, both at `port` (0: one free port)."""
    for _ in range(BIND_ATTEMPTS):
        first = await asyncio.start_server(callback, TRANSPARENT_HOSTS[0], port)
        chosen = first.sockets[0].getsockname()[1]
        try:
            second = await asyncio.start_server(callback, TRANSPARENT_HOSTS[1], chosen)
        except OSError as exc:
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or not socket.has_ipv6:
                return [first]  # no IPv6 here: nothing to capture on ::1 either
            first.close()
            if port or exc.errno != errno.EADDRINUSE:
                raise
            continue
        return [first, second]
    raise OSError(errno.EADDRINUSE, f"no port free on both {' and '.join(TRANSPARENT_HOSTS)}")

