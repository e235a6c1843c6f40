"""A userspace mount of a 9P2000.L export: FUSE operations translated to 9P client calls.

This is what the pod mounts where its kernel has no 9P client. libfuse3 (driven through ``mfusepy``)
runs its loop in a thread of its own and calls :class:`NinePFuse` from its worker threads; each call
runs as a coroutine on the asyncio loop that owns the 9P connection and is waited for with a deadline,
so a lost or stuck connection fails the system call with EIO instead of hanging it.

Fids are named by paths: when the connection is replaced (a new one comes from ``connect`` after the
old one was lost), every open file is walked to and opened again on its next use. Nothing here may be
called on the loop thread itself while a mount is live: a system call on the mount from that thread
would wait for the loop it blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from .client import Client, split_path
from .constants import DEFAULT_MAX_MSIZE, OpenFlag, QidType, SetattrMask
from .errors import NinePError
from .export import SYNTHETIC_ROOT_INO
from .messages import Buffer, Qid, Rfsync, Rgetattr, Rlink, Tfsync, Tlink
from .streams import ByteReader, ByteWriter

log = logging.getLogger(__name__)

T = TypeVar("T")
Path = tuple[str, ...]
Connect = Callable[[], Awaitable[tuple[ByteReader, ByteWriter]]]

OP_TIMEOUT = 60.0  # the longest one FUSE call may wait, reconnecting included
READY_TIMEOUT = 30.0
CACHE_TIMEOUT = 1.0  # seconds the kernel may cache names and attributes
SUBTYPE = "cornus9p"  # the mount shows as type fuse.cornus9p
MAX_THREADS = 16  # libfuse worker threads, each waiting on one 9P call at a time
UTIME_NOW = (1 << 30) - 1  # the nanoseconds libfuse passes for "now" and "leave unchanged"
UTIME_OMIT = (1 << 30) - 2
NS = 1_000_000_000

# Host open(2) flags -> 9P2000.L flags (equal on x86, not on every architecture). Flags the export
# ignores (APPEND, NONBLOCK, ...) are not passed; the kernel hands FUSE explicit offsets.
_OPEN_FLAGS = (
    (os.O_CREAT, OpenFlag.CREATE),
    (os.O_EXCL, OpenFlag.EXCL),
    (os.O_TRUNC, OpenFlag.TRUNC),
    (os.O_DIRECTORY, OpenFlag.DIRECTORY),
    (os.O_DSYNC, OpenFlag.DSYNC),
)
_REOPEN_DROPS = OpenFlag.CREATE | OpenFlag.EXCL | OpenFlag.TRUNC


def ninep_open_flags(flags: int) -> int:
    """The 9P2000.L flags for host ``open(2)`` flags."""
    out = flags & os.O_ACCMODE
    for host, p9 in _OPEN_FLAGS:
        if flags & host:
            out |= p9
    if flags & os.O_SYNC == os.O_SYNC:
        out |= OpenFlag.SYNC
    return out


def is_single_file_root(qid: Qid) -> bool:
    """Whether an attach root is the synthetic directory of a single-file export."""
    return bool(qid.type & QidType.DIR) and qid.path == SYNTHETIC_ROOT_INO


def fuse_unavailable() -> str | None:
    """Why a FUSE mount cannot work here, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist"
    try:
        import mfusepy  # noqa: F401  (loads libfuse)
    except ImportError:
        return "the mfusepy package is not installed"
    except OSError as exc:
        return f"libfuse cannot be loaded: {exc}"
    return None


def _eio(why: str) -> OSError:
    return OSError(errno.EIO, f"{os.strerror(errno.EIO)}: {why}")


class _Watched:
    """A reader that remembers when its stream ended, so a lost connection is noticed before use."""

    def __init__(self, reader: ByteReader) -> None:
        self._reader = reader
        self.ended = False

    async def read(self, n: int = -1, /) -> bytes:
        try:
            data = await self._reader.read(n)
        except BaseException:
            self.ended = True
            raise
        if not data:
            self.ended = True
        return data


