"""The byte transport a :class:`~cornus_core.wire.mux.Mux` runs over.

A transport moves an ordered, reliable byte stream. ``send`` takes one flushed batch of pieces (the mux
hands over control frames and data chunks together) and returns once the transport can take more, so
backpressure reaches the socket. ``receive`` returns the next chunk, ``b""`` at a clean end of stream,
and raises on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence
from typing import Protocol

from .frames import Payload


class Transport(Protocol):
    async def receive(self) -> bytes: ...

    async def send(self, pieces: Sequence[Payload]) -> None: ...

    async def close(self) -> None: ...


UNSENT_LIMIT = 128 * 1024


def tune_socket(sock: socket.socket | None) -> None:
    """Latency settings for a TCP socket carrying a mux.

    TCP_NODELAY: batches are already coalesced, never wait for Nagle. TCP_NOTSENT_LOWAT: let the kernel
    hold little data that is not yet on the wire, so queued data waits in the mux, where control frames
    and small streams can still go first, instead of in a socket buffer behind megabytes of bulk data.
    """
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, UNSENT_LIMIT)


def _join(pieces: Sequence[Payload]) -> Payload:
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class StreamTransport:
    """A transport over asyncio ``StreamReader``/``StreamWriter`` (TCP, Unix socket, socket pair)."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, read_size: int = 256 * 1024
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.read_size = read_size
        tune_socket(writer.get_extra_info("socket"))

    async def receive(self) -> bytes:
        return await self.reader.read(self.read_size)

    async def send(self, pieces: Sequence[Payload]) -> None:
        self.writer.write(_join(pieces))
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
