"""Fixtures for the local backend tests: an in-process cornus-server deploying into real pods (with a
name prefix and run directory of the test's own), the caller's session in this process, small HTTP
targets that record who reached them, and a stand-in for the caller's corporate proxy."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cornus_core.caller import CallerSession, Outcome
from cornus_core.events import ConnEnd, Event, HopDecision, Log, Status
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec
from server.app import CornusServer
from server.auth import Authenticator, new_secret
from server.backends.local.backend import LocalBackend
from server.gateway import Gateway

TOKEN = "local-backend-test-token"
POD_DETAIL = re.compile(r"pod (\S+) at (\S+)")


@dataclass(frozen=True)
class Seen:
    path: str
    host: str  # the request's Host header
    peer: str  # the address the connection came from


@dataclass
class Target:
    """A tiny HTTP server answering every request with ``hello from <name>`` and recording each one."""

    name: str
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    servers: list[asyncio.Server] = field(default_factory=list)

    async def start(self, *hosts: str) -> Target:
        """Listen on each of ``hosts`` (default 127.0.0.1), all at the same free port."""
        for host in hosts or ("127.0.0.1",):
            server = await asyncio.start_server(self._serve, host, self.port)
            self.port = server.sockets[0].getsockname()[1]
            self.servers.append(server)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(writer.get_extra_info("peername")[0])
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode(errors="replace")
                path = head.split(" ", 2)[1] if head.count(" ") >= 2 else ""
                host = next((line.split(":", 1)[1].strip() for line in head.split("\r\n")
                             if line.lower().startswith("host:")), "")
                self.seen.append(Seen(path, host, peer))
                body = f"hello from {self.name}\n".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        writer.close()

    @property
    def paths(self) -> list[str]:
        return [s.path for s in self.seen]

    async def close(self) -> None:
        for server in self.servers:
            server.close()


class NameProxy:
    """The caller's corporate proxy (HTTP CONNECT on loopback): it knows names nothing else on this
    machine resolves, and dials everything else as asked."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.seen: list[str] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            request_line = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n", 1)[0]
            self.seen.append(request_line)
            host, _, port = request_line.split()[1].rpartition(":")
            host = host.strip("[]")
            up_reader, up_writer = await asyncio.open_connection(self.names.get(host, host), int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        writer.close()

    async def close(self) -> None:
        self.server.close()


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    dst.close()


@dataclass
class Run:
    outcome: Outcome | None
    events: list[Event] = field(default_factory=list)

    @property
    def app_lines(self) -> list[str]:
        return [e.line for e in self.events if isinstance(e, Log) and e.source == "app"]

    def hops(self, kind: type[Any] = HopDecision) -> dict[str, Any]:
        """The last event of ``kind`` per hop."""
        return {e.hop: e for e in self.events if isinstance(e, kind)}

    def decisions(self, host: str) -> dict[str, HopDecision]:
        """Each hop's decision on the connection whose destination host was ``host``."""
        conns = {e.conn for e in self.events if isinstance(e, HopDecision) and (e.host or e.ip) == host}
        assert len(conns) == 1, f"expected one connection to {host}: {self.events}"
        return {e.hop: e for e in self.events if isinstance(e, HopDecision) and e.conn in conns}

    def ends_of(self, conn: str) -> dict[str, ConnEnd]:
        return {e.hop: e for e in self.events if isinstance(e, ConnEnd) and e.conn == conn}

    @property
    def pod(self) -> tuple[str, str]:
        """(name, address) of the pod the deployment ran in."""
        for event in self.events:
            if isinstance(event, Status) and (match := POD_DETAIL.fullmatch(event.detail or "")):
                return match[1], match[2]
        raise AssertionError(f"no pod in the events: {self.events}")


@pytest.fixture
async def local_backend(prefix: str, run_dir: Path) -> AsyncIterator[LocalBackend]:
    from .conftest import host_state

    backend = LocalBackend(prefix=prefix, run_dir=run_dir, stop_grace=2.0)
    await backend.start()
    assert backend.pod_host is not None
    owner = backend.pod_host.owner
    try:
        yield backend
    finally:
        await backend.close()
    assert host_state(owner, run_dir).empty, "the local backend left something behind"


@pytest.fixture
async def local_server(local_backend: LocalBackend) -> AsyncIterator[CornusServer]:
    server = CornusServer(auth=Authenticator(TOKEN, new_secret()), backend=local_backend,
                          gateway=Gateway(enabled=False))
    local_backend.listeners = server
    await server.start()
    try:
        yield server
    finally:
        await server.close()


Deploy = Callable[..., Any]


@pytest.fixture
def deploy(local_server: CornusServer) -> Deploy:
    """Run one session to its end: ``await deploy(spec, proxies=...) -> Run``."""

    async def run(spec: dict[str, Any], *, proxies: ProxySettings | None = None, timeout: float = 90) -> Run:
        events: list[Event] = []
        session = CallerSession(local_server.url, TOKEN, DeploySpec.model_validate(spec),
                                on_event=events.append, proxies=proxies or ProxySettings())
        outcome = await asyncio.wait_for(session.run(), timeout)
        return Run(outcome, events)

    return run


@pytest.fixture
async def target() -> AsyncIterator[Target]:
    """A target on the host's loopback, which no pod can reach: a pod's loopback is its own."""
    t = await Target("the caller's side").start()
    yield t
    await t.close()


def proxied_curl(url: str, *extra: str) -> str:
    """A shell command: curl through the caretaker's HTTP proxy, printing the body and the status."""
    return f'curl -sS --max-time 20 --noproxy "" -x "$HTTP_PROXY" -w "status=%{{http_code}}\\n" {" ".join(extra)} {url}'
