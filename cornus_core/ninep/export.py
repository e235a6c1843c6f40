"""A confined export: the local directory (or single file) a 9P server exposes, and nothing else.

Every operation names its target by a path of validated components relative to the export root and
resolves it fd-relative: with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` where the kernel has it,
otherwise one ``O_PATH | O_NOFOLLOW`` component at a time. The final component is never followed
either (``*at`` calls with ``AT_SYMLINK_NOFOLLOW``, or the ``/proc/self/fd`` name of an ``O_PATH`` fd).
So neither ``..``, nor an absolute or relative symlink, nor a symlink swapped in concurrently can make
an operation touch anything outside the root; symlinks are reported as symlinks for the client to
resolve on its own side.

A single-file export shows a synthetic read-only root directory whose only entry is that file.
Methods raise ``OSError``; a read-only export raises ``EROFS`` for every mutation.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from ._syscalls import (
    RESOLVE_BENEATH,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    UTIME_NOW,
    UTIME_OMIT,
    openat2,
    openat2_works,
    utimensat,
)
from .constants import ACCESS_MODE_MASK, OpenFlag, QidType
from .messages import Qid
from .stats import ExportStats

Path = tuple[str, ...]
Time = tuple[int, int]  # (seconds, nanoseconds)
NOW: Time = (0, UTIME_NOW)
UNCHANGED: Time = (0, UTIME_OMIT)

_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# 9P open flags we pass through; everything else (APPEND, DIRECT, NOATIME, ASYNC, ...) is dropped:
# clients send explicit offsets, and the rest either fails on some filesystems or needs privileges.
_PASSED_FLAGS = (
    (OpenFlag.TRUNC, os.O_TRUNC),
    (OpenFlag.DSYNC, os.O_DSYNC),
    (OpenFlag.SYNC, os.O_SYNC),
    (OpenFlag.DIRECTORY, os.O_DIRECTORY),
    (OpenFlag.EXCL, os.O_EXCL),
)
_ACCESS = {0: os.O_RDONLY, 1: os.O_WRONLY, 2: os.O_RDWR, 3: os.O_RDONLY}
SYNTHETIC_ROOT_INO = (1 << 63) - 1
SECURITY_CAPABILITY = "security.capability"


def _err(code: int, what: str) -> OSError:
    return OSError(code, os.strerror(code), what)


def check_name(name: str) -> None:
    """A name must be one real path component."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise _err(errno.EINVAL, f"invalid file name {name!r}")


def host_open_flags(flags: int) -> int:
    host = _ACCESS[flags & ACCESS_MODE_MASK] | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for p9, flag in _PASSED_FLAGS:
        if flags & p9:
            host |= flag
    return host


def writes(flags: int) -> bool:
    """Whether Tlopen/Tlcreate flags ask to modify the file."""
    return flags & ACCESS_MODE_MASK in (OpenFlag.WRONLY, OpenFlag.RDWR) or bool(flags & OpenFlag.TRUNC)


@dataclass(frozen=True, slots=True)
class Listing:
    """One directory entry as the export sees it."""

    name: str
    qid: Qid
    dtype: int


_DT_DIR, _DT_REG, _DT_LNK, _DT_UNKNOWN = 4, 8, 10, 0


