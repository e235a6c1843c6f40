"""The server's unix-socket listener, how a user-namespace pod's caretaker reaches it: the caretaker
endpoint and nothing else, dialed with ``unix_path``, and the socket gone once the listener closes."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cornus_core.wire import DialError, dial_websocket
from server.app import CARETAKER_ATTACH, DEPLOY_ATTACH, CornusServer, unix_url
from server.auth import Authenticator, new_secret
from server.backends.process import ProcessBackend
from server.gateway import Gateway

TOKEN = "unix-listener-token"


@pytest.fixture
async def server() -> AsyncIterator[CornusServer]:
    srv = CornusServer(auth=Authenticator(TOKEN, new_secret()), backend=ProcessBackend(),
                       gateway=Gateway(enabled=False))
    await srv.start()
    yield srv
    await srv.close()


async def test_unix_listener_serves_only_the_caretaker_endpoint(server: CornusServer) -> None:
    with tempfile.TemporaryDirectory(prefix="cnux-") as directory:
        path = str(Path(directory) / "pod.sock")
        url = await server.add_unix_listener(path)
        assert url == unix_url(path) and url.startswith("ws+unix://%2F")
        assert Path(path).stat().st_mode & 0o777 == 0o600
        with pytest.raises(DialError) as caretaker:  # there, asking for a caretaker's token
            await dial_websocket("ws://localhost" + CARETAKER_ATTACH, token=TOKEN, unix_path=path)
        assert caretaker.value.status == 403
        with pytest.raises(DialError) as caller:  # the caller's endpoint is not served here
            await dial_websocket("ws://localhost" + DEPLOY_ATTACH, token=TOKEN, unix_path=path)
        assert caller.value.status == 404
        await server.close_listener(url)
        assert not Path(path).exists()
        with pytest.raises(DialError, match=f"via unix socket {path}: could not connect"):
            await dial_websocket("ws://localhost" + CARETAKER_ATTACH, token=TOKEN, unix_path=path)


async def test_unix_listener_replaces_a_stale_socket(server: CornusServer) -> None:
    """A crashed run's socket file is in the way; the new listener takes its place."""
    with tempfile.TemporaryDirectory(prefix="cnux-") as directory:
        path = Path(directory) / "pod.sock"
        path.write_text("")
        url = await server.add_unix_listener(str(path))
        with pytest.raises(DialError) as refused:
            await dial_websocket("ws://localhost/nowhere", token=TOKEN, unix_path=str(path))
        assert refused.value.status == 404
        await server.close()
        assert not path.exists() and url
