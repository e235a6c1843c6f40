"""This mount namespace's mount points, read from /proc/self/mountinfo (bind mounts included, which
``os.path.ismount`` misses when they stay on one filesystem)."""

from __future__ import annotations

import os


def unescape_mount_point(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes come as octal escapes."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points() -> list[str]:
    """Every mount point of this mount namespace, in mount order (one per mount: stacked ones repeat)."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as mountinfo:
        return [unescape_mount_point(line.split()[4]) for line in mountinfo if line.strip()]


def mounted_under(root: str | os.PathLike[str]) -> list[str]:
    """Mount points at or below ``root``."""
    base = os.path.realpath(root)
    return [p for p in mount_points() if p == base or p.startswith(base + os.sep)]