class Export:
    def __init__(
        self, root: str | os.PathLike[str], *, read_only: bool = False, use_openat2: bool | None = None
    ) -> None:
        """``use_openat2``: None uses it where the kernel allows; False forces per-component resolution."""
        real = os.path.realpath(root)
        st = os.stat(real)
        self.read_only = read_only
        self.single_file: str | None = None
        if stat.S_ISDIR(st.st_mode):
            self.root = real
            self._root_fd = os.open(real, _O_PATH_DIR)
        else:
            self.root = real
            parent, self.single_file = os.path.split(real)
            self._root_fd = os.open(parent, _O_PATH_DIR)
        self._beneath = openat2_works(self._root_fd) if use_openat2 is not False else False
        if use_openat2 and not self._beneath:
            os.close(self._root_fd)
            raise OSError(errno.ENOSYS, "openat2 is not available on this kernel")
        self._proc_fd = os.path.isdir("/proc/self/fd")
        self._devs: dict[int, int] = {os.stat(self._root_fd).st_dev: 0}
        self.stats = ExportStats()

    @property
    def uses_openat2(self) -> bool:
        return self._beneath

    def close(self) -> None:
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def __repr__(self) -> str:
        kind = "file" if self.single_file else "dir"
        return f"Export({self.root!r}, {kind}, {'ro' if self.read_only else 'rw'})"

    # ------------------------------------------------------------------ resolution
    def _mutable(self, what: str) -> None:
        if self.read_only:
            raise _err(errno.EROFS, f"{what} on read-only export {self.root}")

    def _view(self, path: Path) -> bool:
        """Check a path against the single-file view; True when it is the synthetic root."""
        if self.single_file is None:
            return False
        if not path:
            return True
        if path != (self.single_file,):
            raise _err(errno.ENOENT, "/".join(path))
        return False

    def _open(self, path: Path, flags: int, mode: int = 0) -> int:
        """Open the node at ``path``, never following a symlink, never leaving the root."""
        if not path:
            return os.open(".", flags, dir_fd=self._root_fd)
        if self._beneath:
            return openat2(self._root_fd, "/".join(path), flags | os.O_NOFOLLOW, mode, _RESOLVE)
        fd = os.open(".", _O_PATH_DIR, dir_fd=self._root_fd)
        try:
            for name in path[:-1]:
                check_name(name)
                parent, fd = fd, os.open(name, _O_PATH_DIR, dir_fd=fd)
                os.close(parent)
            check_name(path[-1])
            return os.open(path[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _dir(self, path: Path) -> Iterator[int]:
        fd = self._open(path, _O_PATH_DIR)
        try:
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _node(self, path: Path) -> Iterator[int]:
        fd = self._open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    def _magic(self, fd: int) -> str:
        if not self._proc_fd:
            raise _err(errno.EOPNOTSUPP, "operation needs /proc/self/fd")
        return f"/proc/self/fd/{fd}"

    # ------------------------------------------------------------------ identity
    def qid(self, st: os.stat_result) -> Qid:
        mode = st.st_mode
        qtype = QidType.DIR if stat.S_ISDIR(mode) else QidType.SYMLINK if stat.S_ISLNK(mode) else QidType.FILE
        dev = self._devs.setdefault(st.st_dev, len(self._devs))
        return Qid(int(qtype), 0, st.st_ino ^ (dev << 48))

    def _synthetic_root(self) -> os.stat_result:
        assert self.single_file is not None
        parent = os.stat(self._root_fd)
        return os.stat_result(
            (stat.S_IFDIR | 0o555, SYNTHETIC_ROOT_INO, parent.st_dev, 2, parent.st_uid, parent.st_gid, 0,
             int(parent.st_atime), int(parent.st_mtime), int(parent.st_ctime)),
            {"st_atime_ns": parent.st_atime_ns, "st_mtime_ns": parent.st_mtime_ns,
             "st_ctime_ns": parent.st_ctime_ns, "st_blksize": parent.st_blksize, "st_blocks": 0, "st_rdev": 0},
        )  # fmt: skip

    # ------------------------------------------------------------------ reading
    def lstat(self, path: Path) -> os.stat_result:
        if self._view(path):
            return self._synthetic_root()
        if not path:
            return os.stat(self._root_fd)
        with self._dir(path[:-1]) as d:
            st = os.stat(path[-1], dir_fd=d, follow_symlinks=False)
        if self.single_file is not None and stat.S_ISDIR(st.st_mode):
            raise _err(errno.ENOENT, f"{path[-1]} is no longer a file")  # never show a directory swapped in
        return st

    def walk(
        self, start: Path, names: tuple[str, ...]
    ) -> tuple[list[tuple[Path, os.stat_result]], OSError | None]:
        """Walk ``names`` from ``start``; returns the steps that succeeded and the error that stopped it."""
        steps: list[tuple[Path, os.stat_result]] = []
        path = start
        try:
            for name in names:
                if name == "..":
                    path = path[:-1]  # lexical: paths never cross a symlink, and the root is its own parent
                elif name != ".":
                    check_name(name)
                    if steps and not stat.S_ISDIR(steps[-1][1].st_mode):
                        raise _err(errno.ENOTDIR, "/".join(path))
                    path = (*path, name)
                steps.append((path, self.lstat(path)))
        except OSError as exc:
            return steps, exc
        return steps, None

    def open(self, path: Path, flags: int) -> int | None:
        """Open for Tlopen; None for the synthetic root of a single-file export."""
        if writes(flags):
            self._mutable("open for writing")
        if self._view(path):
            if flags & ACCESS_MODE_MASK != OpenFlag.RDONLY:
                raise _err(errno.EISDIR, "/")
            return None
        return self._open(path, host_open_flags(flags))

    def readlink(self, path: Path) -> str:
        if self._view(path) or not path:
            raise _err(errno.EINVAL, "the root is not a symlink")
        with self._dir(path[:-1]) as d:
            return os.readlink(path[-1], dir_fd=d)

    def listdir(self, path: Path, fd: int | None) -> list[Listing]:
        """Entries of an opened directory, without ``.`` and ``..``."""
        if self._view(path):
            assert self.single_file is not None
            try:
                st = self.lstat((self.single_file,))
            except FileNotFoundError:
                return []
            return [Listing(self.single_file, self.qid(st), _DT_REG)]
        if fd is None:
            raise _err(errno.EBADF, "directory is not open")
        dev = self._devs.setdefault(os.fstat(fd).st_dev, len(self._devs))
        out = []
        with os.scandir(fd) as it:
            for e in it:
                if e.is_symlink():
                    qtype, dtype = QidType.SYMLINK, _DT_LNK
                elif e.is_dir(follow_symlinks=False):
                    qtype, dtype = QidType.DIR, _DT_DIR
                elif e.is_file(follow_symlinks=False):
                    qtype, dtype = QidType.FILE, _DT_REG
                else:
                    qtype, dtype = QidType.FILE, _DT_UNKNOWN
                out.append(Listing(e.name, Qid(int(qtype), 0, e.inode() ^ (dev << 48)), dtype))
        return out

    def statfs(self, path: Path) -> os.statvfs_result:
        if self._view(path):
            return os.statvfs(self._root_fd)
        with self._node(path) as fd:
            return os.statvfs(fd)

    def getxattr(self, path: Path, name: str) -> bytes:
        if name == SECURITY_CAPABILITY or self._view(path):
            raise _err(errno.ENODATA, name)  # the probe before every write: answer it without a syscall
        with self._node(path) as fd:
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise _err(errno.ENODATA, name)
            return os.getxattr(self._magic(fd), name)

    def listxattr(self, path: Path) -> list[str]:
        if self._view(path):
            return []
        with self._node(path) as fd:
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                return []
            return os.listxattr(self._magic(fd))

    # ------------------------------------------------------------------ mutations
    def _parent(self, dirpath: Path, name: str, what: str) -> None:
        self._mutable(what)
        if self._view(dirpath):
            raise _err(errno.EACCES, f"{what}: a single-file export cannot change its directory")
        check_name(name)

    def create(self, dirpath: Path, name: str, flags: int, mode: int) -> int:
        """Open ``name`` for Tlcreate, creating it with exactly ``mode``: the client applied its own umask,
        so ours must not strip more bits; hence create exclusively and set the mode on what we made."""
        self._parent(dirpath, name, "create")
        path, mode, host = (*dirpath, name), _safe_mode(mode, False), host_open_flags(flags)
        try:
            fd = self._open(path, host | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            if host & os.O_EXCL:
                raise
            return self._open(path, host)
        os.fchmod(fd, mode)
        return fd

    def mkdir(self, dirpath: Path, name: str, mode: int) -> os.stat_result:
        self._parent(dirpath, name, "mkdir")
        mode = _safe_mode(mode, True)
        with self._dir(dirpath) as d:
            os.mkdir(name, mode, dir_fd=d)
        self.chmod((*dirpath, name), mode)  # exactly the client's mode, whatever our umask
        return self.lstat((*dirpath, name))

    def symlink(self, dirpath: Path, name: str, target: str) -> os.stat_result:
        self._parent(dirpath, name, "symlink")
        with self._dir(dirpath) as d:
            os.symlink(target, name, dir_fd=d)
            return os.stat(name, dir_fd=d, follow_symlinks=False)

    def mknod(self, dirpath: Path, name: str, mode: int, major: int, minor: int) -> os.stat_result:
        self._parent(dirpath, name, "mknod")
        kind = stat.S_IFMT(mode) or stat.S_IFREG
        if kind not in (stat.S_IFREG, stat.S_IFIFO, stat.S_IFSOCK):
            raise _err(errno.EPERM, f"mknod {name}: device nodes are not allowed in an export")
        mode = _safe_mode(mode, False)
        with self._dir(dirpath) as d:
            os.mknod(name, kind | mode, os.makedev(major, minor), dir_fd=d)
        self.chmod((*dirpath, name), mode)
        return self.lstat((*dirpath, name))

    def unlink(self, dirpath: Path, name: str, *, directory: bool) -> None:
        self._parent(dirpath, name, "unlink")
        with self._dir(dirpath) as d:
            if directory:
                os.rmdir(name, dir_fd=d)
            else:
                os.unlink(name, dir_fd=d)

    def remove(self, path: Path) -> None:
        if not path:
            self._mutable("remove")
            raise _err(errno.EBUSY, "cannot remove the export root")
        directory = stat.S_ISDIR(self.lstat(path).st_mode)
        self.unlink(path[:-1], path[-1], directory=directory)

    def rename(self, src_dir: Path, src_name: str, dst_dir: Path, dst_name: str) -> None:
        self._parent(src_dir, src_name, "rename")
        self._parent(dst_dir, dst_name, "rename")
        with self._dir(src_dir) as a, self._dir(dst_dir) as b:
            os.rename(src_name, dst_name, src_dir_fd=a, dst_dir_fd=b)

    def link(self, path: Path, dirpath: Path, name: str) -> None:
        self._parent(dirpath, name, "link")
        if not path:
            raise _err(errno.EPERM, "cannot link the export root")
        with self._dir(path[:-1]) as a, self._dir(dirpath) as b:
            os.link(path[-1], name, src_dir_fd=a, dst_dir_fd=b, follow_symlinks=False)

    def _settable(self, path: Path, what: str) -> None:
        self._mutable(what)
        if self._view(path):
            raise _err(errno.EPERM, f"{what}: the root of a single-file export is fixed")

    def chmod(self, path: Path, mode: int) -> None:
        self._settable(path, "chmod")
        with self._node(path) as fd:
            kind = os.fstat(fd).st_mode
            if stat.S_ISLNK(kind):
                raise _err(errno.EOPNOTSUPP, "chmod of a symlink")
            os.chmod(self._magic(fd), _safe_mode(mode, stat.S_ISDIR(kind)))

    def chown(self, path: Path, uid: int, gid: int) -> None:
        self._settable(path, "chown")
        dirpath, name = (path[:-1], path[-1]) if path else ((), ".")
        with self._dir(dirpath) as d:
            os.chown(name, uid, gid, dir_fd=d, follow_symlinks=False)

    def truncate(self, path: Path, size: int, fd: int | None = None) -> None:
        """Truncate through ``fd`` when the caller holds one open for writing."""
        self._settable(path, "truncate")
        if fd is not None:
            os.ftruncate(fd, size)
            return
        wfd = self._open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.ftruncate(wfd, size)
        finally:
            os.close(wfd)

    def utimes(self, path: Path, atime: Time, mtime: Time) -> None:
        """Each time is (seconds, nanoseconds); :data:`NOW` and :data:`UNCHANGED` are the special values."""
        self._settable(path, "utimes")
        if not path:
            utimensat(self._root_fd, ".", atime, mtime)
            return
        with self._dir(path[:-1]) as d:
            utimensat(d, path[-1], atime, mtime)

    def setxattr(self, path: Path, name: str, value: bytes, flags: int) -> None:
        self._settable(path, "setxattr")
        with self._node(path) as fd:
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise _err(errno.EPERM, "xattrs on a symlink")
            os.setxattr(self._magic(fd), name, value, flags)

    def removexattr(self, path: Path, name: str) -> None:
        self._settable(path, "removexattr")
        with self._node(path) as fd:
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise _err(errno.ENODATA, name)
            os.removexattr(self._magic(fd), name)


def _safe_mode(mode: int, directory: bool) -> int:
    """Permission bits a remote client may set: never set-uid, and set-gid only on directories."""
    mode &= 0o7777 & ~stat.S_ISUID
    return mode if directory else mode & ~stat.S_ISGID
