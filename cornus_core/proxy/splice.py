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

    tasks = {
        asyncio.create_task(pump(app[0], dest[1], first_up, True)),
        asyncio.create_task(pump(dest[0], app[1], first_down, False)),
    }
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            error = task.exception()
            if error is not None and not isinstance(error, OSError):
                raise error  # a bug, not a network failure
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