class _SharedDrain:
    """A writer whose ``drain()`` many pipelined requests may await at once (a mux stream allows one)."""

    def __init__(self, writer: ByteWriter) -> None:
        self._writer = writer
        self._lock = asyncio.Lock()

    def write(self, data: Buffer, /) -> None:
        self._writer.write(data)

    async def drain(self) -> None:
        async with self._lock:
            await self._writer.drain()

    def close(self) -> None:
        self._writer.close()

    async def wait_closed(self) -> None:
        await self._writer.wait_closed()


@dataclass(frozen=True)
class Connection:
    """One live 9P session; ``generation`` counts the connections of a :class:`Remote`."""

    client: Client
    generation: int
    root: Qid
    reader: _Watched


class Remote:
    """The 9P connection behind a mount, on the asyncio loop that runs it; replaced after a loss.

    ``connect`` opens a fresh byte stream to the export. :meth:`call` runs an operation from any other
    thread with a deadline; :meth:`connection` is the loop-side way in.
    """

    def __init__(self, connect: Connect, *, msize: int = DEFAULT_MAX_MSIZE, timeout: float = OP_TIMEOUT) -> None:
        self._connect = connect
        self.msize = msize
        self.timeout = timeout
        self._current: Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.generation = 0

    @property
    def connected(self) -> bool:
        return self._current is not None and not self._current.reader.ended

    async def connection(self) -> Connection:
        """The live connection, opening a new one when there is none (or it was lost)."""
        current = self._current
        if current is not None and not current.reader.ended:
            return current
        if self._lock is None:
            self._loop, self._lock = asyncio.get_running_loop(), asyncio.Lock()
        async with self._lock:
            current = self._current
            if current is not None and not current.reader.ended:
                return current
            if self._closed:
                raise _eio("the mount is closing")
            self._current = None
            if current is not None:
                await current.client.close()
            reader, writer = await self._connect()
            watched = _Watched(reader)
            client = Client(watched, _SharedDrain(writer))
            try:
                await client.start(self.msize)
                root = await client.attach()
                if self._closed:
                    raise _eio("the mount is closing")
            except BaseException:
                await client.close()
                raise
            self.generation += 1
            self._current = Connection(client, self.generation, root, watched)
            if self.generation > 1:
                log.info("9P connection %d established", self.generation)
            return self._current

    @property
    def current(self) -> Connection | None:
        """The live connection, if there is one (without opening one)."""
        return self._current if self.connected else None

    async def run(self, op: Callable[[Connection], Awaitable[T]], *, idempotent: bool = True) -> T:
        """Run ``op`` on the live connection; every error comes out as ``OSError`` with the errno to
        report: the server's own, or EIO when the connection is missing, lost or broken.

        An ``idempotent`` op that meets a lost connection runs once more on a new one: the loss may
        only have been noticed when the op was sent. Any other op fails with EIO, since it may have
        taken effect before the answer was lost.
        """
        for attempt in (1, 2):
            try:
                conn = await self.connection()
            except Exception as exc:
                raise _eio(f"no 9P connection: {exc}") from None
            try:
                return await op(conn)
            except ConnectionError as exc:  # the stream or the session behind it died
                if not conn.reader.ended:
                    log.warning("9P connection %d lost: %s", conn.generation, exc)
                conn.reader.ended = True  # the next call opens a new connection
                if not idempotent or attempt == 2:
                    raise _eio(f"9P connection lost: {exc}") from None
            except OSError as exc:
                if exc.errno:
                    raise
                raise _eio(str(exc)) from None
            except NinePError as exc:  # a malformed reply: this connection cannot be trusted any more
                conn.reader.ended = True
                raise _eio(str(exc)) from None
        raise AssertionError("unreachable")

    def call(self, op: Callable[[Connection], Awaitable[T]], *, idempotent: bool = True) -> T:
        """:meth:`run` from another thread, bounded by ``timeout`` seconds."""
        return self.wait(self.run(op, idempotent=idempotent))

    def wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the connection's loop from another thread; EIO after ``timeout`` seconds."""
        loop = self._loop
        if loop is None:
            coro.close()
            raise _eio("the 9P connection was never opened")
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:
            coro.close()
            raise _eio("the event loop behind the mount has stopped") from None
        try:
            return future.result(self.timeout)
        except TimeoutError:
            future.cancel()
            raise _eio(f"no 9P answer within {self.timeout:.0f} s") from None
        except OSError:
            raise
        except Exception as exc:  # cancelled as the loop shut down
            raise _eio(f"9P call abandoned: {exc!r}") from None

    async def close(self) -> None:
        """Close the connection; later calls fail with EIO."""
        self._closed = True
        current, self._current = self._current, None
        if current is not None:
            await current.client.close()


