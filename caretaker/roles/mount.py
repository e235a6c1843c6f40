"""The mount role: each client-local mount of the session appears at its target in the pod.

The caller serves each mount over 9P2000.L; the role reaches it through the server on an ``M`` stream
(header ``name``). Where the kernel has a 9P client, v9fs mounts one end of a socketpair whose other
end is spliced to the stream (``trans=fd``); otherwise a FUSE filesystem runs our 9P client in this
process (:mod:`cornus_core.ninep.fuse`). A single-file export is mounted onto the target file itself.

:meth:`MountRole.start` returns once every mount is live (the workload starts after it);
:meth:`MountRole.aclose` unmounts them all, lazily where something still holds them, and leaves no
stale mount behind. When the server connection drops and the link redials, the mounts come back: the
FUSE side opens a new stream on its next operation (open files are walked to again), a kernel mount is
replaced by a fresh one. Operations in flight on a lost connection fail with EIO.

Nothing on the caretaker's event loop may touch a mounted path: the loop carries the mount's traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from typing import Literal, Protocol

from cornus_core.mountinfo import mount_points
from cornus_core.ninep import Client, NinePError
from cornus_core.ninep.constants import DEFAULT_MAX_MSIZE
from cornus_core.ninep.fuse import (
    OP_TIMEOUT,
    FuseMount,
    NinePFuse,
    Remote,
    fuse_unavailable,
    is_single_file_root,
)
from cornus_core.ninep.streams import ByteReader, ByteWriter
from cornus_core.streams import TAG_MOUNT
from cornus_core.wire import MuxStream, SpliceResult, WireError, splice, write_header

from ..config import MountConfig
from ..link import LinkDown, ServerLink
from ..telemetry import Telemetry

log = logging.getLogger(__name__)

Mechanism = Literal["kernel", "fuse"]
MOUNT_TIMEOUT = 30.0  # one mount, from opening its stream to live at the target
FUSE_END_TIMEOUT = 5.0  # after the unmount, how long the FUSE loop may take to notice
LAZY_END_WAIT = 0.5  # after a lazy unmount, how long to wait for the last user before aborting
RESTORE_BACKOFF = (0.2, 5.0)
MS_RDONLY, MS_REMOUNT, MS_BIND, MNT_DETACH = 0x1, 0x20, 0x1000, 0x2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

REMOUNT_BACKOFF_START = 0.5
REMOUNT_BACKOFF_MAX = 30.0


class MountError(Exception):
    """A mount could not be made live; the message names the mount and its target."""


# ---------------------------------------------------------------------- the mount table
def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(source.encode(), os.fsencode(target), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:  # fmt: skip
        code = ctypes.get_errno()
        raise OSError(code, f"mount {source} on {target}: {os.strerror(code)}")


def _umount(target: str, flags: int = 0) -> None:
    if _libc.umount2(os.fsencode(target), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"umount {target}: {os.strerror(code)}")


def is_mounted(path: str) -> bool:
    return os.path.realpath(path) in mount_points()


def unmount(target: str) -> bool:
    """Unmount everything stacked on ``target``; lazily (detached) where it is busy. True if lazy.

    Blocking: run it off the event loop.
    """
    lazy = False
    path = os.path.realpath(target)
    for _ in range(mount_points().count(path)):
        try:
            _umount(path)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # not a mount point (any more)
                break
            if exc.errno != errno.EBUSY:
                raise
            _umount(path, MNT_DETACH)  # still in use: detach now, the kernel frees it when let go
            lazy = True
    return lazy


def kernel_has_9p() -> bool:
    """Whether the kernel can mount 9P, loading the module if needed. Blocking."""

    def listed() -> bool:
        try:
            with open("/proc/filesystems") as filesystems:
                return any(line.split()[-1:] == ["9p"] for line in filesystems)
        except OSError:
            return False

    if listed():
        return True
    modprobe = shutil.which("modprobe")
    if modprobe is None:
        return False
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([modprobe, "-q", "9p"], check=False, timeout=10, capture_output=True)
    return listed()


def choose_mechanism() -> Mechanism:
    """v9fs where the kernel has it, else FUSE; MountError when neither works here. Blocking."""
    if kernel_has_9p():
        return "kernel"
    why = fuse_unavailable()
    if why is None:
        return "fuse"
    raise MountError(f"cannot mount client-local directories here: the kernel has no 9P client and {why}")


def prepare_target(target: str, *, file: bool) -> None:
    """Make the mount point exist with the right kind: a directory, or a file for a single-file mount."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
        if file:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        else:
            os.mkdir(target, 0o755)
        return
    if file and stat.S_ISDIR(st.st_mode):
        raise MountError(f"target {target} is a directory, but the mount is a single file")
    if not file and not stat.S_ISDIR(st.st_mode):
        raise MountError(f"target {target} exists and is not a directory")


