"""Shared pieces of the credential tests: a settable clock and executable scripts."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path


class SettableClock:
    """A clock function for the cache: seconds since the epoch, moved forward by the test."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def at(self, offset: float) -> datetime:
        """The datetime offset seconds from now."""
        return datetime.fromtimestamp(self.now + offset, UTC)


def write_script(directory: Path, name: str, body: str) -> str:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return os.fspath(path)
