"""Fixtures of the dockerhost backend's tests: a private Docker engine (see ``engine_support``) and servers
on the dockerhost backend."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from server.app import CornusServer
from server.auth import Authenticator, new_secret
from server.backends.docker import DockerBackend
from server.gateway import Gateway

from .engine_support import IMAGE, IMAGE_WITH_CMD, docker_api, missing_tools, private_dockerd

TOKEN = "dockerhost-test-token"
Server = tuple[CornusServer, DockerBackend]
__all__ = ["IMAGE", "IMAGE_WITH_CMD", "TOKEN", "Server", "docker_api", "dockerhost_server"]


@pytest.fixture(scope="package")
def dockerd() -> Iterator[str]:
    """``unix://...`` of a Docker engine this test run started."""
    missing = missing_tools()
    if missing:
        pytest.skip(f"the dockerhost tests run a Docker engine: {missing}")
    with private_dockerd() as host:
        yield host


@contextlib.asynccontextmanager
async def dockerhost_server(dockerd: str, run_dir: Path, network: str) -> AsyncIterator[Server]:
    """A server on the dockerhost backend, its containers on ``network``."""
    backend = DockerBackend(host=dockerd, run_dir=run_dir, network=network, prefix="cornustest", stop_grace=2)
    server = CornusServer(auth=Authenticator(TOKEN, new_secret()), backend=backend, gateway=Gateway(enabled=False))
    backend.listeners = server
    await server.start()
    await backend.start()
    try:
        yield server, backend
    finally:
        await server.close()
        await backend.close()


@pytest.fixture
async def docker_server(dockerd: str, tmp_path: Path) -> AsyncIterator[Server]:
    async with dockerhost_server(dockerd, tmp_path / "run", "none") as pair:
        yield pair
