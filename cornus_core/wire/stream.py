"""One logical stream of a :class:`~cornus_core.wire.mux.Mux`, with an asyncio-streams feel.

Reading: ``read(n)`` (``b""`` at EOF), ``readexactly``, ``readuntil``, ``readline`` and the zero-copy
``read_chunk``. Writing: ``write`` + ``drain`` (blocks while more than the mux's write buffer is queued),
``close``/``write_eof`` (half-close, FIN), ``aclose`` (FIN and wait until it is handed to the transport),
``reset`` (RST). After the peer resets the stream, buffered data can still be read, then
:class:`StreamReset` is raised; after the session dies, :class:`SessionClosed` is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from .errors import StreamReset, WireError, WriteAfterClose
from .frames import Payload

if TYPE_CHECKING:
    from .mux import Mux


class MuxStream:
    def __init__(self, mux: Mux, stream_id: int) -> None:
        self._mux = mux
        self.id = stream_id
        self._chunks: deque[Payload] = deque()
        self._size = 0
        self._credited = 0  # buffered bytes at the front already credited back to the peer
        self._eof = False  # FIN received
        self._read_error: WireError | None = None  # raised once the buffer is empty
        self._write_error: WireError | None = None
        self._write_closed = False
        self._read_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._drain_level = 0

    def __repr__(self) -> str:
        return (
            f"<MuxStream {self.id} buffered={self._size} eof={self._eof} write_closed={self._write_closed}>"
        )

    # ------------------------------------------------------------------ reading

    def at_eof(self) -> bool:
        """True once the peer half-closed and every buffered byte was read."""
        return self._eof and not self._size

    async def _wait_data(self) -> bool:
        """Wait until data is buffered: False at EOF, raises the read error."""
        while not self._size:
            if self._read_error is not None:
                raise self._read_error
            if self._eof:
                return False
            await self._wait_more()
        return True

    def _consume(self, n: int) -> None:
        self._size -= n
        credit = n - self._credited
        self._credited = max(0, self._credited - n)
        if credit > 0:
            self._mux._consumed(self.id, credit)

    def _credit_ahead(self) -> None:
        """Give the peer credit for everything buffered, before the application takes it."""
        if self._size > self._credited:
            self._mux._consumed(self.id, self._size - self._credited)
            self._credited = self._size

    async def read_chunk(self, n: int = -1) -> memoryview:
        """Up to ``n`` bytes (any amount if negative) without copying; empty at EOF."""
        if n == 0 or (not self._size and not await self._wait_data()):
            return memoryview(b"")
        chunk = self._chunks[0]
        view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
        if 0 <= n < len(view):
            self._chunks[0] = view[n:]
            view = view[:n]
        else:
            self._chunks.popleft()
        self._consume(len(view))
        return view

    def unread(self, data: bytes) -> None:
        """Put bytes taken by a read back in front of the buffer (a parser read past its message)."""
        if data:
            self._chunks.appendleft(data)
            self._size += len(data)
            self._credited += len(data)  # the peer got credit for them when they were first taken

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes as soon as any are buffered; ``b""`` at EOF. With ``n < 0``, everything
        until EOF (asyncio semantics)."""
        if n < 0:
            parts = []
            while await self._wait_data():  # take as it comes, so the window keeps moving
                parts.append(self._take(self._size))
            return b"".join(parts)
        if n == 0 or (not self._size and not await self._wait_data()):
            return b""
        return self._take(min(n, self._size))

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes; ``asyncio.IncompleteReadError`` if the stream ends first."""
        if n < 0:
            raise ValueError("readexactly size can not be less than zero")
        if self._size >= n:
            return self._take(n)
        parts = []
        need = n
        while need:  # take as it comes, so a read larger than the window completes
            if self._size:
                part = self._take(min(need, self._size))
                parts.append(part)
                need -= len(part)
            elif self._read_error is not None:
                raise self._read_error
            elif self._eof:
                raise asyncio.IncompleteReadError(b"".join(parts), n)
            else:
                await self._wait_more()
        return b"".join(parts)

    async def readuntil(self, separator: bytes = b"\n", *, limit: int = 64 * 1024) -> bytes:
        """Data up to and including ``separator``, asyncio semantics.

        ``asyncio.LimitOverrunError`` when more than ``limit`` bytes come before the separator (the data
        stays buffered); ``asyncio.IncompleteReadError`` when the stream ends first. A line longer than
        the stream's window still arrives: bytes searched without finding the separator are credited
        back to the peer while they wait here, so at most ``limit`` bytes are held.
        """
        if not separator:
            raise ValueError("separator must not be empty")
        checked = 0
        while True:
            if self._size:
                data = self._compact()
                at = data.find(separator, max(0, checked - len(separator) + 1))
                if at >= 0:
                    end = at + len(separator)
                    if end > limit:
                        raise asyncio.LimitOverrunError(
                            f"stream {self.id}: separator found {end} bytes in, over the {limit}-byte limit",
                            at,
                        )
                    return self._take(end)
                checked = len(data)
                if checked > limit:
                    raise asyncio.LimitOverrunError(
                        f"stream {self.id}: no separator within {limit} bytes", checked
                    )
            if self._read_error is not None:
                raise self._read_error
            if self._eof:
                raise asyncio.IncompleteReadError(self._take(self._size), None)
            self._credit_ahead()
            await self._wait_more()

    async def readline(self) -> bytes:
        """A line including ``\\n``; the partial line at EOF; ``ValueError`` past 64 KiB."""
        try:
            return await self.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial
        except asyncio.LimitOverrunError as exc:
            raise ValueError(str(exc)) from None

    async def _wait_more(self) -> None:
        """Wait for data beyond what is buffered now (or EOF / error)."""
        if self._read_waiter is not None:
            raise RuntimeError(f"stream {self.id}: another coroutine is already reading")
        self._read_waiter = self._mux._loop.create_future()
        try:
            await self._read_waiter
        finally:
            self._read_waiter = None

    def _compact(self) -> bytes:
        if len(self._chunks) != 1 or not isinstance(self._chunks[0], bytes):
            joined = b"".join(self._chunks)
            self._chunks.clear()
            self._chunks.append(joined)
        first = self._chunks[0]
        assert isinstance(first, bytes)
        return first

    def _take(self, n: int) -> bytes:
        chunks = self._chunks
        if not n:
            return b""
        first = chunks[0]
        if len(first) > n:
            chunks[0] = first[n:] if isinstance(first, memoryview) else memoryview(first)[n:]
            out = bytes(first[:n])
        elif len(first) == n:
            chunks.popleft()
            out = first if isinstance(first, bytes) else bytes(first)
        else:
            parts = []
            need = n
            while need:
                chunk = chunks[0]
                if len(chunk) <= need:
                    parts.append(chunks.popleft())
                    need -= len(chunk)
                else:
                    parts.append(chunk[:need])
                    chunks[0] = chunk[need:]
                    need = 0
            out = b"".join(parts)
        self._consume(n)
        return out

    # ------------------------------------------------------------------ writing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue data (bytes and read-only views are not copied). Pair with ``await drain()``."""
        if self._write_error is not None:
            raise self._write_error
        if self._write_closed:
            raise WriteAfterClose(f"stream {self.id}: write after close")
        if data:
            self._mux._send(self.id, data)

    def writelines(self, data: Iterable[bytes | bytearray | memoryview]) -> None:
        for item in data:
            self.write(item)

    async def drain(self) -> None:
        """Wait until the queued data falls to the mux's low-water mark (backpressure)."""
        if self._write_error is not None:
            raise self._write_error
        if self._mux._pending(self.id) > self._mux.config.write_buffer:
            await self._wait_drained(self._mux.config.write_buffer // 2)

    async def _wait_drained(self, level: int) -> None:
        # Several tasks may drain one stream at once (as with asyncio's StreamWriter): they share
        # one waiter, woken at the lowest level any of them asked for.
        waiter = self._drain_waiter
        if waiter is None or waiter.done():
            self._drain_level = level
            waiter = self._drain_waiter = self._mux._loop.create_future()
            self._mux._drainers.add(self)
        else:
            self._drain_level = min(self._drain_level, level)
        try:
            await asyncio.shield(waiter)
        finally:
            if waiter.done() and self._drain_waiter is waiter:
                self._drain_waiter = None
                self._mux._drainers.discard(self)
        if self._write_error is not None:
            raise self._write_error

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        """Half-close: send FIN after the queued data. Reading goes on until the peer's FIN."""
        if self._write_closed or self._write_error is not None:
            return
        self._write_closed = True
        self._mux._end(self.id)

    write_eof = close

    async def aclose(self) -> None:
        """Half-close and wait until the FIN (and all queued data) went to the transport."""
        self.close()
        if self._write_error is None and self._mux._pending(self.id):
            await self._wait_drained(0)

    async def wait_closed(self) -> None:
        """Like ``StreamWriter.wait_closed``: wait until a closed stream's FIN went to the transport."""
        if self._write_closed and self._write_error is None and self._mux._pending(self.id):
            await self._wait_drained(0)

    def reset(self) -> None:
        """Abort the stream both ways (RST); buffered data is discarded."""
        self._mux._reset(self.id)
        self._chunks.clear()
        self._size = self._credited = 0
        self._fail(StreamReset(f"stream {self.id} was reset by this side"), keep_buffer=False)

    @property
    def closed(self) -> bool:
        """No more data will flow either way (both FINs, a reset, or the session ended)."""
        read_done = self._eof or self._read_error is not None
        return read_done and (self._write_closed or self._write_error is not None)

    async def __aenter__(self) -> MuxStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            await self.aclose()
        else:
            self.reset()

    # ------------------------------------------------------------------ fed by the mux

    def _feed(self, data: Payload) -> None:
        self._chunks.append(data)
        self._size += len(data)
        self._wake_reader()

    def _feed_eof(self) -> None:
        self._eof = True
        self._wake_reader()

    def _fail(self, exc: WireError, *, keep_buffer: bool = True) -> None:
        """Stop the stream. With ``keep_buffer`` (a peer reset, the session ending), data already
        received stays readable and a stream that already saw the peer's FIN still ends cleanly."""
        if not keep_buffer or (self._read_error is None and not self._eof):
            self._read_error = exc
        if self._write_error is None:
            self._write_error = exc
        self._wake_reader()
        self._wake_drainer()

    def _wake_reader(self) -> None:
        waiter = self._read_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_drainer(self) -> None:
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
