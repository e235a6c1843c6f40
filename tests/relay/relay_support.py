"""Real three-hop fixtures: an in-process cornus-server with the process backend, real caretaker
subprocesses, the caller's session, and small real HTTP targets on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from cornus_core.caller import CallerSession, Outcome
from cornus_core.events import ConnEnd, Event, HopDecision, Log, Ready
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec
from server.app import CornusServer
from server.auth import Authenticator, new_secret
from server.backends.process import ProcessBackend
from server.gateway import Gateway

TOKEN = "test-caller-token"


@dataclass
class Target:
    """A tiny HTTP server that answers every request with its own name and counts requests."""

    name: str
    port: int = 0
    requests: int = 0
    server: asyncio.Server | None = None

    async def start(self) -> Target:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                self.requests += 1
                body = f"hello from {self.name}\n".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def target() -> AsyncIterator[Target]:
    t = await Target("target").start()
    yield t
    await t.close()


@dataclass
class Run:
    outcome: Outcome
    events: list[Event] = field(default_factory=list)

    @property
    def app_lines(self) -> list[str]:
        return [e.line for e in self.events if isinstance(e, Log) and e.source == "app"]

    def hops(self, kind: type[Any] = HopDecision) -> dict[str, Any]:
        return {e.hop: e for e in self.events if isinstance(e, kind)}

    @property
    def ends(self) -> dict[str, ConnEnd]:
        return self.hops(ConnEnd)


@pytest.fixture
async def server() -> AsyncIterator[CornusServer]:
    srv = CornusServer(auth=Authenticator(TOKEN, new_secret()), backend=ProcessBackend(),
                       gateway=Gateway(enabled=False))
    await srv.start()
    yield srv
    await srv.close()


Deploy = Callable[..., Any]


@pytest.fixture
def deploy(server: CornusServer) -> Deploy:
    async def run(spec: dict[str, Any], *, proxies: ProxySettings | None = None, timeout: float = 60) -> Run:
        events: list[Event] = []
        session = CallerSession(server.url, TOKEN, DeploySpec.model_validate(spec), on_event=events.append,
                                proxies=proxies or ProxySettings())
        outcome = await asyncio.wait_for(session.run(), timeout)
        return Run(outcome, events)

    return run


def curl(url: str, *extra: str) -> str:
    """A shell command: curl through the caretaker's HTTP proxy, printing the body and the status."""
    args = " ".join(extra)
    return f'curl -sS --noproxy "" -x "$HTTP_PROXY" -w "status=%{{http_code}}\\n" {args} {url}'


@dataclass
class Live:
    """A session running in the background (the workload sleeps until the test ends it)."""

    session: CallerSession
    task: asyncio.Task[Outcome]
    events: list[Event]
    server: CornusServer

    async def deployment(self) -> Any:
        """The server's record of this session's deployment, once it is live."""
        assert self.server.registry is not None
        for _ in range(600):
            ready = [e.deployment for e in self.events if isinstance(e, Ready)]
            if ready and ready[0] in self.server.registry.deployments:
                return self.server.registry.deployments[ready[0]].deployment
            await asyncio.sleep(0.05)
        raise AssertionError(f"deployment never became live: {self.events}")

    async def finish(self) -> Run:
        await self.session.down()
        return Run(await asyncio.wait_for(self.task, 30), self.events)


@pytest.fixture
async def live(server: CornusServer) -> AsyncIterator[Callable[..., Any]]:
    started: list[Live] = []

    async def start(spec: dict[str, Any], *, proxies: ProxySettings | None = None) -> Live:
        events: list[Event] = []
        session = CallerSession(server.url, TOKEN, DeploySpec.model_validate(spec), on_event=events.append,
                                proxies=proxies or ProxySettings())
        item = Live(session, asyncio.create_task(session.run()), events, server)
        started.append(item)
        return item

    yield start
    for item in started:
        if not item.task.done():
            await item.session.down()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(item.task, 30)
