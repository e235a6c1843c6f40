"""The egress role: the app's proxy (HTTP + SOCKS5 on one loopback port), the first hop's decision,
and the relay of `client`/`gateway` connections to the server."""

from __future__ import annotations

import asyncio
import itertools
import os
import time

from cornus_core.events import ConnEnd, HopDecision
from cornus_core.policy import Destination, Policy, Route, compile_policy
from cornus_core.proxy.listener import (
    Connected,
    ConnectionRequest,
    ConnectionStats,
    ConnectResult,
    Refused,
    start_listener,
)
from cornus_core.proxy.settings import app_proxy_env, cluster_no_proxy
from cornus_core.spec import EgressSpec
from cornus_core.streams import TAG_EGRESS, EgressRequest
from cornus_core.wire import WireError, read_verdict, write_header

from ..link import LinkDown, ServerLink
from ..telemetry import Telemetry

CLUSTER_DIAL_TIMEOUT = 10.0
VERDICT_TIMEOUT = 40.0  # the server and caller each bound their own dials below this


class EgressRole:
    def __init__(self, policy: Policy, link: ServerLink, telemetry: Telemetry, *, host: str, port: int) -> None:
        self.policy = policy
        self.link = link
        self.telemetry = telemetry
        self._host, self._port = host, port
        self._ids = itertools.count(1)
        self._prefix = os.urandom(3).hex()
        self._server: asyncio.Server | None = None
        self._conns: dict[int, str] = {}  # id(request) -> connection id, until its stats arrive

    async def start(self) -> tuple[str, int]:
        self._server, self._listener = await start_listener(
            self.handle, host=self._host, port=self._port, on_stats=self._stats
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    def app_env(self, egress: EgressSpec) -> dict[str, str]:
        """The workload's proxy variables; destinations surely routed cluster go in NO_PROXY."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return app_proxy_env(port, cluster_no_proxy(egress.rules, egress.script))

    def apply_policy(self, egress: EgressSpec) -> str:
        """Switch to a new policy (a live update); connections already routed keep their decision."""
        self.policy = compile_policy(egress)
        return self.policy.version

    async def handle(self, request: ConnectionRequest) -> ConnectResult:
        conn = f"{self._prefix}-{next(self._ids)}"
        t_ms = int(time.time() * 1000)
        dest = Destination(host=request.host, ip=request.ip, port=request.port, url=request.url)
        decision = self.policy.route(dest, now_ms=t_ms)
        self.telemetry.emit(HopDecision(
            conn=conn, hop="caretaker", route=decision.route, reason=decision.reason, version=decision.version,
            host=request.host, ip=request.ip, port=request.port, t_ms=t_ms,
        ))
        self._conns[id(request)] = conn
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
            verdict = await asyncio.wait_for(read_verdict(stream), VERDICT_TIMEOUT)
        except TimeoutError:
            stream.reset()
            return Refused("timeout", "the server did not answer in time")
        except WireError as exc:
            stream.reset()
            return Refused("error", f"server connection: {exc}")
        if not verdict.ok:
            return Refused(verdict.kind.value, verdict.reason)  # type: ignore[arg-type]
        return Connected(stream, stream)

    async def _dial_cluster(self, request: ConnectionRequest) -> ConnectResult:
        target = request.host or request.ip
        assert target is not None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(target, request.port), CLUSTER_DIAL_TIMEOUT
            )
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
        if self._server is not None:
            self._server.close()
            await self._listener.aclose()

