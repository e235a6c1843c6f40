"""The two system calls Python's ``os`` module lacks: ``openat2`` and a full ``utimensat``.

``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` lets the kernel itself guarantee that a path stays
under a directory fd and never crosses a symlink (Linux 5.6+). Where it is missing (old kernel, or a
seccomp filter that refuses it) callers fall back to opening one component at a time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

SYS_OPENAT2 = 437  # the same number on every Linux architecture
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
AT_SYMLINK_NOFOLLOW = 0x100


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_utimensat = _libc.utimensat
_utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Timespec), ctypes.c_int]
_utimensat.restype = ctypes.c_int


def openat2(dir_fd: int, path: str, flags: int, mode: int = 0, resolve: int = 0) -> int:
    """``openat2(2)``; raises ``OSError`` like ``os.open``. The fd is close-on-exec."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & (os.O_CREAT | os.O_TMPFILE) else 0, resolve)
    raw = os.fsencode(path)
    while True:
        fd = _syscall(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(raw),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err), path)


def openat2_works(dir_fd: int) -> bool:
    """Whether this kernel (and any seccomp policy) lets us use openat2."""
    try:
        fd = openat2(dir_fd, ".", os.O_PATH | os.O_DIRECTORY, resolve=RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
    except OSError:
        return False
    os.close(fd)
    return True


def utimensat(dir_fd: int, name: str, atime: tuple[int, int], mtime: tuple[int, int]) -> None:
    """Set times of ``name`` under ``dir_fd`` without following a symlink; a ``tv_nsec`` of
    ``UTIME_NOW`` or ``UTIME_OMIT`` means now or unchanged."""
    times = (_Timespec * 2)(_Timespec(*atime), _Timespec(*mtime))
    if _utimensat(dir_fd, os.fsencode(name), times, AT_SYMLINK_NOFOLLOW) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), name)