# ---------------------------------------------------------------------- one mount
async def open_mount_stream(link: ServerLink, name: str) -> MuxStream:
    """A new stream on the server link that carries raw 9P to the caller's export ``name``."""
    stream = await link.open_stream()
    await write_header(stream, TAG_MOUNT, {"name": name})
    return stream


async def single_file_name(client: Client) -> str | None:
    """The file's name when the attached export is a single file, else None."""
    root = await client.stat(())
    if not is_single_file_root(root.qid):
        return None
    names = [e.name for e in await client.listdir(()) if e.name not in (".", "..")]
    if len(names) != 1:
        raise MountError(f"a single-file export lists {len(names)} entries")
    return names[0]


async def bridge_to_export(link: ServerLink, name: str, *, msize: int = DEFAULT_MAX_MSIZE
                           ) -> tuple[socket.socket, asyncio.Task[SpliceResult]]:  # fmt: skip
    """One end of a socketpair, its other end spliced to a new M stream: how the kernel's v9fs
    (``trans=fd``) reaches the caller's export. The splice ends when either side closes."""
    stream = await open_mount_stream(link, name)
    ours, theirs = socket.socketpair()
    try:
        reader, writer = await asyncio.open_connection(sock=ours, limit=2 * msize)
    except BaseException:
        ours.close()
        theirs.close()
        stream.reset()
        raise
    return theirs, asyncio.create_task(splice(stream, (reader, writer)))


class _Mount(Protocol):
    config: MountConfig

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


class _FuseBacked:
    """A FUSE filesystem in this process over a :class:`Remote` that opens M streams on demand."""

    def __init__(self, config: MountConfig, link: ServerLink, *, msize: int, timeout: float) -> None:
        self.config = config
        self.link = link
        self.remote = Remote(self._connect, msize=msize, timeout=timeout)
        self.fuse: FuseMount | None = None
        self.device = -1
        self._closing = False
        self._supervisor: asyncio.Task[None] | None = None

    async def _connect(self) -> tuple[ByteReader, ByteWriter]:
        if self.fuse is not None:
            log.info("mount %s: reconnecting to the caller's export", self.config.name)
        stream = await open_mount_stream(self.link, self.config.name)
        return stream, stream

    async def start(self) -> None:
        await self._mount()
        self._supervisor = asyncio.create_task(self._remount_when_ended())

    async def _mount(self) -> None:
        conn = await self.remote.connection()
        single = await single_file_name(conn.client)
        target = self.config.target
        await asyncio.to_thread(prepare_target, target, file=single is not None)
        ops = NinePFuse(self.remote, (single,) if single else ())
        self.fuse = FuseMount(ops, target, read_only=self.config.read_only, fsname=f"cornus:{self.config.name}")
        await self.fuse.start()
        self.device = (await asyncio.to_thread(os.stat, target)).st_dev

    async def _remount_when_ended(self) -> None:
        """The mount's supervisor: a FUSE mount that ends while the session lives (unmounted from
        outside, its loop gone) is mounted again, with capped exponential backoff."""
        delay = REMOUNT_BACKOFF_START
        while True:
            assert self.fuse is not None
            await self.fuse.ended()
            if self._closing:
                return
            log.warning("mount %s: the mount at %s ended; mounting it again in %.1f s",
                        self.config.name, self.config.target, delay)
            await asyncio.sleep(delay)
            try:
                await asyncio.wait_for(self._mount(), MOUNT_TIMEOUT)
            except (OSError, TimeoutError, LinkDown, MountError, NinePError, WireError) as exc:
                log.error("mount %s: mounting again failed: %s", self.config.name, _describe(exc))
                delay = min(delay * 2, REMOUNT_BACKOFF_MAX)
                continue
            log.warning("mount %s: live again at %s", self.config.name, self.config.target)
            delay = REMOUNT_BACKOFF_START

    async def aclose(self) -> None:
        self._closing = True
        if self._supervisor is not None:
            self._supervisor.cancel()
        lazy = False
        try:
            if self.fuse is not None:
                lazy = await asyncio.to_thread(unmount, self.config.target)
            if lazy:
                log.warning("mount %s: %s was busy; detached it lazily", self.config.name, self.config.target)
        finally:
            await self.remote.close()  # whatever still holds a detached mount gets EIO from now on
        if self.fuse is None or await self.fuse.wait_ended(LAZY_END_WAIT if lazy else FUSE_END_TIMEOUT):
            return
        if self.device >= 0 and _abort_fuse(self.device):
            await self.fuse.wait_ended(FUSE_END_TIMEOUT)
        else:  # no fusectl here: the detached connection ends when its last user lets go
            log.info("mount %s: the detached FUSE connection ends with its last user", self.config.name)


