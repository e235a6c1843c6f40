"""Bidirectional copy between two byte streams: mux streams and/or asyncio socket streams.

Each direction copies until EOF, then half-closes the other side (FIN or ``write_eof``), so protocols
that signal the end of a request by half-closing keep working through the relay. Data read from a mux
stream is passed on as zero-copy views. When either direction fails, both ends are aborted (RST /
transport abort) and the error is reported with the byte counts.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from .stream import MuxStream

SocketPair = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Endpoint = MuxStream | SocketPair


@dataclass(frozen=True, slots=True)
class SpliceResult:
    a_to_b: int  # bytes copied from a to b
    b_to_a: int  # bytes copied from b to a
    error: BaseException | None = None  # what ended the splice early, None when both sides ended cleanly


class _End:
    """One side of a splice, seen as reader and writer."""

    def __init__(self, endpoint: Endpoint, chunk: int) -> None:
        self.mux = endpoint if isinstance(endpoint, MuxStream) else None
        if self.mux is None:
            assert isinstance(endpoint, tuple)
            self.reader, self.writer = endpoint
        self.chunk = chunk

    async def read(self) -> bytes | memoryview:
        if self.mux is not None:
            return await self.mux.read_chunk(self.chunk)
        return await self.reader.read(self.chunk)

    def write(self, data: bytes | memoryview) -> None:
        if self.mux is not None:
            self.mux.write(data)
        else:
            self.writer.write(data)

    async def drain(self) -> None:
        if self.mux is not None:
            await self.mux.drain()
        else:
            await self.writer.drain()

    def write_eof(self) -> None:
        if self.mux is not None:
            self.mux.close()
        elif self.writer.can_write_eof():
            self.writer.write_eof()

    async def close(self) -> None:
        if self.mux is not None:
            await self.mux.aclose()
        else:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    def abort(self) -> None:
        if self.mux is not None:
            self.mux.reset()
        else:
            self.writer.transport.abort()


async def _pump(src: _End, dst: _End, counts: list[int], index: int) -> None:
    while True:
        data = await src.read()
        if not data:
            dst.write_eof()
            await dst.drain()
            return
        dst.write(data)
        counts[index] += len(data)
        await dst.drain()


async def splice(a: Endpoint, b: Endpoint, *, chunk: int = 256 * 1024) -> SpliceResult:
    """Copy ``a`` ⇄ ``b`` until both directions end; on return both ends are closed.

    ``a`` and ``b`` are :class:`MuxStream` objects or ``(StreamReader, StreamWriter)`` pairs. Errors
    from either end do not raise: they abort both ends and come back in :attr:`SpliceResult.error`.
    Cancelling the splice aborts both ends too.
    """
    end_a, end_b = _End(a, chunk), _End(b, chunk)
    counts = [0, 0]
    errors: list[BaseException] = []

    async def pump(src: _End, dst: _End, index: int) -> None:
        try:
            await _pump(src, dst, counts, index)
        except Exception as exc:
            if not errors:  # the first failure aborts both ends, which ends the other direction too
                errors.append(exc)
                end_a.abort()
                end_b.abort()

    # One direction runs in this task: a relayed connection costs one extra task, not two.
    other = asyncio.create_task(pump(end_b, end_a, 1))
    try:
        await pump(end_a, end_b, 0)
        await other
    except asyncio.CancelledError:
        end_a.abort()
        end_b.abort()
        other.cancel()
        raise
    if not errors:
        for end in (end_a, end_b):
            with contextlib.suppress(Exception):  # the session may be gone by now: nothing left to close
                await end.close()
    return SpliceResult(counts[0], counts[1], errors[0] if errors else None)
