"""Events from the caretaker to the caller's session, on one `T` stream per server connection.

Telemetry never slows the data path: events wait in a bounded queue and are dropped (and counted)
when the server is unreachable for long.
"""

from __future__ import annotations

import asyncio
import contextlib

from cornus_core.events import Event
from cornus_core.streams import TAG_TELEMETRY
from cornus_core.wire import Mux, WireError, write_header

QUEUE_SIZE = 10_000


class Telemetry:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_SIZE)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def emit(self, event: Event) -> None:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    async def attach(self, mux: Mux) -> None:
        """Start sending on a fresh server connection (replacing the previous sender)."""
        if self._task is not None:
            self._task.cancel()
        self._task = asyncio.create_task(self._send(mux))

    async def _send(self, mux: Mux) -> None:
        with contextlib.suppress(WireError):
            stream = await mux.open_stream()
            await write_header(stream, TAG_TELEMETRY)
            while True:
                event = await self._queue.get()
                batch = [event.encode()]
                while not self._queue.empty() and len(batch) < 256:
                    batch.append(self._queue.get_nowait().encode())
                stream.write(b"".join(batch))
                await stream.drain()
