"""Choosing the embedded server's backend, the stand-in when pods are unavailable, and the server's extra
listeners that make its caretaker endpoint (and only that) reachable from pods. No root needed."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from cornus_core.caller import CallerSession
from cornus_core.events import Error, Event
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec
from cornus_core.wire import DialError, dial_websocket
from server.app import CARETAKER_ATTACH, DEPLOY_ATTACH, CornusServer
from server.auth import Authenticator, new_secret
from server.backends.base import BackendError, Deployment
from server.backends.choose import choose_backend
from server.backends.local.backend import LocalBackend
from server.backends.process import ProcessBackend
from server.gateway import Gateway

TOKEN = "embedded-choice-token"
NOTICE = "local pods are unavailable (test), so the workload runs as a plain process"


@pytest.fixture
async def server() -> AsyncIterator[CornusServer]:
    srv = CornusServer(auth=Authenticator(TOKEN, new_secret()), backend=ProcessBackend(notice=NOTICE),
                       gateway=Gateway(enabled=False))
    await srv.start()
    yield srv
    await srv.close()


async def run_session(server: CornusServer, spec: dict[str, object]) -> tuple[list[Event], object]:
    events: list[Event] = []
    session = CallerSession(server.url, TOKEN, DeploySpec.model_validate(spec), on_event=events.append,
                            proxies=ProxySettings())
    outcome = await asyncio.wait_for(session.run(), 60)
    return events, outcome


async def test_extra_listener_serves_only_the_caretaker_endpoint(server: CornusServer) -> None:
    url = await server.add_listener("127.0.0.1")
    assert url != server.url and url.startswith("ws://127.0.0.1:")
    http = url.replace("ws://", "http://")
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{http}/healthz")).status_code == 200
        # The caretaker endpoint is there (it asks for a caretaker's token) ...
        assert (await client.get(f"{http}{CARETAKER_ATTACH}")).status_code == 401
    with pytest.raises(DialError) as caretaker:
        await dial_websocket(url + CARETAKER_ATTACH, token=TOKEN)  # the caller's token has the wrong scope
    assert caretaker.value.status == 403
    # ... the caller's endpoint is not, not even with the caller's own token.
    with pytest.raises(DialError) as caller:
        await dial_websocket(url + DEPLOY_ATTACH, token=TOKEN)
    assert caller.value.status == 404
    await server.close_listener(url)
    await server.close_listener(url)  # already gone is fine
    with pytest.raises(DialError, match="could not connect"):
        await dial_websocket(url + CARETAKER_ATTACH, token=TOKEN)


async def test_stand_in_says_what_is_missing_and_still_runs_proxy_mode(server: CornusServer) -> None:
    events, outcome = await run_session(server, {"command": "echo hello", "egress": {"mode": "proxy"}})
    assert getattr(outcome, "exit_code", None) == 0
    warnings = [e for e in events if isinstance(e, Error)]
    assert [(w.message, w.fatal) for w in warnings] == [(NOTICE, False)]


async def test_stand_in_refuses_transparent_mode(server: CornusServer) -> None:
    events, outcome = await run_session(server, {"command": "echo never", "egress": {"mode": "transparent"}})
    assert getattr(outcome, "exit_code", "") is None
    errors = [e.message for e in events if isinstance(e, Error) and e.fatal]
    assert len(errors) == 1 and "transparent" in errors[0] and "needs local pods" in errors[0]


@pytest.mark.parametrize("choice", ["local", " Local "])
async def test_cornus_backend_forces_local_pods(choice: str) -> None:
    assert type(await choose_backend(choice)) is LocalBackend


async def test_cornus_backend_forces_plain_processes_without_a_notice() -> None:
    backend = await choose_backend("process")
    assert isinstance(backend, ProcessBackend)
    assert backend.name == "process" and backend.notice is None


async def test_unknown_cornus_backend_is_named_and_detection_decides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = await choose_backend("docker")
    assert backend.name in ("local", "process")
    assert "backend 'docker' is none of auto, local, process" in capsys.readouterr().err
    if isinstance(backend, ProcessBackend):
        assert backend.notice and "transparent egress and network isolation are unavailable" in backend.notice


def deployment(spec: dict[str, object], server_url: str = "ws://127.0.0.1:9/.cornus/v1/caretaker/attach") -> Deployment:
    return Deployment(id="d1", spec=DeploySpec.model_validate(spec), server_url=server_url, caretaker_token="t",
                      caretaker_config={}, emit=lambda event: None)


async def test_local_backend_status_words() -> None:
    backend = LocalBackend()
    dep = deployment({"command": "true"})
    assert backend.status(dep) == "pending"
    dep.state["app"] = await asyncio.create_subprocess_exec("sh", "-c", "read line; exit 3",
                                                            stdin=asyncio.subprocess.PIPE)
    assert backend.status(dep) == "running"
    await dep.state["app"].communicate(b"go\n")
    assert backend.status(dep) == "exited 3"
    dep.state["deleted"] = True
    assert backend.status(dep) == "deleted"


@pytest.mark.parametrize(("spec", "server_url", "message"), [
    ({"command": ["/nonexistent/program"]}, None, "cannot start workload '/nonexistent/program'"),
    ({"command": ["no-such-program-here"]}, None, "'no-such-program-here': not found on PATH"),
    ({"command": "true", "workdir": "/nonexistent/dir"}, None, "workdir '/nonexistent/dir' is not a directory"),
    ({"command": "true"}, "ws://127.0.0.1:9/x", "is on loopback, which a pod cannot reach"),
])
async def test_local_backend_refuses_before_making_a_pod(
    spec: dict[str, object], server_url: str | None, message: str
) -> None:
    backend = LocalBackend()  # never started: each of these is refused first
    with pytest.raises(BackendError, match=re.escape(message)):
        await backend.apply(deployment(spec, *([server_url] if server_url else [])))
    assert backend.pod_host is None