def _abort_fuse(device: int) -> bool:
    """End a detached FUSE connection that something still holds (its users get ENOTCONN)."""
    path = f"/sys/fs/fuse/connections/{os.minor(device)}/abort"
    try:
        with open(path, "w") as abort:
            abort.write("1")
    except OSError:
        return False
    return True


def v9fs_options(rfd: int, wfd: int, msize: int) -> str:
    """The kernel's 9P mount options over file descriptors ``rfd``/``wfd`` of the mounting process."""
    return f"trans=fd,rfdno={rfd},wfdno={wfd},version=9p2000.L,msize={msize},cache=none,access=client"


class _KernelBacked:
    """v9fs over ``trans=fd``: the kernel's end of a socketpair; ours is spliced to an M stream.

    The kernel cannot move a mount to a new connection, so after a loss the mount is replaced.
    """

    def __init__(self, config: MountConfig, link: ServerLink, *, msize: int) -> None:
        self.config = config
        self.link = link
        self.msize = msize
        self.single: str | None = None
        self._splice: asyncio.Task[SpliceResult] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closing = False

    async def start(self) -> None:
        stream = await open_mount_stream(self.link, self.config.name)
        client = Client(stream, stream)
        try:
            await client.start(self.msize)
            await client.attach()
            self.single = await single_file_name(client)
        finally:
            await client.close()
        await asyncio.to_thread(prepare_target, self.config.target, file=self.single is not None)
        await self._mount()
        self._watch = asyncio.create_task(self._restore_when_lost())

    async def _mount(self) -> None:
        theirs, self._splice = await bridge_to_export(self.link, self.config.name, msize=self.msize)
        flags = MS_RDONLY if self.config.read_only else 0
        options = v9fs_options(theirs.fileno(), theirs.fileno(), self.msize)
        source = f"cornus:{self.config.name}"
        try:
            if self.single is None:
                await asyncio.to_thread(_mount, source, self.config.target, "9p", flags, options)
                return
            staging = tempfile.mkdtemp(prefix="cornus-9p-")
            try:  # mount the synthetic root privately, bind its one file onto the target, drop the rest
                await asyncio.to_thread(_mount, source, staging, "9p", flags, options)
                try:
                    file = os.path.join(staging, self.single)
                    await asyncio.to_thread(_mount, file, self.config.target, None, MS_BIND)
                    if flags:
                        await asyncio.to_thread(_mount, file, self.config.target, None,
                                                MS_BIND | MS_REMOUNT | MS_RDONLY)  # fmt: skip
                finally:
                    await asyncio.to_thread(_umount, staging, MNT_DETACH)
            finally:
                os.rmdir(staging)
        except BaseException:
            if self._splice is not None:
                self._splice.cancel()
            raise
        finally:
            theirs.close()  # the kernel holds its own reference now

    async def _restore_when_lost(self) -> None:
        delay = RESTORE_BACKOFF[0]
        while not self._closing:
            assert self._splice is not None
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._splice)
            if self._closing:
                return
            log.warning("mount %s: the connection to the caller was lost; remounting %s",
                        self.config.name, self.config.target)  # fmt: skip
            while not self._closing:
                try:
                    await asyncio.to_thread(unmount, self.config.target)
                    await self._mount()
                    delay = RESTORE_BACKOFF[0]
                    break
                except Exception as exc:  # keep trying until the link is back or the role closes
                    log.warning("mount %s: remount failed: %s; retrying in %.1f s", self.config.name, exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RESTORE_BACKOFF[1])

    async def aclose(self) -> None:
        self._closing = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        try:
            if await asyncio.to_thread(unmount, self.config.target):
                log.warning("mount %s: %s was busy; detached it lazily", self.config.name, self.config.target)
        finally:
            if self._splice is not None:
                self._splice.cancel()  # a detached mount's last users get EIO
                with contextlib.suppress(asyncio.CancelledError):
                    await self._splice


