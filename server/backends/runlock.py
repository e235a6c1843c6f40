"""A server run holds a lock file for as long as it lives: a later run removes what belonged to runs
whose lock nobody holds (they crashed), and never what a live run owns."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def take(path: Path) -> int:
    """Hold ``path``'s lock for this run; returns the descriptor to keep open (children do not inherit
    it, so the lock dies with this process). BlockingIOError when another run holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def held(path: Path) -> bool:
    """Whether a live run holds ``path``'s lock (a missing file: nobody does)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
