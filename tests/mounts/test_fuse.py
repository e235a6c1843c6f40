"""The FUSE layer on its own, against a real 9P server over TCP: bounded waits on a stuck connection,
a fresh connection after a cut, and a process whose signals stay its own."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
from pathlib import Path

from caretaker.roles.mount import unmount
from cornus_core.ninep import serve_tcp
from cornus_core.ninep.fuse import FuseMount, NinePFuse, Remote

from .mount_support import errno_of, needs_fuse

pytestmark = needs_fuse()


class Valve:
    """A TCP relay in front of the 9P server that can hold every byte back (a stuck network) or cut
    every connection (a lost one)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.writers: list[asyncio.StreamWriter] = []
        self.port = 0
        self.connections = 0

    async def start(self) -> Valve:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers += [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(1 << 16):
                    await self.flowing.wait()
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        self.cut()
        self.server.close()


async def test_stuck_connection_fails_with_eio_then_a_cut_one_is_replaced(tmp_path: Path) -> None:
    export, target = tmp_path / "export", tmp_path / "mnt"
    export.mkdir()
    target.mkdir()
    (export / "f").write_text("first\n")
    server = await serve_tcp(export)
    valve = await Valve(server.address).start()
    remote = Remote(lambda: asyncio.open_connection("127.0.0.1", valve.port), timeout=1.0)
    await remote.connection()
    mount = FuseMount(NinePFuse(remote), str(target), cache_timeout=0)
    await mount.start()
    try:
        assert await asyncio.to_thread(os.listdir, target) == ["f"]
        valve.flowing.clear()  # requests go out, no answer comes back
        assert await asyncio.to_thread(errno_of, os.stat, target / "f") == errno.EIO
        valve.cut()
        valve.flowing.set()
        (export / "g").write_text("second\n")
        # the next call notices the cut connection and opens a new one
        assert await asyncio.to_thread((target / "g").read_text) == "second\n"
        assert valve.connections == 2 and remote.generation == 2
    finally:
        await asyncio.to_thread(unmount, str(target))
        await remote.close()
        assert await mount.wait_ended(10)
        await valve.close()
        await server.aclose()


def _caught_signals() -> int:
    """The mask of signals this process has handlers for (SigCgt in /proc/self/status)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))


async def test_mounting_leaves_the_process_signal_handling_alone(tmp_path: Path) -> None:
    # libfuse's fuse_main() takes SIGHUP and SIGTERM when they are at their default: a SIGTERM would then
    # quietly unmount instead of ending the process.
    export, target = tmp_path / "export", tmp_path / "mnt"
    export.mkdir()
    target.mkdir()
    server = await serve_tcp(export)
    remote = Remote(lambda: asyncio.open_connection(*server.address))
    await remote.connection()
    before = _caught_signals()
    mount = FuseMount(NinePFuse(remote), str(target))
    await mount.start()
    try:
        assert _caught_signals() & 0xFFFFFFFF == before & 0xFFFFFFFF  # the classic signals; not glibc's own
    finally:
        await asyncio.to_thread(unmount, str(target))
        await remote.close()
        assert await mount.wait_ended(10)
        await server.aclose()


def _renameat2(src: Path, dst: Path, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


async def test_a_rename_with_flags_is_refused_not_done_plainly(tmp_path: Path) -> None:
    """9P renames carry no flags (the kernel's v9fs refuses them too): RENAME_EXCHANGE done as a plain
    rename would destroy the target, RENAME_NOREPLACE could replace one that appeared meanwhile."""
    export, target = tmp_path / "export", tmp_path / "mnt"
    export.mkdir()
    target.mkdir()
    (export / "a").write_text("a\n")
    (export / "b").write_text("b\n")
    server = await serve_tcp(export)
    remote = Remote(lambda: asyncio.open_connection(*server.address), timeout=5.0)
    await remote.connection()
    mount = FuseMount(NinePFuse(remote), str(target), cache_timeout=0)
    await mount.start()
    try:
        rename_noreplace, rename_exchange = 1, 2
        assert await asyncio.to_thread(errno_of, _renameat2, target / "a", target / "b", rename_exchange) == errno.EINVAL
        assert (export / "a").read_text() == "a\n" and (export / "b").read_text() == "b\n"
        assert await asyncio.to_thread(errno_of, _renameat2, target / "a", target / "c", rename_noreplace) == errno.EINVAL
        assert (export / "a").exists() and not (export / "c").exists()
        await asyncio.to_thread(_renameat2, target / "a", target / "b", 0)
        assert (export / "b").read_text() == "a\n" and not (export / "a").exists()
    finally:
        await asyncio.to_thread(unmount, str(target))
        await remote.close()
        assert await mount.wait_ended(10)
        await server.aclose()
