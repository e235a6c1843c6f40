"""Fixtures: an export tree with escape bait beside it, a real TCP server over it, real clients."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cornus_core.ninep import Client, TCPServer, serve_tcp

SECRET = b"outside-secret\n"


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """``export/`` (the root served) next to ``outside/`` (must never be reached)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    root = tmp_path / "export"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"hello\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    (root / "sub" / "deeper" / "c").write_bytes(b"deep\n")
    (root / "esc_abs").symlink_to(outside)
    (root / "esc_rel").symlink_to("../outside")
    (root / "esc_root").symlink_to("/")
    (root / "link_a").symlink_to("a.txt")
    return tmp_path


@pytest.fixture
def export_dir(sandbox: Path) -> Path:
    return sandbox / "export"


def snapshot_tree(path: Path) -> dict[str, tuple[int, int, bytes | str | None]]:
    """Every entry under ``path``: mode, mtime and content (or link target), to prove nothing changed."""
    out: dict[str, tuple[int, int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                body: bytes | str | None = os.readlink(p)
            elif p.is_file():
                body = p.read_bytes()
            else:
                body = None
            out[str(p.relative_to(path))] = (st.st_mode, st.st_mtime_ns, body)
    return out


@pytest.fixture
async def server(export_dir: Path) -> AsyncIterator[TCPServer]:
    async with await serve_tcp(export_dir, "127.0.0.1", 0) as srv:
        yield srv


@pytest.fixture
async def client(server: TCPServer) -> AsyncIterator[Client]:
    c = await Client.connect(*server.address)
    try:
        yield c
    finally:
        await c.close()
