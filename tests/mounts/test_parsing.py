"""The small mappings and parsers under the mount role, fuzzed: open flags and mountinfo paths."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from cornus_core.mountinfo import unescape_mount_point
from cornus_core.ninep.constants import OpenFlag
from cornus_core.ninep.fuse import ninep_open_flags

HOST_FLAGS = [os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_EXCL, os.O_TRUNC, os.O_APPEND, os.O_NONBLOCK,
              os.O_DIRECTORY, os.O_NOFOLLOW, os.O_CLOEXEC, os.O_DSYNC, os.O_SYNC, os.O_NOATIME]  # fmt: skip


@given(st.lists(st.sampled_from(HOST_FLAGS)))
def test_open_flags_keep_the_access_mode_and_only_what_the_export_honours(chosen: list[int]) -> None:
    flags = 0
    for flag in chosen:
        flags |= flag
    if flags & os.O_ACCMODE == os.O_ACCMODE:
        flags &= ~os.O_WRONLY
    p9 = ninep_open_flags(flags)
    assert p9 & 0o3 == flags & os.O_ACCMODE
    expected = {
        OpenFlag.CREATE: os.O_CREAT, OpenFlag.EXCL: os.O_EXCL, OpenFlag.TRUNC: os.O_TRUNC,
        OpenFlag.DIRECTORY: os.O_DIRECTORY, OpenFlag.DSYNC: os.O_DSYNC,
    }  # fmt: skip
    for p9_flag, host in expected.items():
        assert bool(p9 & p9_flag) == bool(flags & host)
    assert bool(p9 & OpenFlag.SYNC) == (flags & os.O_SYNC == os.O_SYNC)
    allowed = 0o3 | OpenFlag.SYNC
    for p9_flag in expected:
        allowed |= p9_flag
    assert p9 & ~allowed == 0  # APPEND, NONBLOCK, NOFOLLOW, CLOEXEC, NOATIME are not passed on


def _escape(path: str) -> str:
    """How the kernel writes a path into /proc/self/mountinfo."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


@given(st.text())
def test_mountinfo_paths_unescape_to_what_was_mounted(path: str) -> None:
    assert unescape_mount_point(_escape(path)) == path


@given(st.text(alphabet=st.sampled_from("\\0123456789a ")))
def test_mountinfo_unescape_takes_any_text(field: str) -> None:
    assert isinstance(unescape_mount_point(field), str)
