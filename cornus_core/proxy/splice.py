"""Byte streams as the listener sees them, and the two-way splice between two of them."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol

CHUNK = 64 * 1024


class ByteReader(Protocol):
    async def read(self, n: int = -1, /) -> bytes: ...


class ByteWriter(Protocol):
    """What the splice needs from a writer: ``asyncio.StreamWriter`` and mux streams both fit."""

    def write(self, data: bytes, /) -> None: ...

    async def drain(self) -> None: ...

    def write_eof(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class ByteCount:
    up: int = 0  # app -> destination
    down: int = 0  # destination -> app


async def splice(
    app: tuple[ByteReader, ByteWriter],
    dest: tuple[ByteReader, ByteWriter],
    count: ByteCount,
    *,
    first_up: bytes = b"",
    first_down: bytes = b"",
) -> None:
    """Copy both ways until both directions end, passing each EOF on as a half-close.

    ``first_up`` / ``first_down`` are bytes already read from one side (e.g. data a client sent
    right behind its CONNECT). A read or write error ends both directions. Memory is bounded by one
    chunk per direction: each write is drained before the next read.
    """

    async def pump(reader: ByteReader, writer: ByteWriter, first: bytes, up: bool) -> None:
        data = first
        while True:
            if data:
                writer.write(data)
                await writer.drain()
                if up:
                    count.up += len(data)
                else:
                    count.down += len(data)
            data = await reader.read(CHUNK)
            if not data:
                break
        with contextlib.suppress(OSError, RuntimeError, NotImplementedError):
            writer.write_eof()  # TLS transports cannot half-close; the peer then sees the full close

    def end_app_on_failure(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            app[1].close()  # ends this task's read from the app as well

    # One direction runs in this task: a connection costs one extra task, not two.
    other = asyncio.create_task(pump(dest[0], app[1], first_down, False))
    other.add_done_callback(end_app_on_failure)
    try:
        await pump(app[0], dest[1], first_up, True)
    except OSError:
        other.cancel()  # one direction failed: the other ends too
    except BaseException:
        other.cancel()
        raise
    try:
        await other
    except OSError:
        pass
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
