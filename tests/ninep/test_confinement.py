"""Escape attempts with the raw client over real TCP: ``..`` walks, absolute and relative symlinks, odd
names, a symlink swapped in between walk and open, and single-file exports."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cornus_core.ninep import Client, Export, RemoteError, TCPServer, serve_tcp
from cornus_core.ninep.constants import NOFID, NONUNAME, OpenFlag, QidType
from cornus_core.ninep.messages import (
    Rlerror,
    Rwalk,
    Tattach,
    Tclunk,
    Tlcreate,
    Tlink,
    Tlopen,
    Tmkdir,
    Tmknod,
    Trenameat,
    Tsetattr,
    Tsymlink,
    Twalk,
)

from .conftest import SECRET, snapshot_tree


async def errno_of(client: Client, msg: object) -> int:
    reply = await client.request(msg)  # type: ignore[arg-type]
    assert isinstance(reply, Rlerror), reply
    return reply.ecode


async def test_dotdot_never_leaves_the_root(client: Client, sandbox: Path) -> None:
    root_qid = (await client.stat("")).qid
    reply = await client.request(Twalk(0, client.root, 50, ("..", "..", "..")))
    assert isinstance(reply, Rwalk) and reply.qids == (root_qid,) * 3
    # ../../a.txt resolves to the export's own a.txt, never to a parent's
    assert await client.read_file(("..", "..", "a.txt")) == b"hello\n"
    assert await client.read_file(("sub", "..", "..", "a.txt")) == b"hello\n"
    with pytest.raises(RemoteError) as info:
        await client.walk(("..", "outside", "secret"))
    assert info.value.errno == errno.ENOENT
    assert await errno_of(client, Tattach(0, 60, NOFID, "", "../outside", NONUNAME)) == errno.EACCES


@pytest.mark.parametrize("link", ["esc_abs", "esc_rel", "esc_root"])
async def test_symlinks_are_reported_never_followed(client: Client, link: str, sandbox: Path) -> None:
    fid, qids = await client.walk(link)
    assert qids[-1].type == QidType.SYMLINK
    assert stat.S_ISLNK((await client.getattr(fid)).mode)
    assert await client.readlink(link) == os.readlink(sandbox / "export" / link)
    assert await errno_of(client, Tlopen(0, fid, OpenFlag.RDONLY)) == errno.ELOOP
    assert await errno_of(client, Tlcreate(0, fid, "x", OpenFlag.WRONLY, 0o644, 0)) == errno.ENOTDIR
    assert await errno_of(client, Tmkdir(0, fid, "x", 0o755, 0)) == errno.ENOTDIR
    assert await errno_of(client, Tsymlink(0, fid, "x", "y", 0)) == errno.ENOTDIR
    for target in ("secret", "etc"):  # the walk stops at the symlink: a partial walk makes no new fid
        reply = await client.request(Twalk(0, client.root, 70, (link, target)))
        assert isinstance(reply, Rwalk) and len(reply.qids) == 1
        assert await errno_of(client, Tclunk(0, 70)) == errno.EBADF
    # a symlink's own attributes may not be changed through it either
    assert await errno_of(client, Tsetattr(0, fid, 1, 0o777, 0, 0, 0, 0, 0, 0, 0)) == errno.EOPNOTSUPP
    await client.clunk(fid)
    assert (sandbox / "outside" / "secret").read_bytes() == SECRET


async def test_in_export_symlink_is_readable_with_readlink(client: Client) -> None:
    assert await client.readlink("link_a") == "a.txt"
    assert await client.read_file("a.txt") == b"hello\n"


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "../outside/new", "/etc/x"])
async def test_names_that_are_not_one_component_are_refused(client: Client, name: str, sandbox: Path) -> None:
    before = snapshot_tree(sandbox)
    root = client.root
    refused = [
        Tlcreate(0, root, name, OpenFlag.WRONLY, 0o644, 0),
        Tmkdir(0, root, name, 0o755, 0),
        Tsymlink(0, root, name, "/", 0),
        Tmknod(0, root, name, stat.S_IFIFO | 0o644, 0, 0, 0),
        Trenameat(0, root, "a.txt", root, name),
        Trenameat(0, root, name, root, "moved"),
    ]
    for msg in refused:
        assert await errno_of(client, msg) in (errno.EINVAL, errno.EEXIST, errno.EISDIR), msg
    fid, _ = await client.walk("a.txt")
    assert await errno_of(client, Tlink(0, root, fid, name)) == errno.EINVAL
    await client.clunk(fid)
    assert snapshot_tree(sandbox) == before


async def test_device_nodes_and_setuid_bits_are_refused(client: Client, export_dir: Path) -> None:
    root = client.root
    assert await errno_of(client, Tmknod(0, root, "dev", stat.S_IFCHR | 0o666, 1, 3, 0)) == errno.EPERM
    assert await errno_of(client, Tmknod(0, root, "blk", stat.S_IFBLK | 0o666, 8, 0, 0)) == errno.EPERM
    assert not (export_dir / "dev").exists() and not (export_dir / "blk").exists()
    await client.request(Tmknod(0, root, "fifo", stat.S_IFIFO | 0o644, 0, 0, 0))
    assert stat.S_ISFIFO((export_dir / "fifo").lstat().st_mode)
    await client.write_file("tool", b"#!/bin/sh\n", mode=0o4755)
    fid, _ = await client.walk("tool")
    await client.setattr(fid, 1, mode=0o6755)
    await client.clunk(fid)
    mode = (export_dir / "tool").stat().st_mode
    assert stat.S_IMODE(mode) == 0o755  # set-uid and set-gid stripped, the rest kept


def _exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@pytest.mark.parametrize("openat2", [None, False], ids=["openat2", "per-component"])
async def test_symlink_swapped_between_walk_and_open_cannot_escape(
    sandbox: Path, openat2: bool | None
) -> None:
    """A thread atomically exchanges ``sw`` between a real directory and a symlink to the outside while
    the client walks into it and opens, creates, changes and reads; nothing may touch the outside."""
    root = sandbox / "export"
    (root / "sw").mkdir()
    (root / "sw" / "secret").write_bytes(b"inside\n")
    (root / "sw_link").symlink_to(sandbox / "outside")
    outside_before = snapshot_tree(sandbox / "outside")
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            _exchange(root / "sw", root / "sw_link")
            swaps += 1

    server = await serve_tcp(Export(root, use_openat2=openat2), "127.0.0.1", 0)
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    seen: set[bytes] = set()
    try:
        async with await Client.connect(*server.address) as client:
            deadline = time.monotonic() + 20
            for i in range(400):
                if time.monotonic() > deadline:
                    break
                try:
                    seen.add(await client.read_file(("sw", "secret")))
                except OSError:
                    pass
                try:
                    fid, _ = await client.walk("sw")
                except OSError:
                    continue
                for msg in (
                    Tlcreate(0, fid, f"new{i}", OpenFlag.WRONLY, 0o644, 0),
                    Tmkdir(0, fid, f"dir{i}", 0o755, 0),
                    Tsymlink(0, fid, f"ln{i}", "/", 0),
                ):
                    await client.request(msg)
                await client.request(Trenameat(0, fid, "secret", fid, "secret"))
                await client.clunk(fid)
                try:
                    sfid, _ = await client.walk(("sw", "secret"))
                except OSError:
                    continue
                await client.request(Tsetattr(0, sfid, 1 | 8, 0o600, 0, 0, 0, 0, 0, 0, 0))
                await client.clunk(sfid)
    finally:
        stop.set()
        thread.join()
        await server.aclose()
    assert swaps > 50
    assert seen and seen <= {b"inside\n", b""}  # the inside file was reached, the outside one never
    assert snapshot_tree(sandbox / "outside") == outside_before


# ---------------------------------------------------------------------------- single-file exports
@pytest.fixture
async def file_server(sandbox: Path) -> AsyncIterator[TCPServer]:
    (sandbox / "export" / "sibling").write_bytes(b"do not show\n")
    async with await serve_tcp(sandbox / "export" / "a.txt", "127.0.0.1", 0) as srv:
        yield srv


async def test_file_export_shows_only_that_file(file_server: TCPServer, sandbox: Path) -> None:
    before = snapshot_tree(sandbox)
    async with await Client.connect(*file_server.address) as client:
        names = sorted(e.name for e in await client.listdir())
        assert names == [".", "..", "a.txt"]
        root = await client.stat("")
        assert stat.S_ISDIR(root.mode)
        assert await client.read_file("a.txt") == b"hello\n"
        assert await client.read_file(("..", "a.txt")) == b"hello\n"
        for sibling in ("sibling", "sub", "esc_abs", ("..", "sibling"), ("a.txt", "x")):
            with pytest.raises(RemoteError):
                await client.walk(sibling)
        r = client.root
        fid, _ = await client.walk("a.txt")
        for msg in (
            Tlcreate(0, r, "new", OpenFlag.WRONLY, 0o644, 0),
            Tmkdir(0, r, "d", 0o755, 0),
            Tsymlink(0, r, "l", "/", 0),
            Trenameat(0, r, "a.txt", r, "b.txt"),
            Tlink(0, r, fid, "hard"),
        ):
            assert await errno_of(client, msg) == errno.EACCES, msg
        with pytest.raises(RemoteError) as info:
            await client.unlink("a.txt")
        assert info.value.errno == errno.EACCES
    assert snapshot_tree(sandbox) == before


async def test_file_export_writes_through_and_honours_ro(file_server: TCPServer, sandbox: Path) -> None:
    async with await Client.connect(*file_server.address) as client:
        fid, _ = await client.walk("a.txt")
        await client.lopen(fid, OpenFlag.RDWR)
        assert await client.write(fid, 0, b"HELLO") == 5
        await client.clunk(fid)
    assert (sandbox / "export" / "a.txt").read_bytes() == b"HELLO\n"
    async with (
        await serve_tcp(sandbox / "export" / "a.txt", "127.0.0.1", 0, read_only=True) as ro,
        await Client.connect(*ro.address) as client,
    ):
        fid, _ = await client.walk("a.txt")
        assert await errno_of(client, Tlopen(0, fid, OpenFlag.WRONLY)) == errno.EROFS
        assert await client.read_file("a.txt") == b"HELLO\n"


async def test_file_export_never_shows_a_directory_swapped_in_for_the_file(
    file_server: TCPServer, sandbox: Path
) -> None:
    target = sandbox / "export" / "a.txt"
    target.unlink()
    target.mkdir()
    (target / "inner").write_bytes(b"must stay hidden\n")
    async with await Client.connect(*file_server.address) as client:
        assert sorted(e.name for e in await client.listdir()) == [".", ".."]
        for path in ("a.txt", ("a.txt", "inner")):
            with pytest.raises(RemoteError) as info:
                await client.walk(path)
            assert info.value.errno == errno.ENOENT