# ---------------------------------------------------------------------- the role
class MountRole:
    """Every client-local mount of the session, live at its target.

    ``mechanism`` is chosen at :meth:`start` when None: v9fs where the kernel has 9P, else FUSE.
    """

    def __init__(self, mounts: list[MountConfig], link: ServerLink, telemetry: Telemetry, *,
                 mechanism: Mechanism | None = None, msize: int = DEFAULT_MAX_MSIZE,
                 op_timeout: float = OP_TIMEOUT) -> None:  # fmt: skip
        self.mounts = mounts
        self.link = link
        self.telemetry = telemetry  # per-mount counts are taken where the ops are served: the caller
        self.mechanism = mechanism
        self.msize = msize
        self.op_timeout = op_timeout
        self._live: list[_Mount] = []

    async def start(self) -> None:
        """Mount everything; returns when every mount is live. On failure nothing stays mounted."""
        if not self.mounts:
            return
        if self.mechanism is None:
            self.mechanism = await asyncio.to_thread(choose_mechanism)
        try:
            for config in self.mounts:
                mount = self._new(config)
                self._live.append(mount)  # a half-made mount is undone with the others
                await asyncio.wait_for(mount.start(), MOUNT_TIMEOUT)
                log.info("mount %s live at %s (%s%s)", config.name, config.target, self.mechanism,
                         ", read-only" if config.read_only else "")  # fmt: skip
        except (OSError, LinkDown, MountError, NinePError, WireError) as exc:
            await self.aclose()
            raise MountError(f"mount {config.name} at {config.target}: {_describe(exc)}") from None
        except BaseException:
            await self.aclose()
            raise

    def _new(self, config: MountConfig) -> _Mount:
        if self.mechanism == "kernel":
            return _KernelBacked(config, self.link, msize=self.msize)
        return _FuseBacked(config, self.link, msize=self.msize, timeout=self.op_timeout)

    async def aclose(self) -> None:
        """Unmount everything (lazily where busy); the targets are left as plain directories or files."""
        live, self._live = self._live, []
        for mount in reversed(live):
            try:
                await mount.aclose()
            except Exception as exc:  # one mount's failure must not keep the others mounted
                log.error("mount %s: could not unmount %s: %s", mount.config.name, mount.config.target, exc)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionResetError):  # the server resets a stream for a name it does not serve
        return f"the server refused the mount (is it declared by the session?): {exc}"
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"not live within {MOUNT_TIMEOUT:.0f} s"
    if isinstance(exc, OSError) and exc.strerror:  # without the "[Errno N]" prefix
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__