@dataclass
class _Handle:
    """An open file: its fid on connection ``generation``, and how to open it again on a new one."""

    path: Path
    flags: int
    fid: int
    generation: int


def _stat(r: Rgetattr) -> dict[str, int]:
    return {
        "st_mode": r.mode, "st_ino": r.qid.path, "st_nlink": r.nlink, "st_uid": r.uid, "st_gid": r.gid,
        "st_rdev": r.rdev, "st_size": r.size, "st_blksize": r.blksize, "st_blocks": r.blocks,
        "st_atime": r.atime_sec * NS + r.atime_nsec, "st_mtime": r.mtime_sec * NS + r.mtime_nsec,
        "st_ctime": r.ctime_sec * NS + r.ctime_nsec,
    }  # fmt: skip


def _time(ns: int, set_bit: int, now_bit: int) -> tuple[int, tuple[int, int]]:
    """Setattr bits and (seconds, nanoseconds) for one utimens time."""
    if ns == UTIME_OMIT:
        return 0, (0, 0)
    if ns == UTIME_NOW:
        return now_bit, (0, 0)
    sec, nsec = divmod(ns, NS)
    return now_bit | set_bit, (sec, nsec)


class NinePFuse:
    """FUSE operations (mfusepy's path-based interface) over a :class:`Remote`.

    ``root`` is the 9P path shown as the mount's root: empty for a directory export, the file's name
    for a single-file export (the mount point is then that file itself).
    """

    use_ns = True  # mfusepy passes and takes times in nanoseconds

    def __init__(self, remote: Remote, root: Path = (), *, on_init: Callable[[], None] | None = None) -> None:
        self.remote = remote
        self.root = root
        self.on_init = on_init
        self._handles: dict[int, _Handle] = {}
        self._fhs = itertools.count(1)

    # ------------------------------------------------------------------ plumbing
    def _path(self, path: str | None) -> Path:
        return self.root + split_path(path or "")

    async def _fid(self, conn: Connection, fh: int, path: Path | None) -> int:
        """The fid of open file ``fh`` on ``conn``, walking to it and opening it again after a reconnect."""
        handle = self._handles.get(fh)
        if handle is None:
            raise OSError(errno.EBADF, f"file handle {fh} is not open")
        if handle.generation == conn.generation:
            return handle.fid
        where = path if path is not None else handle.path
        fid, _ = await conn.client.walk(where)
        try:
            await conn.client.lopen(fid, handle.flags & ~_REOPEN_DROPS)
        except BaseException:
            await conn.client.clunk(fid)
            raise
        if handle.generation == conn.generation:  # another call re-opened it meanwhile
            await conn.client.clunk(fid)
            return handle.fid
        handle.fid, handle.generation, handle.path = fid, conn.generation, where
        return fid

    async def _setattr(self, conn: Connection, path: Path, fh: int | None, valid: int, **values: Any) -> None:
        if fh:
            await conn.client.setattr(await self._fid(conn, fh, path), valid, **values)
            return
        fid, _ = await conn.client.walk(path)
        try:
            await conn.client.setattr(fid, valid, **values)
        finally:
            await conn.client.clunk(fid)

    # ------------------------------------------------------------------ lifecycle
    def init(self, path: str) -> None:
        if self.on_init is not None:
            self.on_init()

    # ------------------------------------------------------------------ reading
    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        p = self._path(path)

        async def op(conn: Connection) -> Rgetattr:
            if fh:
                return await conn.client.getattr(await self._fid(conn, fh, p))
            return await conn.client.stat(p)

        return _stat(self.remote.call(op))

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        p = self._path(path)

        async def op(conn: Connection) -> list[tuple[str, dict[str, int], int]]:
            entries = await conn.client.listdir(p)
            return [(e.name, {"st_mode": e.type << 12, "st_ino": e.qid.path}, 0) for e in entries]

        return self.remote.call(op)

    def readlink(self, path: str) -> str:
        p = self._path(path)

        async def op(conn: Connection) -> str:
            return await conn.client.readlink(p)

        return self.remote.call(op)

    def statfs(self, path: str) -> dict[str, int]:
        p = self._path(path)

        async def op(conn: Connection) -> dict[str, int]:
            r = await conn.client.statvfs(p)
            return {"f_bsize": r.bsize, "f_frsize": r.bsize, "f_blocks": r.blocks, "f_bfree": r.bfree,
                    "f_bavail": r.bavail, "f_files": r.files, "f_ffree": r.ffree, "f_namemax": r.namelen}  # fmt: skip

        return self.remote.call(op)

    # ------------------------------------------------------------------ open files
    def open(self, path: str, flags: int) -> int:
        p, p9 = self._path(path), ninep_open_flags(flags)

        async def op(conn: Connection) -> int:
            fid, _ = await conn.client.walk(p)
            try:
                await conn.client.lopen(fid, p9)
            except BaseException:
                await conn.client.clunk(fid)
                raise
            fh = next(self._fhs)
            self._handles[fh] = _Handle(p, p9, fid, conn.generation)
            return fh

        return self.remote.call(op)

    def create(self, path: str, mode: int, flags: int) -> int:
        p, p9 = self._path(path), ninep_open_flags(flags) | OpenFlag.CREATE
        if not p:
            raise OSError(errno.EEXIST, "the mount root exists")

        async def op(conn: Connection) -> int:
            fid, _ = await conn.client.walk(p[:-1])
            try:
                await conn.client.lcreate(fid, p[-1], p9, mode & 0o7777)
            except BaseException:
                await conn.client.clunk(fid)
                raise
            fh = next(self._fhs)  # after Tlcreate the fid is the new file, open
            self._handles[fh] = _Handle(p, p9, fid, conn.generation)
            return fh

        return self.remote.call(op, idempotent=False)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        p = None if path is None else self._path(path)

        async def op(conn: Connection) -> bytes:
            fid = await self._fid(conn, fh, p)
            step = conn.client.iounit
            parts = await asyncio.gather(
                *(conn.client.read(fid, offset + at, min(step, size - at)) for at in range(0, size, step))
            )
            out = bytearray()
            for part in parts:  # a short part is the end of the file
                out += part
                if len(part) < step:
                    break
            return bytes(out)

        return self.remote.call(op)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        p = None if path is None else self._path(path)
        view = memoryview(data)

        async def op(conn: Connection) -> int:
            fid = await self._fid(conn, fh, p)
            step = conn.client.iounit
            counts = await asyncio.gather(
                *(conn.client.write(fid, offset + at, view[at : at + step]) for at in range(0, len(view), step))
            )
            done = 0
            for at, count in zip(range(0, len(view), step), counts, strict=True):
                done += count
                if count < len(view[at : at + step]):
                    break
            return done

        return self.remote.call(op)

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        p = None if path is None else self._path(path)

        async def op(conn: Connection) -> None:
            await conn.client.call(Tfsync(0, await self._fid(conn, fh, p), int(bool(datasync))), Rfsync)

        self.remote.call(op)
        return 0

    def release(self, path: str | None, fh: int) -> int:
        async def close() -> None:
            handle = self._handles.pop(fh, None)
            conn = self.remote.current  # a fid of a lost connection is gone already: never redial for it
            if handle is not None and conn is not None and handle.generation == conn.generation:
                with contextlib.suppress(OSError, NinePError):
                    await conn.client.clunk(handle.fid)

        with contextlib.suppress(OSError):
            self.remote.wait(close())
        return 0

    # ------------------------------------------------------------------ changes
    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        p = self._path(path)

        async def op(conn: Connection) -> None:
            await self._setattr(conn, p, fh, SetattrMask.SIZE, size=length)

        self.remote.call(op)
        return 0

    def chmod(self, path: str | None, mode: int) -> int:
        p = self._path(path)

        async def op(conn: Connection) -> None:
            await self._setattr(conn, p, None, SetattrMask.MODE, mode=mode & 0o7777)

        self.remote.call(op)
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        p = self._path(path)
        valid = (SetattrMask.UID if uid != -1 else 0) | (SetattrMask.GID if gid != -1 else 0)
        if not valid:
            return 0

        async def op(conn: Connection) -> None:
            await self._setattr(conn, p, None, valid, uid=max(uid, 0), gid=max(gid, 0))

        self.remote.call(op)
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        p = self._path(path)
        atime_ns, mtime_ns = times if times is not None else (UTIME_NOW, UTIME_NOW)
        a_bits, atime = _time(atime_ns, SetattrMask.ATIME_SET, SetattrMask.ATIME)
        m_bits, mtime = _time(mtime_ns, SetattrMask.MTIME_SET, SetattrMask.MTIME)
        if not a_bits | m_bits:
            return 0

        async def op(conn: Connection) -> None:
            await self._setattr(conn, p, None, a_bits | m_bits, atime=atime, mtime=mtime)

        self.remote.call(op)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        p = self._path(path)

        async def op(conn: Connection) -> None:
            await conn.client.mkdir(p, mode & 0o7777)

        self.remote.call(op, idempotent=False)
        return 0

    def unlink(self, path: str) -> int:
        p = self._path(path)

        async def op(conn: Connection) -> None:
            await conn.client.unlink(p)

        self.remote.call(op, idempotent=False)
        return 0

    def rmdir(self, path: str) -> int:
        p = self._path(path)

        async def op(conn: Connection) -> None:
            await conn.client.unlink(p, directory=True)

        self.remote.call(op, idempotent=False)
        return 0

    def rename(self, old: str, new: str) -> int:
        src, dst = self._path(old), self._path(new)

        async def op(conn: Connection) -> None:
            await conn.client.rename(src, dst)

        self.remote.call(op, idempotent=False)
        return 0

    def symlink(self, target: str, source: str) -> int:
        """Create the symlink ``target`` (a path in the mount) holding ``source``."""
        p = self._path(target)

        async def op(conn: Connection) -> None:
            await conn.client.symlink(p, source)

        self.remote.call(op, idempotent=False)
        return 0

    def link(self, target: str, source: str) -> int:
        """Create the hard link ``target`` to the existing ``source`` (both paths in the mount)."""
        new, old = self._path(target), self._path(source)

        async def op(conn: Connection) -> None:
            fid, _ = await conn.client.walk(old)
            try:
                dfid, _ = await conn.client.walk(new[:-1])
                try:
                    await conn.client.call(Tlink(0, dfid, fid, new[-1]), Rlink)
                finally:
                    await conn.client.clunk(dfid)
            finally:
                await conn.client.clunk(fid)

        self.remote.call(op, idempotent=False)
        return 0


