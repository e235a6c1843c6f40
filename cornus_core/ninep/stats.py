"""Per-export counters for the dashboard: ops and errors by request type, bytes, latency sums.

Updated from the event loop and from I/O worker threads, hence the lock; a dashboard reads an
immutable :class:`StatsSnapshot` a few times a second and never waits on the data path.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    ops: dict[str, int] = field(default_factory=dict)  # request name ("read", "walk", ...) -> count
    errors: dict[str, int] = field(default_factory=dict)  # request name -> answered with Rlerror
    latency_s: dict[str, float] = field(default_factory=dict)  # request name -> summed service time
    bytes_read: int = 0
    bytes_written: int = 0
    sessions: int = 0  # connections currently served
    sessions_total: int = 0

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def total_errors(self) -> int:
        return sum(self.errors.values())


class ExportStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._latency: dict[str, float] = {}
        self._bytes_read = 0
        self._bytes_written = 0
        self._sessions = 0
        self._sessions_total = 0

    def record(
        self, op: str, seconds: float, *, error: bool = False, read: int = 0, written: int = 0
    ) -> None:
        with self._lock:
            self._ops[op] += 1
            self._latency[op] = self._latency.get(op, 0.0) + seconds
            if error:
                self._errors[op] += 1
            self._bytes_read += read
            self._bytes_written += written

    def session_opened(self) -> None:
        with self._lock:
            self._sessions += 1
            self._sessions_total += 1

    def session_closed(self) -> None:
        with self._lock:
            self._sessions -= 1

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(
                ops=dict(self._ops),
                errors=dict(self._errors),
                latency_s=dict(self._latency),
                bytes_read=self._bytes_read,
                bytes_written=self._bytes_written,
                sessions=self._sessions,
                sessions_total=self._sessions_total,
            )
