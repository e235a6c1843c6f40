"""A live session whose caller serves client-local mounts, and the mount role run in this process against
the real server with the deployment's own caretaker token, as the pod's caretaker runs it.

The deployment's own caretaker process is a placeholder that only reports ready: the role under test is
the pod's one caretaker connection (a second caretaker of the same deployment would replace it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from caretaker.config import MountConfig
from caretaker.link import ServerLink
from caretaker.roles.mount import MountRole
from caretaker.telemetry import Telemetry
from cornus_core.caller import CallerSession
from cornus_core.events import Event, Ready
from cornus_core.ninep.fuse import fuse_unavailable
from cornus_core.spec import DeploySpec
from server.app import CornusServer
from server.auth import Authenticator, new_secret
from server.backends.process import ProcessBackend
from server.gateway import Gateway

TOKEN = "test-caller-token"
PLACEHOLDER_CARETAKER = [sys.executable, "-c", "import time; print('READY {}', flush=True); time.sleep(3600)"]


def needs_fuse() -> list[pytest.MarkDecorator]:
    why = fuse_unavailable()
    return [
        pytest.mark.root,
        pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts FUSE filesystems"),
        pytest.mark.skipif(why is not None, reason=f"needs FUSE: {why}"),
    ]


@dataclass
class Pod:
    """The pod side of one live session: its server link and the mount roles started on it."""

    session: CallerSession
    task: asyncio.Task[Any]
    events: list[Event]
    server: CornusServer
    deployment: Any = None
    link: ServerLink | None = None
    roles: list[MountRole] = field(default_factory=list)

    @property
    def mounts(self) -> list[MountConfig]:
        """The mount configs the server wrote for this deployment's caretaker."""
        return [MountConfig.model_validate(m) for m in self.deployment.caretaker_config.get("mounts", [])]

    async def role(self, mounts: list[MountConfig] | None = None, **options: Any) -> MountRole:
        """A started mount role (stopped by the fixture at the end); FUSE unless told otherwise."""
        assert self.link is not None
        options.setdefault("mechanism", "fuse")
        role = MountRole(self.mounts if mounts is None else mounts, self.link, Telemetry(), **options)
        self.roles.append(role)
        await role.start()
        return role

    async def drop_connection(self) -> None:
        """The server ends the caretaker's connection, as a network failure would; the link redials."""
        assert self.link is not None and self.server.registry is not None
        before = self.link.connects
        await self.server.registry.deployments[self.deployment.id].caretaker.aclose(timeout=1)
        for _ in range(400):
            if self.link.connects > before:
                await self.link.wait_up(10)
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the caretaker link never redialed")

    async def close(self) -> None:
        for role in self.roles:
            await role.aclose()
        if self.link is not None:
            await self.link.aclose()
        if not self.task.done():
            await self.session.down()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.task, 30)


StartPod = Callable[..., Awaitable[Pod]]


@pytest.fixture
async def server() -> AsyncIterator[CornusServer]:
    srv = CornusServer(auth=Authenticator(TOKEN, new_secret()),
                       backend=ProcessBackend(caretaker_argv=PLACEHOLDER_CARETAKER, host_mounts=True),
                       gateway=Gateway(enabled=False))
    await srv.start()
    yield srv
    await srv.close()


@pytest.fixture
async def pod(server: CornusServer) -> AsyncIterator[StartPod]:
    """``await pod(mounts)``: deploy a session with these spec mounts and connect a caretaker link."""
    started: list[Pod] = []

    async def start(mounts: list[dict[str, Any]]) -> Pod:
        events: list[Event] = []
        spec = DeploySpec.model_validate({"command": "sleep 600", "mounts": mounts})
        session = CallerSession(server.url, TOKEN, spec, on_event=events.append)
        item = Pod(session, asyncio.create_task(session.run()), events, server)
        started.append(item)
        assert server.registry is not None
        for _ in range(600):
            ready = [e.deployment for e in events if isinstance(e, Ready)]
            if ready and ready[0] in server.registry.deployments:
                item.deployment = server.registry.deployments[ready[0]].deployment
                break
            if item.task.done():
                raise AssertionError(f"the session ended before it was live: {item.task.result()} {events}")
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the deployment never became live: {events}")
        item.link = ServerLink(item.deployment.server_url, item.deployment.caretaker_token)
        item.link.start()
        await item.link.wait_up(20)
        return item

    yield start
    for item in started:
        await item.close()


def errno_of(fn: Callable[..., Any], *args: Any) -> int:
    """The errno ``fn(*args)`` fails with; the test fails if it succeeds."""
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno or 0
    raise AssertionError(f"{getattr(fn, '__name__', fn)}{args} succeeded")