class FuseMount:
    """libfuse serving ``ops`` at ``target`` from a thread of its own.

    :meth:`start` returns once the kernel has initialised the mount. Unmounting is the caller's job
    (``umount2``); the thread ends when the kernel ends the FUSE connection.
    """

    def __init__(self, ops: NinePFuse, target: str, *, read_only: bool = False, fsname: str = "cornus",
                 cache_timeout: float = CACHE_TIMEOUT) -> None:  # fmt: skip
        self.ops = ops
        self.target = target
        self.options: dict[str, Any] = {
            "fsname": fsname, "subtype": SUBTYPE, "default_permissions": True, "allow_other": True,
            "use_ino": True, "hard_remove": True, "attr_timeout": cache_timeout,
            "entry_timeout": cache_timeout, "ro": read_only, "max_threads": MAX_THREADS,
            "max_idle_threads": MAX_THREADS,
        }  # fmt: skip
        self._thread: threading.Thread | None = None
        self._ended: asyncio.Future[BaseException | None] | None = None

    async def start(self, timeout: float = READY_TIMEOUT) -> None:
        why = fuse_unavailable()
        if why is not None:
            raise OSError(errno.ENODEV, f"cannot mount {self.target} with FUSE: {why}")
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._ended = ended = loop.create_future()
        self.ops.on_init = lambda: _resolve(loop, ready, None)
        self._thread = threading.Thread(target=self._serve, args=(loop, ended), name=f"fuse {self.target}",
                                        daemon=True)  # fmt: skip
        dispositions = _signal_dispositions()
        self._thread.start()
        await asyncio.wait({ready, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        _restore_dispositions(dispositions)
        if ready.done():
            return
        if ended.done():
            raise OSError(errno.EIO, f"libfuse could not mount {self.target}: {ended.result()!r}")
        raise TimeoutError(f"the FUSE mount at {self.target} was not initialised within {timeout:.0f} s")

    def _serve(self, loop: asyncio.AbstractEventLoop, ended: asyncio.Future[BaseException | None]) -> None:
        import mfusepy

        error: BaseException | None = None
        class Fuse(mfusepy.FUSE):  # type: ignore[misc]
            def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
                # 9P2000.L renames carry no flags (the kernel's own v9fs answers EINVAL as well): passed on
                # as a plain rename, RENAME_NOREPLACE could replace the target.
                if flags:
                    return -errno.EINVAL
                return int(super().rename_fuse_3(old, new, flags))

        try:
            Fuse(self.ops, self.target, foreground=True, **self.options)
        except BaseException as exc:  # reported through `ended`, never lost in the thread
            error = exc
        finally:
            _resolve(loop, ended, error)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def ended(self) -> None:
        """Return when the FUSE loop has ended, for whatever reason (an unmount from outside, too)."""
        if self._ended is not None:
            await asyncio.shield(self._ended)

    async def wait_ended(self, timeout: float) -> bool:
        """Wait for the FUSE loop to end (after the unmount); False if it is still running."""
        if self._ended is None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._ended), timeout)
        return self._ended.done()


# fuse_main() points these at its own handler when they are at their default (SIGTERM would then end the
# mount instead of the process); the process's own dispositions are put back once the mount is up.
_LIBFUSE_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)


def _signal_dispositions() -> dict[signal.Signals, Any]:
    """The Python-level dispositions of the signals libfuse takes; only the main thread may set them."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: handler for sig in _LIBFUSE_SIGNALS if (handler := signal.getsignal(sig)) is not None}


def _restore_dispositions(dispositions: dict[signal.Signals, Any]) -> None:
    for sig, handler in dispositions.items():
        signal.signal(sig, handler)


def _resolve(loop: asyncio.AbstractEventLoop, future: asyncio.Future[T], value: T) -> None:
    """Set ``future`` from any thread, once; a closed loop has nobody left to tell."""

    def settle() -> None:
        if not future.done():
            future.set_result(value)

    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(settle)
