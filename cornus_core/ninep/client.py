"""An asyncio 9P2000.L client: the raw request/reply layer (for probes and a FUSE adapter) plus
path-level helpers.

Requests are pipelined: each gets a tag, one reader task routes replies back by tag, so many requests
may be in flight on one connection. ``Rlerror`` raises :class:`RemoteError` (an ``OSError``).
A request whose awaiting task is cancelled is flushed (Tflush) and its tag kept until the server is done
with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Sequence
from dataclasses import replace
from types import TracebackType
from typing import TypeVar

from .codec import Decoder, decode_dirents, encode
from .constants import (
    AT_REMOVEDIR,
    DEFAULT_MAX_MSIZE,
    IOHDRSZ,
    MAXWELEM,
    NOFID,
    NONUNAME,
    NOTAG,
    VERSION_9P2000_L,
    GetattrMask,
    OpenFlag,
)
from .errors import NinePError, ProtocolError, RemoteError
from .messages import (
    DirEntry,
    Message,
    Qid,
    Rattach,
    Rclunk,
    Rflush,
    Rgetattr,
    Rlcreate,
    Rlerror,
    Rlopen,
    Rmkdir,
    Rread,
    Rreaddir,
    Rreadlink,
    Rremove,
    Rrenameat,
    Rsetattr,
    Rstatfs,
    Rsymlink,
    Runlinkat,
    Rversion,
    Rwalk,
    Rwrite,
    Tattach,
    Tclunk,
    Tflush,
    Tgetattr,
    Tlcreate,
    Tlopen,
    Tmkdir,
    Tread,
    Treaddir,
    Treadlink,
    Tremove,
    Trenameat,
    Tsetattr,
    Tstatfs,
    Tsymlink,
    Tunlinkat,
    Tversion,
    Twalk,
    Twrite,
)
from .streams import ByteReader, ByteWriter

R = TypeVar("R", bound=Message)


def split_path(path: str | Sequence[str]) -> tuple[str, ...]:
    """``"a/b/c"`` -> ``("a", "b", "c")``; a sequence is taken as the components themselves."""
    if isinstance(path, str):
        return tuple(p for p in path.split("/") if p)
    return tuple(path)


class Client:
    def __init__(self, reader: ByteReader, writer: ByteWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._decoder = Decoder(DEFAULT_MAX_MSIZE)
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._flushing: set[int] = set()
        self._next_tag = 0
        self._next_fid = 1
        self._free_fids: list[int] = []
        self._reader_task: asyncio.Task[None] | None = None
        self._closed: BaseException | None = None
        self.msize = DEFAULT_MAX_MSIZE
        self.root: int = NOFID

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        msize: int = DEFAULT_MAX_MSIZE,
        aname: str = "",
        uname: str = "",
        attach: bool = True,
    ) -> Client:
        """Open a TCP connection, negotiate the version and (by default) attach the root."""
        reader, writer = await asyncio.open_connection(host, port, limit=2 * msize + 65536)
        client = cls(reader, writer)
        try:
            await client.start(msize)
            if attach:
                await client.attach(aname=aname, uname=uname)
        except BaseException:
            await client.close()
            raise
        return client

    async def start(self, msize: int = DEFAULT_MAX_MSIZE) -> Rversion:
        """Start routing replies and negotiate 9P2000.L with at most ``msize``."""
        self._decoder.max_size = msize
        self._reader_task = asyncio.create_task(self._read_loop())
        reply = await self.call(Tversion(NOTAG, msize, VERSION_9P2000_L), Rversion)
        if reply.version != VERSION_9P2000_L:
            raise ProtocolError(f"server does not speak 9P2000.L (answered version {reply.version!r})")
        self.msize = reply.msize
        self._decoder.max_size = reply.msize
        return reply

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self._reader_task
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def iounit(self) -> int:
        """Most payload bytes one Tread or Twrite carries."""
        return self.msize - IOHDRSZ

    # ------------------------------------------------------------------ raw layer
    async def _read_loop(self) -> None:
        error: BaseException = ConnectionResetError("9P server closed the connection")
        try:
            while data := await self._reader.read(self.msize + 4096):
                self._decoder.feed(data)
                for msg in self._decoder:
                    self._dispatch(msg)
        except (NinePError, OSError) as exc:
            error = exc
        finally:
            self._closed = error
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionResetError(f"9P connection lost: {error}"))
            self._pending.clear()

    def _dispatch(self, msg: Message) -> None:
        fut = self._pending.pop(msg.tag, None)
        if fut is None:
            return  # a reply to a request we flushed after it completed
        if not fut.done():
            fut.set_result(msg)

    def _tag(self) -> int:
        for _ in range(NOTAG):
            tag = self._next_tag
            self._next_tag = (tag + 1) % NOTAG
            if tag not in self._pending and tag not in self._flushing:
                return tag
        raise NinePError("all 65535 9P tags are in use")

    async def request(self, msg: Message) -> Message:
        """Send one T-message (its tag is replaced by a free one) and return the reply as is,
        ``Rlerror`` included. Used for raw probes; most callers want :meth:`call`."""
        if self._closed is not None:
            raise ConnectionResetError(f"9P connection lost: {self._closed}")
        tag = NOTAG if isinstance(msg, Tversion) else self._tag()
        if msg.tag != tag:
            msg = replace(msg, tag=tag)
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[tag] = fut
        self._writer.write(encode(msg))
        try:
            await self._writer.drain()
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if not fut.done() and tag != NOTAG:
                self._flushing.add(tag)
                task = asyncio.get_running_loop().create_task(self._flush(tag, fut))
                task.add_done_callback(lambda _t: None)
            raise

    async def _flush(self, tag: int, fut: asyncio.Future[Message]) -> None:
        try:
            await self.call(Tflush(0, tag), Rflush)
        except (NinePError, OSError):
            pass
        finally:
            self._pending.pop(tag, None)
            self._flushing.discard(tag)
            if not fut.done():
                fut.cancel()

    async def call(self, msg: Message, reply_type: type[R]) -> R:
        """Send ``msg`` and return its reply; ``Rlerror`` raises :class:`RemoteError`."""
        reply = await self.request(msg)
        if isinstance(reply, reply_type):
            return reply
        if isinstance(reply, Rlerror):
            raise RemoteError(reply.ecode, type(msg).__name__)
        raise ProtocolError(f"{type(msg).__name__} was answered by {type(reply).__name__}")

    # ------------------------------------------------------------------ fids
    def new_fid(self) -> int:
        if self._free_fids:
            return self._free_fids.pop()
        fid = self._next_fid
        self._next_fid += 1
        return fid

    async def clunk(self, fid: int) -> None:
        try:
            await self.call(Tclunk(0, fid), Rclunk)
        finally:
            self._free_fids.append(fid)

    async def attach(self, *, aname: str = "", uname: str = "", n_uname: int = NONUNAME) -> Qid:
        fid = self.new_fid()
        reply = await self.call(Tattach(0, fid, NOFID, uname, aname, n_uname), Rattach)
        self.root = fid
        return reply.qid

    async def walk(
        self, path: str | Sequence[str] = (), *, start: int | None = None
    ) -> tuple[int, list[Qid]]:
        """A new fid for ``path`` below ``start`` (the root by default). A partial walk raises ENOENT."""
        names = split_path(path)
        fid = self.new_fid()
        qids: list[Qid] = []
        src = self.root if start is None else start
        created = False  # the server creates the new fid only when a whole walk succeeds
        try:
            for i in range(0, max(len(names), 1), MAXWELEM):
                chunk = names[i : i + MAXWELEM]
                reply = await self.call(Twalk(0, fid if created else src, fid, chunk), Rwalk)
                qids += reply.qids
                if len(reply.qids) != len(chunk):
                    raise RemoteError(errno.ENOENT, f"Twalk {'/'.join(names)}")
                created = True
        except BaseException:
            if created:
                with contextlib.suppress(NinePError, OSError):
                    await self.clunk(fid)
            else:
                self._free_fids.append(fid)
            raise
        return fid, qids

    # ------------------------------------------------------------------ fid operations
    async def lopen(self, fid: int, flags: int = OpenFlag.RDONLY) -> Rlopen:
        return await self.call(Tlopen(0, fid, flags), Rlopen)

    async def lcreate(self, dirfid: int, name: str, flags: int, mode: int = 0o644, gid: int = 0) -> Rlcreate:
        return await self.call(Tlcreate(0, dirfid, name, flags, mode, gid), Rlcreate)

    async def read(self, fid: int, offset: int, count: int) -> bytes:
        reply = await self.call(Tread(0, fid, offset, min(count, self.iounit)), Rread)
        return bytes(reply.data)

    async def write(self, fid: int, offset: int, data: bytes | memoryview) -> int:
        reply = await self.call(Twrite(0, fid, offset, data), Rwrite)
        return reply.count

    async def getattr(self, fid: int, mask: int = GetattrMask.BASIC) -> Rgetattr:
        return await self.call(Tgetattr(0, fid, mask), Rgetattr)

    async def setattr(self, fid: int, valid: int, *, mode: int = 0, uid: int = 0, gid: int = 0, size: int = 0,
                      atime: tuple[int, int] = (0, 0), mtime: tuple[int, int] = (0, 0)) -> None:  # fmt: skip
        await self.call(Tsetattr(0, fid, valid, mode, uid, gid, size, *atime, *mtime), Rsetattr)

    async def readdir(self, fid: int, offset: int = 0, count: int | None = None) -> list[DirEntry]:
        reply = await self.call(Treaddir(0, fid, offset, count or self.iounit), Rreaddir)
        return decode_dirents(reply.data)

    async def statfs(self, fid: int) -> Rstatfs:
        return await self.call(Tstatfs(0, fid), Rstatfs)

    # ------------------------------------------------------------------ path helpers
    async def stat(self, path: str | Sequence[str]) -> Rgetattr:
        fid, _ = await self.walk(path)
        try:
            return await self.getattr(fid)
        finally:
            await self.clunk(fid)

    async def listdir(self, path: str | Sequence[str] = ()) -> list[DirEntry]:
        """Every entry of a directory (``.`` and ``..`` included), following readdir offsets."""
        fid, _ = await self.walk(path)
        try:
            await self.lopen(fid, OpenFlag.RDONLY | OpenFlag.DIRECTORY)
            entries: list[DirEntry] = []
            offset = 0
            while batch := await self.readdir(fid, offset):
                entries += batch
                offset = batch[-1].offset
            return entries
        finally:
            await self.clunk(fid)

    async def read_file(self, path: str | Sequence[str], *, window: int = 4) -> bytes:
        """The whole file, with up to ``window`` reads in flight."""
        fid, _ = await self.walk(path)
        try:
            await self.lopen(fid, OpenFlag.RDONLY)
            chunks: list[bytes] = []
            step = self.iounit
            offset = 0
            while True:
                batch = await asyncio.gather(
                    *(self.read(fid, offset + i * step, step) for i in range(window))
                )
                for data in batch:
                    chunks.append(data)
                    if len(data) < step:
                        return b"".join(chunks)
                offset += window * step
        finally:
            await self.clunk(fid)

    async def write_file(self, path: str | Sequence[str], data: bytes | memoryview, *, mode: int = 0o644,
                         window: int = 4) -> None:  # fmt: skip
        """Create or truncate ``path`` and write ``data``, with up to ``window`` writes in flight."""
        names = split_path(path)
        fid, _ = await self.walk(names[:-1])
        try:
            await self.lcreate(fid, names[-1], OpenFlag.WRONLY | OpenFlag.CREATE | OpenFlag.TRUNC, mode)
            view = memoryview(data).cast("B")
            step = self.iounit
            sem = asyncio.Semaphore(window)

            async def put(off: int) -> None:
                async with sem:
                    chunk = view[off : off + step]
                    done = await self.write(fid, off, chunk)
                    if done != len(chunk):
                        raise OSError(errno.ENOSPC, f"short write at {off}: {done} of {len(chunk)} bytes")

            await asyncio.gather(*(put(off) for off in range(0, len(view), step)))
        finally:
            await self.clunk(fid)

    async def _in_dir(self, path: str | Sequence[str]) -> tuple[int, str]:
        names = split_path(path)
        if not names:
            raise ValueError("path names the root; an entry name is needed")
        fid, _ = await self.walk(names[:-1])
        return fid, names[-1]

    async def mkdir(self, path: str | Sequence[str], mode: int = 0o755) -> Qid:
        fid, name = await self._in_dir(path)
        try:
            return (await self.call(Tmkdir(0, fid, name, mode, 0), Rmkdir)).qid
        finally:
            await self.clunk(fid)

    async def symlink(self, path: str | Sequence[str], target: str) -> Qid:
        fid, name = await self._in_dir(path)
        try:
            return (await self.call(Tsymlink(0, fid, name, target, 0), Rsymlink)).qid
        finally:
            await self.clunk(fid)

    async def readlink(self, path: str | Sequence[str]) -> str:
        fid, _ = await self.walk(path)
        try:
            return (await self.call(Treadlink(0, fid), Rreadlink)).target
        finally:
            await self.clunk(fid)

    async def unlink(self, path: str | Sequence[str], *, directory: bool = False) -> None:
        fid, name = await self._in_dir(path)
        try:
            await self.call(Tunlinkat(0, fid, name, AT_REMOVEDIR if directory else 0), Runlinkat)
        finally:
            await self.clunk(fid)

    async def remove(self, path: str | Sequence[str]) -> None:
        fid, _ = await self.walk(path)
        try:
            await self.call(Tremove(0, fid), Rremove)
        finally:
            self._free_fids.append(fid)  # Tremove clunks the fid whatever the outcome

    async def rename(self, old: str | Sequence[str], new: str | Sequence[str]) -> None:
        src, old_name = await self._in_dir(old)
        try:
            dst, new_name = await self._in_dir(new)
            try:
                await self.call(Trenameat(0, src, old_name, dst, new_name), Rrenameat)
            finally:
                await self.clunk(dst)
        finally:
            await self.clunk(src)

    async def statvfs(self, path: str | Sequence[str] = ()) -> Rstatfs:
        fid, _ = await self.walk(path)
        try:
            return await self.statfs(fid)
        finally:
            await self.clunk(fid)
