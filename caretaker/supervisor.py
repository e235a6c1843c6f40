"""Keep the caretaker's long-lived tasks running: one that fails or ends is started again, with capped
exponential backoff, and every restart is reported (it shows up in the caller's session as a caretaker
log line)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("caretaker.supervisor")

FIRST_DELAY = 0.5
MAX_DELAY = 30.0
HEALTHY_AFTER = 60.0  # a task that ran this long before failing starts over from FIRST_DELAY


class Supervisor:
    def __init__(self, report: Callable[[str], None] | None = None, *, first_delay: float = FIRST_DELAY,
                 max_delay: float = MAX_DELAY, healthy_after: float = HEALTHY_AFTER) -> None:
        self._report = report
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._healthy_after = healthy_after
        self._tasks: set[asyncio.Task[None]] = set()
        self.restarts: collections.Counter[str] = collections.Counter()

    def start(self, name: str, run: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``run()`` as ``name``, starting it again whenever it returns or raises, until the returned
        task is cancelled or :meth:`aclose`."""
        task = asyncio.create_task(self._keep(name, run), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _keep(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        delay = self._first_delay
        while True:
            started = time.monotonic()
            try:
                await run()
                what = "ended"
            except Exception as exc:
                what = f"failed: {type(exc).__name__}: {exc}"
            if time.monotonic() - started >= self._healthy_after:
                delay = self._first_delay
            self.restarts[name] += 1
            message = f"{name} {what}; restarting in {delay:g} s (restart {self.restarts[name]})"
            log.warning("%s", message)
            if self._report is not None:
                self._report(message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_delay)

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
