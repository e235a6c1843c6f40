"""Sans-IO 9P2000.L server session: bytes in, replies out, one confined :class:`Export` behind it.

``receive_data(bytes)`` returns one outcome per request, in arrival order:

- :class:`Reply` — a finished frame to send (``after`` asks the I/O layer to hold an Rflush until
  the reply to the flushed tag has gone out);
- :class:`Job` — a large read or write, or an fsync, whose blocking system call should run off the
  event loop. ``run()`` is thread-safe (it works on its own duplicate of the file descriptor, so a
  concurrent clunk cannot pull the fd away), never raises, and returns the reply frame.

Fids name files by path inside the export (like diod and QEMU's local backend); renames done through
this session move the fids beneath the renamed node along with it.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .codec import Decoder, dirent_size, encode, encode_dirents, encode_rread_header
from .constants import (
    ACCESS_MODE_MASK,
    AT_REMOVEDIR,
    DEFAULT_MAX_MSIZE,
    MAXWELEM,
    MIN_MSIZE,
    NOFID,
    RREAD_HEADER,
    V9FS_MAGIC,
    VERSION_9P2000_L,
    VERSION_UNKNOWN,
    GetattrMask,
    LockStatus,
    LockType,
    OpenFlag,
    SetattrMask,
)
from .errors import ProtocolError
from .export import NOW, UNCHANGED, Export, Path, Time
from .messages import (
    MESSAGES,
    Buffer,
    DirEntry,
    Message,
    Rattach,
    Rclunk,
    Rflush,
    Rfsync,
    Rgetattr,
    Rgetlock,
    Rlcreate,
    Rlerror,
    Rlink,
    Rlock,
    Rlopen,
    Rmkdir,
    Rmknod,
    Rreaddir,
    Rreadlink,
    Rremove,
    Rrename,
    Rrenameat,
    Rsetattr,
    Rstatfs,
    Rsymlink,
    Runlinkat,
    Rversion,
    Rwalk,
    Rwrite,
    Rxattrcreate,
    Rxattrwalk,
    Tattach,
    Tauth,
    Tclunk,
    Tflush,
    Tfsync,
    Tgetattr,
    Tgetlock,
    Tlcreate,
    Tlink,
    Tlock,
    Tlopen,
    Tmkdir,
    Tmknod,
    Tread,
    Treaddir,
    Treadlink,
    Tremove,
    Trename,
    Trenameat,
    Tsetattr,
    Tstatfs,
    Tsymlink,
    Tunlinkat,
    Tversion,
    Twalk,
    Twrite,
    Txattrcreate,
    Txattrwalk,
)

log = logging.getLogger(__name__)

OFFLOAD_BYTES = 64 * 1024  # reads and writes at least this large run off the event loop
XATTR_SIZE_MAX = 65536
_OP_NAMES = {t: cls.__name__[1:].lower() for t, cls in MESSAGES.items()}


@dataclass(frozen=True, slots=True)
class Reply:
    tag: int
    data: Buffer
    after: int | None = None  # an Rflush: send it only once the flushed tag's reply has gone out


@dataclass(frozen=True, slots=True)
class Job:
    tag: int
    run: Callable[[], Buffer]


Outcome = Reply | Job


def _refuse(code: int, why: str) -> OSError:
    """A request refused by the protocol layer, before it reaches the filesystem."""
    return OSError(code, os.strerror(code), why)


@dataclass(slots=True)
class _XattrWrite:
    name: str
    size: int
    flags: int
    value: bytearray


@dataclass(slots=True)
class _Fid:
    path: Path
    is_dir: bool
    opened: bool = False
    fd: int | None = None
    flags: int = 0
    listing: list[DirEntry] | None = None
    xattr_value: bytes | None = None
    xattr_write: _XattrWrite | None = None

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)


class ServerSession:
    def __init__(
        self, export: Export, *, max_msize: int = DEFAULT_MAX_MSIZE, offload_bytes: int = OFFLOAD_BYTES
    ) -> None:
        self.export = export
        self.max_msize = max_msize
        self.msize = max_msize
        self.offload_bytes = offload_bytes
        self._decoder = Decoder(max_msize)
        self._fids: dict[int, _Fid] = {}
        self._stats = export.stats
        self._handlers: dict[int, Callable[[Any], Message | Outcome]] = {
            Tversion.TYPE: self._version,
            Tauth.TYPE: self._auth,
            Tattach.TYPE: self._attach,
            Tflush.TYPE: self._flush,
            Twalk.TYPE: self._walk,
            Tlopen.TYPE: self._lopen,
            Tlcreate.TYPE: self._lcreate,
            Tread.TYPE: self._read,
            Twrite.TYPE: self._write,
            Tclunk.TYPE: self._clunk,
            Tremove.TYPE: self._remove,
            Tgetattr.TYPE: self._getattr,
            Tsetattr.TYPE: self._setattr,
            Tstatfs.TYPE: self._statfs,
            Treadlink.TYPE: self._readlink,
            Treaddir.TYPE: self._readdir,
            Tmkdir.TYPE: self._mkdir,
            Tsymlink.TYPE: self._symlink,
            Tmknod.TYPE: self._mknod,
            Trename.TYPE: self._rename,
            Trenameat.TYPE: self._renameat,
            Tunlinkat.TYPE: self._unlinkat,
            Tlink.TYPE: self._link,
            Tfsync.TYPE: self._fsync,
            Tlock.TYPE: self._lock,
            Tgetlock.TYPE: self._getlock,
            Txattrwalk.TYPE: self._xattrwalk,
            Txattrcreate.TYPE: self._xattrcreate,
        }

    @property
    def fid_count(self) -> int:
        return len(self._fids)

    def close(self) -> None:
        """Release every fid (its open file descriptor, a pending xattr write)."""
        for fid in list(self._fids):
            self._drop(fid)

    # ------------------------------------------------------------------ entry points
    def receive_data(self, data: Buffer) -> list[Outcome]:
        """Feed received bytes; returns an outcome per complete request. A broken byte stream raises a
        fatal :class:`ProtocolError`; a malformed single message is answered with Rlerror."""
        self._decoder.feed(data)
        out: list[Outcome] = []
        while True:
            try:
                msg = self._decoder.next_message()
            except ProtocolError as exc:
                if exc.fatal or exc.tag is None:
                    raise
                log.debug("9P: %s", exc)
                code = errno.EOPNOTSUPP if exc.unsupported else errno.EINVAL
                out.append(Reply(exc.tag, encode(Rlerror(exc.tag, code))))
                continue
            if msg is None:
                return out
            out.append(self.handle(msg))

    def handle(self, msg: Message) -> Outcome:
        op = _OP_NAMES.get(msg.TYPE, "unknown")
        started = time.perf_counter()
        handler = self._handlers.get(msg.TYPE)
        code = 0
        try:
            if handler is None:
                raise _refuse(errno.EOPNOTSUPP, f"{type(msg).__name__} is not a request this server answers")
            result = handler(msg)
        except OSError as exc:
            code = exc.errno or errno.EIO
            log.debug("9P: %s refused on %s: %s", type(msg).__name__, self.export.root, exc)
        except Exception:
            log.exception("9P: %s failed on %s", type(msg).__name__, self.export)
            code = errno.EIO
        if code:
            self._stats.record(op, time.perf_counter() - started, error=True)
            return Reply(msg.tag, encode(Rlerror(msg.tag, code)))
        if isinstance(result, Job):
            return result  # the job records its own figures
        self._stats.record(op, time.perf_counter() - started)
        if isinstance(result, Reply):
            return result
        return Reply(msg.tag, encode(result))

    # ------------------------------------------------------------------ helpers
    def _fid(self, fid: int) -> _Fid:
        state = self._fids.get(fid)
        if state is None:
            raise _refuse(errno.EBADF, f"unknown fid {fid}")
        return state

    def _new_fid(self, fid: int) -> None:
        if fid in self._fids:
            raise _refuse(errno.EBADF, f"fid {fid} is already in use")
        if fid == NOFID:
            raise _refuse(errno.EBADF, "NOFID cannot name a file")

    def _dir_fid(self, fid: int) -> _Fid:
        state = self._fid(fid)
        if not state.is_dir:
            raise _refuse(errno.ENOTDIR, f"fid {fid} is not a directory")
        return state

    def _drop(self, fid: int) -> _Fid | None:
        state = self._fids.pop(fid, None)
        if state is not None:
            state.close()
        return state

    def _moved(self, old: Path, new: Path) -> None:
        n = len(old)
        for state in self._fids.values():
            if state.path[:n] == old:
                state.path = new + state.path[n:]

    def _fd(self, state: _Fid, fid: int) -> int:
        if state.fd is None:
            raise _refuse(errno.EBADF, f"fid {fid} is not open")
        return state.fd

    # ------------------------------------------------------------------ session
    def _version(self, msg: Tversion) -> Message:
        self.close()  # a new version aborts the session: every fid goes
        msize = min(msg.msize, self.max_msize)
        if not msg.version.startswith(VERSION_9P2000_L) or msize < MIN_MSIZE:
            return Rversion(msg.tag, msize, VERSION_UNKNOWN)
        self.msize = msize
        self._decoder.max_size = msize
        return Rversion(msg.tag, msize, VERSION_9P2000_L)

    def _auth(self, msg: Tauth) -> Message:
        raise _refuse(errno.EOPNOTSUPP, "this server needs no authentication")

    def _attach(self, msg: Tattach) -> Message:
        if msg.afid != NOFID:
            raise _refuse(errno.EBADF, f"no authentication fid {msg.afid} exists")
        self._new_fid(msg.fid)
        names = tuple(n for n in msg.aname.split("/") if n)
        if ".." in names:
            raise _refuse(errno.EACCES, f"aname {msg.aname!r} may not contain '..'")
        steps, err = self.export.walk((), names)
        if err is not None:
            raise err
        path, st = steps[-1] if steps else ((), self.export.lstat(()))
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(errno.ENOTDIR, f"aname {msg.aname!r} is not a directory")
        self._fids[msg.fid] = _Fid(path, True)
        return Rattach(msg.tag, self.export.qid(st))

    def _flush(self, msg: Tflush) -> Outcome:
        return Reply(msg.tag, encode(Rflush(msg.tag)), after=msg.oldtag)

    # ------------------------------------------------------------------ names
    def _walk(self, msg: Twalk) -> Message:
        state = self._fid(msg.fid)
        if msg.newfid != msg.fid:
            self._new_fid(msg.newfid)
        if len(msg.wnames) > MAXWELEM:
            raise _refuse(errno.EINVAL, f"Twalk of {len(msg.wnames)} names (at most {MAXWELEM})")
        if not msg.wnames:
            if msg.newfid != msg.fid:
                self._fids[msg.newfid] = _Fid(state.path, state.is_dir)
            return Rwalk(msg.tag, ())
        steps, err = self.export.walk(state.path, msg.wnames)
        if not steps:
            assert err is not None
            raise err
        qids = tuple(self.export.qid(st) for _, st in steps)
        if len(steps) == len(msg.wnames):
            path, st = steps[-1]
            if msg.newfid == msg.fid:
                if state.opened:
                    raise _refuse(errno.EBUSY, f"fid {msg.fid} is open and cannot walk in place")
                state.path, state.is_dir = path, stat.S_ISDIR(st.st_mode)
            else:
                self._fids[msg.newfid] = _Fid(path, stat.S_ISDIR(st.st_mode))
        return Rwalk(msg.tag, qids)

    def _lopen(self, msg: Tlopen) -> Message:
        state = self._fid(msg.fid)
        if state.opened or state.xattr_value is not None or state.xattr_write is not None:
            raise _refuse(errno.EBUSY, f"fid {msg.fid} is already open")
        fd = self.export.open(state.path, msg.flags)
        st = os.fstat(fd) if fd is not None else self.export.lstat(state.path)
        state.opened, state.fd, state.flags = True, fd, msg.flags
        state.is_dir = stat.S_ISDIR(st.st_mode)
        return Rlopen(msg.tag, self.export.qid(st), 0)

    def _lcreate(self, msg: Tlcreate) -> Message:
        state = self._dir_fid(msg.fid)
        if state.opened:
            raise _refuse(errno.EBUSY, f"fid {msg.fid} is open")
        fd = self.export.create(state.path, msg.name, msg.flags, msg.mode)
        st = os.fstat(fd)
        state.path, state.is_dir = (*state.path, msg.name), False
        state.opened, state.fd, state.flags = True, fd, msg.flags
        return Rlcreate(msg.tag, self.export.qid(st), 0)

    def _mkdir(self, msg: Tmkdir) -> Message:
        st = self.export.mkdir(self._dir_fid(msg.dfid).path, msg.name, msg.mode)
        return Rmkdir(msg.tag, self.export.qid(st))

    def _symlink(self, msg: Tsymlink) -> Message:
        st = self.export.symlink(self._dir_fid(msg.fid).path, msg.name, msg.symtgt)
        return Rsymlink(msg.tag, self.export.qid(st))

    def _mknod(self, msg: Tmknod) -> Message:
        st = self.export.mknod(self._dir_fid(msg.dfid).path, msg.name, msg.mode, msg.major, msg.minor)
        return Rmknod(msg.tag, self.export.qid(st))

    def _readlink(self, msg: Treadlink) -> Message:
        return Rreadlink(msg.tag, self.export.readlink(self._fid(msg.fid).path))

    def _link(self, msg: Tlink) -> Message:
        self.export.link(self._fid(msg.fid).path, self._dir_fid(msg.dfid).path, msg.name)
        return Rlink(msg.tag)

    def _rename(self, msg: Trename) -> Message:
        src = self._fid(msg.fid).path
        dst_dir = self._dir_fid(msg.dfid).path
        if not src:
            raise _refuse(errno.EBUSY, "cannot rename the export root")
        self.export.rename(src[:-1], src[-1], dst_dir, msg.name)
        self._moved(src, (*dst_dir, msg.name))
        return Rrename(msg.tag)

    def _renameat(self, msg: Trenameat) -> Message:
        old_dir = self._dir_fid(msg.olddirfid).path
        new_dir = self._dir_fid(msg.newdirfid).path
        self.export.rename(old_dir, msg.oldname, new_dir, msg.newname)
        self._moved((*old_dir, msg.oldname), (*new_dir, msg.newname))
        return Rrenameat(msg.tag)

    def _unlinkat(self, msg: Tunlinkat) -> Message:
        path = self._dir_fid(msg.dirfid).path
        self.export.unlink(path, msg.name, directory=bool(msg.flags & AT_REMOVEDIR))
        return Runlinkat(msg.tag)

    def _remove(self, msg: Tremove) -> Message:
        state = self._drop(msg.fid)  # Tremove clunks the fid even when the remove fails
        if state is None:
            raise _refuse(errno.EBADF, f"unknown fid {msg.fid}")
        self.export.remove(state.path)
        return Rremove(msg.tag)

    def _clunk(self, msg: Tclunk) -> Message:
        state = self._drop(msg.fid)
        if state is None:
            raise _refuse(errno.EBADF, f"unknown fid {msg.fid}")
        pending = state.xattr_write
        if pending is not None:
            if len(pending.value) != pending.size:
                raise _refuse(
                    errno.EINVAL, f"xattr {pending.name}: wrote {len(pending.value)} of {pending.size} bytes"
                )
            if pending.size == 0 and pending.flags == 0:
                self.export.removexattr(state.path, pending.name)
            else:
                self.export.setxattr(state.path, pending.name, bytes(pending.value), pending.flags)
        return Rclunk(msg.tag)

    # ------------------------------------------------------------------ attributes
    def _getattr(self, msg: Tgetattr) -> Message:
        state = self._fid(msg.fid)
        st = os.fstat(state.fd) if state.fd is not None else self.export.lstat(state.path)
        return Rgetattr(
            msg.tag,
            int(GetattrMask.BASIC),
            self.export.qid(st),
            st.st_mode,
            st.st_uid,
            st.st_gid,
            st.st_nlink,
            st.st_rdev,
            st.st_size,
            st.st_blksize,
            st.st_blocks,
            *divmod(st.st_atime_ns, 1_000_000_000),
            *divmod(st.st_mtime_ns, 1_000_000_000),
            *divmod(st.st_ctime_ns, 1_000_000_000),
            0,
            0,
            0,
            0,
        )

    def _setattr(self, msg: Tsetattr) -> Message:
        state = self._fid(msg.fid)
        valid, path = msg.valid, state.path
        if valid & SetattrMask.MODE:
            self.export.chmod(path, msg.mode)
        if valid & (SetattrMask.UID | SetattrMask.GID):
            uid = msg.uid if valid & SetattrMask.UID else -1
            gid = msg.gid if valid & SetattrMask.GID else -1
            self.export.chown(path, uid, gid)
        if valid & SetattrMask.SIZE:
            writable = state.fd is not None and state.flags & ACCESS_MODE_MASK in (
                OpenFlag.WRONLY,
                OpenFlag.RDWR,
            )
            self.export.truncate(path, msg.size, state.fd if writable else None)
        if valid & (SetattrMask.ATIME | SetattrMask.MTIME):
            self.export.utimes(
                path,
                _time(valid, SetattrMask.ATIME, SetattrMask.ATIME_SET, msg.atime_sec, msg.atime_nsec),
                _time(valid, SetattrMask.MTIME, SetattrMask.MTIME_SET, msg.mtime_sec, msg.mtime_nsec),
            )
        return Rsetattr(msg.tag)

    def _statfs(self, msg: Tstatfs) -> Message:
        s = self.export.statfs(self._fid(msg.fid).path)
        return Rstatfs(
            msg.tag, V9FS_MAGIC, s.f_bsize, s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree,
            s.f_fsid, s.f_namemax,
        )  # fmt: skip

    def _xattrwalk(self, msg: Txattrwalk) -> Message:
        state = self._fid(msg.fid)
        self._new_fid(msg.newfid)
        if msg.name:
            value = self.export.getxattr(state.path, msg.name)
        else:
            value = b"".join(os.fsencode(n) + b"\0" for n in self.export.listxattr(state.path))
        self._fids[msg.newfid] = _Fid(state.path, state.is_dir, opened=True, xattr_value=value)
        return Rxattrwalk(msg.tag, len(value))

    def _xattrcreate(self, msg: Txattrcreate) -> Message:
        state = self._fid(msg.fid)
        if self.export.read_only:
            raise _refuse(errno.EROFS, "setxattr on a read-only export")
        if state.opened:
            raise _refuse(errno.EBUSY, f"fid {msg.fid} is open")
        if msg.attr_size > XATTR_SIZE_MAX:
            raise _refuse(errno.E2BIG, f"xattr value of {msg.attr_size} bytes")
        state.opened = True
        state.xattr_write = _XattrWrite(msg.name, msg.attr_size, msg.flags, bytearray())
        return Rxattrcreate(msg.tag)

    # ------------------------------------------------------------------ data
    def _readdir(self, msg: Treaddir) -> Message:
        state = self._fid(msg.fid)
        if not state.opened or not state.is_dir:
            raise _refuse(
                errno.EBADF if not state.opened else errno.ENOTDIR, f"fid {msg.fid} is not an open directory"
            )
        if msg.offset == 0 or state.listing is None:
            st = os.fstat(state.fd) if state.fd is not None else self.export.lstat(state.path)
            here = self.export.qid(st)
            names = [(".", here, 4), ("..", here, 4)]
            names += [(e.name, e.qid, e.dtype) for e in self.export.listdir(state.path, state.fd)]
            state.listing = [DirEntry(qid, i + 1, dtype, name) for i, (name, qid, dtype) in enumerate(names)]
        budget = min(msg.count, self.msize - RREAD_HEADER)
        batch = []
        for entry in state.listing[msg.offset :]:
            budget -= dirent_size(entry.name)
            if budget < 0:
                break
            batch.append(entry)
        if not batch and msg.offset < len(state.listing):
            raise _refuse(errno.EINVAL, f"readdir count {msg.count} is too small for the next entry")
        return Rreaddir(msg.tag, encode_dirents(batch))

    def _read(self, msg: Tread) -> Message | Outcome:
        state = self._fid(msg.fid)
        count = min(msg.count, self.msize - RREAD_HEADER)
        if state.xattr_value is not None:
            chunk = state.xattr_value[msg.offset : msg.offset + count]
            buf = bytearray(RREAD_HEADER) + chunk
            encode_rread_header(buf, msg.tag, len(chunk))
            return Reply(msg.tag, buf)
        if state.is_dir and state.opened:
            raise _refuse(errno.EISDIR, f"fid {msg.fid} is a directory: use Treaddir")
        fd = self._fd(state, msg.fid)
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):  # size the buffer (and the decision to offload) by what is there
            count = max(0, min(count, st.st_size - msg.offset))
        if count < self.offload_bytes:
            return Reply(msg.tag, self._pread(fd, msg.tag, msg.offset, count, time.perf_counter()))
        dup = os.dup(fd)
        started = time.perf_counter()
        return Job(msg.tag, lambda: self._pread(dup, msg.tag, msg.offset, count, started, close=True))

    def _pread(
        self, fd: int, tag: int, offset: int, count: int, started: float, close: bool = False
    ) -> Buffer:
        try:
            buf = bytearray(RREAD_HEADER + count)
            n = os.preadv(fd, [memoryview(buf)[RREAD_HEADER:]], offset) if count else 0
            encode_rread_header(buf, tag, n)
            self._stats.record("read", time.perf_counter() - started, read=n)
            return memoryview(buf)[: RREAD_HEADER + n]
        except OSError as exc:
            self._stats.record("read", time.perf_counter() - started, error=True)
            return encode(Rlerror(tag, exc.errno or errno.EIO))
        finally:
            if close:
                os.close(fd)

    def _write(self, msg: Twrite) -> Message | Outcome:
        state = self._fid(msg.fid)
        pending = state.xattr_write
        if pending is not None:
            if msg.offset != len(pending.value) or msg.offset + len(msg.data) > pending.size:
                raise _refuse(
                    errno.EINVAL, f"xattr {pending.name}: write at {msg.offset} out of order or too long"
                )
            pending.value += msg.data
            return Rwrite(msg.tag, len(msg.data))
        if self.export.read_only:
            raise _refuse(errno.EROFS, "write on a read-only export")
        fd = self._fd(state, msg.fid)
        if len(msg.data) < self.offload_bytes:
            return Reply(msg.tag, self._pwrite(fd, msg.tag, msg.offset, msg.data, time.perf_counter()))
        dup = os.dup(fd)
        started = time.perf_counter()
        return Job(msg.tag, lambda: self._pwrite(dup, msg.tag, msg.offset, msg.data, started, close=True))

    def _pwrite(
        self, fd: int, tag: int, offset: int, data: Buffer, started: float, close: bool = False
    ) -> bytes:
        try:
            n = os.pwrite(fd, data, offset)
            self._stats.record("write", time.perf_counter() - started, written=n)
            return encode(Rwrite(tag, n))
        except OSError as exc:
            self._stats.record("write", time.perf_counter() - started, error=True)
            return encode(Rlerror(tag, exc.errno or errno.EIO))
        finally:
            if close:
                os.close(fd)

    def _fsync(self, msg: Tfsync) -> Message | Outcome:
        state = self._fid(msg.fid)
        if state.fd is None:
            if state.opened:
                return Rfsync(msg.tag)  # synthetic root, or an xattr fid: nothing on disk to flush
            raise _refuse(errno.EBADF, f"fid {msg.fid} is not open")
        dup = os.dup(state.fd)
        started = time.perf_counter()

        def run() -> bytes:
            try:
                (os.fdatasync if msg.datasync else os.fsync)(dup)
                self._stats.record("fsync", time.perf_counter() - started)
                return encode(Rfsync(msg.tag))
            except OSError as exc:
                self._stats.record("fsync", time.perf_counter() - started, error=True)
                return encode(Rlerror(msg.tag, exc.errno or errno.EIO))
            finally:
                os.close(dup)

        return Job(msg.tag, run)

    # ------------------------------------------------------------------ locks
    # Byte-range locks are granted and never conflict (as QEMU's 9P server does): every fid's file
    # is opened by this one process, so host POSIX locks could not tell the clients apart anyway.
    def _lock(self, msg: Tlock) -> Message:
        self._fid(msg.fid)
        return Rlock(msg.tag, int(LockStatus.SUCCESS))

    def _getlock(self, msg: Tgetlock) -> Message:
        self._fid(msg.fid)
        return Rgetlock(msg.tag, int(LockType.UNLCK), msg.start, msg.length, msg.proc_id, msg.client_id)


def _time(valid: int, now_bit: int, set_bit: int, sec: int, nsec: int) -> Time:
    if not valid & now_bit:
        return UNCHANGED
    return (sec, nsec) if valid & set_bit else NOW


__all__ = ["OFFLOAD_BYTES", "Job", "Outcome", "Reply", "ServerSession"]
