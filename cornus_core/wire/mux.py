"""The asyncio yamux session over any :class:`~cornus_core.wire.transport.Transport`.

A thin I/O layer over the sans-IO :class:`~cornus_core.wire.session.Session`: one task reads the
transport and dispatches events to streams, one task writes batches (control first, then fair data
chunks, as far as the windows and the session's flight limit allow) and waits on the transport, so
backpressure reaches the socket; a third task measures the round-trip time and sends keepalive pings.
When anything ends the session, every stream fails at once with :class:`SessionClosed` (or its
subclass :class:`KeepaliveTimeout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from dataclasses import dataclass, field

from .errors import KeepaliveTimeout, ProtocolError, SessionClosed, StreamReset
from .events import (
    DataReceived,
    Event,
    GoAwayReceived,
    PongReceived,
    StreamClosed,
    StreamEnded,
    StreamOpened,
    StreamResetReceived,
)
from .frames import GoAwayCode, Payload
from .hello import Hello, exchange_hello
from .session import MAX_WINDOW, Session, SessionConfig
from .stream import MuxStream
from .transport import Transport


@dataclass(frozen=True, slots=True)
class MuxConfig:
    max_window: int = MAX_WINDOW  # per-stream receive window ceiling for auto-tuning
    window_budget: int = 128 * 1024 * 1024  # total window growth across streams
    max_frame: int = 64 * 1024  # data chunk per stream per scheduling turn
    min_flight: int | None = 1024 * 1024  # session data in flight before rate x RTT allows more
    batch_size: int = 256 * 1024  # bytes handed to the transport per write (one WebSocket message)
    write_buffer: int = 256 * 1024  # per-stream queued bytes above which drain() blocks
    accept_backlog: int = 1024  # peer-opened streams waiting for accept_stream(); more are refused
    keepalive_interval: float | None = 15.0  # seconds between pings; None: one ping to measure the RTT
    keepalive_timeout: float = 10.0  # a ping unanswered this long fails the session
    session: SessionConfig = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "session",
            SessionConfig(
                max_window=self.max_window,
                window_budget=self.window_budget,
                max_frame=self.max_frame,
                min_flight=self.min_flight,
            ),
        )


class Mux:
    """A multiplexed session. Construct inside a running event loop; it starts working at once.

    ``client=True`` on the dialing side. ``initial_data`` is whatever the transport already delivered
    past a preceding exchange (the hello).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        client: bool,
        config: MuxConfig | None = None,
        initial_data: bytes = b"",
        features: frozenset[str] = frozenset(),
        peer_hello: Hello | None = None,
    ) -> None:
        self.config = config or MuxConfig()
        self.client = client
        self.features = features  # offered by both sides in the hello
        self.peer_hello = peer_hello
        self._loop = asyncio.get_running_loop()
        self._transport = transport
        self._session = Session(client=client, config=self.config.session)
        self._streams: dict[int, MuxStream] = {}
        self._backlog: deque[MuxStream] = deque()
        self._accept_waiter: asyncio.Future[None] | None = None
        self._drainers: set[MuxStream] = set()
        self._pings: dict[int, asyncio.Future[None]] = {}
        self._ping_ids = itertools.count(1)
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._error: SessionClosed | None = None
        self._closed = self._loop.create_future()
        self._shutdown_task: asyncio.Task[None] | None = None
        self._tasks = [
            asyncio.create_task(self._read_loop(initial_data), name="mux-read"),
            asyncio.create_task(self._write_loop(), name="mux-write"),
        ]
        self._tasks.append(asyncio.create_task(self._keepalive_loop(), name="mux-keepalive"))

    # ------------------------------------------------------------------ public API

    async def open_stream(self) -> MuxStream:
        """Open a stream; data can be written at once (the peer may still refuse it with RST)."""
        if self._error is not None:
            raise self._error
        sid = self._session.open_stream()
        stream = MuxStream(self, sid)
        self._streams[sid] = stream
        self._wake_writer()
        return stream

    async def accept_stream(self) -> MuxStream:
        """The next stream the peer opened. Raises :class:`SessionClosed` once the session ends."""
        while not self._backlog:
            if self._error is not None:
                raise self._error
            if self._accept_waiter is not None:
                raise RuntimeError("accept_stream() is already being awaited")
            self._accept_waiter = self._loop.create_future()
            try:
                await self._accept_waiter
            finally:
                self._accept_waiter = None
        return self._backlog.popleft()

    def __aiter__(self) -> Mux:
        return self

    async def __anext__(self) -> MuxStream:
        """Iterate accepted streams until the session ends."""
        try:
            return await self.accept_stream()
        except SessionClosed:
            raise StopAsyncIteration from None

    async def ping(self) -> float:
        """Round-trip time of one ping, in seconds."""
        if self._error is not None:
            raise self._error
        opaque = next(self._ping_ids) & 0x7FFFFFFF
        waiter = self._loop.create_future()
        self._pings[opaque] = waiter
        started = time.monotonic()
        self._session.ping(opaque)
        self._wake_writer()
        try:
            await waiter
        finally:
            self._pings.pop(opaque, None)
        rtt = time.monotonic() - started
        self._session.rtt_sample(rtt)
        return rtt

    def go_away(self, code: int = GoAwayCode.NORMAL) -> None:
        """Tell the peer this side accepts no new streams; open streams carry on."""
        if self._error is None:
            self._session.go_away(code)
            self._wake_writer()

    async def aclose(self, *, timeout: float = 5.0) -> None:
        """Orderly close: go-away, flush what is queued (bounded by ``timeout``), close the transport."""
        if self._error is None:
            self.go_away()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    while self._error is None and (self._session.wants_write or not self._idle.is_set()):
                        self._idle.clear()
                        self._wake_writer()
                        await self._idle.wait()
            self._fail(SessionClosed("session closed by this side"))
        await self.wait_closed()

    async def wait_closed(self) -> None:
        """Wait until the session has ended and the transport is closed."""
        await asyncio.shield(self._closed)

    @property
    def is_closed(self) -> bool:
        return self._error is not None

    @property
    def close_reason(self) -> SessionClosed | None:
        return self._error

    @property
    def peer_went_away(self) -> bool:
        return self._session.go_away_received is not None

    @property
    def stream_count(self) -> int:
        return len(self._streams)

    def window(self, stream: MuxStream) -> int:
        """The stream's current receive window (auto-tuned)."""
        return self._session.window(stream.id)

    @property
    def flight_limit(self) -> int | None:
        """How many data bytes the session may have in flight now (follows the path's rate x RTT)."""
        return self._session.flight.limit

    @property
    def min_rtt(self) -> float | None:
        """The smallest round-trip time measured on the session, in seconds."""
        return self._session.min_rtt

    def buffered(self, stream: MuxStream) -> int:
        """Bytes received on the stream that its reader has not consumed yet."""
        return self._session.buffered(stream.id)

    async def __aenter__(self) -> Mux:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ used by MuxStream

    def _send(self, sid: int, data: Payload | bytearray) -> None:
        if sid in self._session:
            self._session.send(sid, data)
            self._wake_writer()

    def _pending(self, sid: int) -> int:
        return self._session.pending(sid)

    def _end(self, sid: int) -> None:
        self._session.end_stream(sid)
        self._wake_writer()
        self._dispatch()

    def _reset(self, sid: int) -> None:
        if self._error is None and sid in self._session:
            self._session.reset_stream(sid)
            self._wake_writer()
            self._dispatch()

    def _consumed(self, sid: int, n: int) -> None:
        session = self._session
        session.consumed(sid, n, time.monotonic())
        if session.wants_write:
            self._wake_writer()

    # ------------------------------------------------------------------ loops

    def _wake_writer(self) -> None:
        self._wakeup.set()

    async def _read_loop(self, data: bytes) -> None:
        session = self._session
        while True:
            if data:
                try:
                    session.receive_data(data, time.monotonic())
                except ProtocolError as exc:
                    self._fail(SessionClosed(f"protocol error from the peer: {exc}"), flush=True)
                    return
                self._dispatch()
                if session.wants_write:
                    self._wakeup.set()
            try:
                data = await self._transport.receive()
            except Exception as exc:  # OSError, or the transport library's own error type
                self._fail(SessionClosed(f"transport failed while reading: {_describe(exc)}"))
                return
            if not data:
                self._fail(SessionClosed("transport closed by the peer"))
                return

    async def _write_loop(self) -> None:
        session = self._session
        batch = self.config.batch_size
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            self._idle.clear()
            while pieces := session.data_to_send(batch, time.monotonic()):
                self._dispatch()
                if self._drainers:  # producers refill while this batch is on its way
                    self._wake_drained()
                try:
                    await self._transport.send(pieces)
                except Exception as exc:
                    self._fail(SessionClosed(f"transport failed while writing: {_describe(exc)}"))
                    return
            self._idle.set()

    async def _keepalive_loop(self) -> None:
        """Measure the round-trip time at once (window growth needs it), then keep the session alive."""
        interval = self.config.keepalive_interval
        timeout = self.config.keepalive_timeout
        if interval is None:
            with contextlib.suppress(SessionClosed):
                await self.ping()
            return
        while self._error is None:
            try:
                async with asyncio.timeout(timeout):
                    await self.ping()
            except TimeoutError:
                self._fail(KeepaliveTimeout(f"peer did not answer a keepalive ping within {timeout:g} s"))
            except SessionClosed:
                return
            await asyncio.sleep(interval)

    def _wake_drained(self) -> None:
        pending = self._session.pending
        for stream in list(self._drainers):
            if pending(stream.id) <= stream._drain_level:
                stream._wake_drainer()

    def _dispatch(self) -> None:
        session = self._session
        streams = self._streams
        while events := session.events_received():
            for event in events:
                self._handle(event, streams)

    def _handle(self, event: Event, streams: dict[int, MuxStream]) -> None:
        if type(event) is DataReceived:
            stream = streams.get(event.stream_id)
            if stream is not None:
                stream._feed(event.data)
            else:  # nobody will read it: give the credit straight back
                self._session.consumed(event.stream_id, len(event.data), time.monotonic())
        elif type(event) is StreamOpened:
            if len(self._backlog) >= self.config.accept_backlog:
                self._session.reset_stream(event.stream_id)
                return
            stream = MuxStream(self, event.stream_id)
            streams[event.stream_id] = stream
            self._backlog.append(stream)
            waiter = self._accept_waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif type(event) is StreamEnded:
            stream = streams.get(event.stream_id)
            if stream is not None:
                stream._feed_eof()
        elif type(event) is StreamResetReceived:
            stream = streams.get(event.stream_id)
            if stream is not None:
                stream._fail(StreamReset(f"stream {event.stream_id} was reset by the peer"))
        elif type(event) is StreamClosed:
            streams.pop(event.stream_id, None)
        elif type(event) is PongReceived:
            waiter = self._pings.get(event.opaque)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif type(event) is GoAwayReceived:
            pass  # Session.open_stream refuses from now on; open streams carry on

    def _fail(self, error: SessionClosed, *, flush: bool = False) -> None:
        """End the session: every stream, acceptor and ping fails with ``error``."""
        if self._error is not None:
            return
        self._error = error
        for stream in self._streams.values():
            stream._fail(error)
        self._streams.clear()  # streams still in the backlog stay acceptable: their data is readable
        waiter = self._accept_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        for ping in self._pings.values():
            if not ping.done():
                ping.set_exception(error)
        self._pings.clear()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._idle.set()
        self._shutdown_task = asyncio.create_task(self._shutdown(flush), name="mux-shutdown")

    async def _shutdown(self, flush: bool) -> None:
        try:
            if flush and self._session.wants_write:  # tell the peer why (go-away with an error code)
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1.0):
                        await self._transport.send(self._session.data_to_send())
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._transport.close()
        finally:
            for task in self._tasks:
                if not task.done():
                    with contextlib.suppress(BaseException):
                        await task
            if not self._closed.done():
                self._closed.set_result(None)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def open_mux(
    transport: Transport,
    *,
    client: bool,
    hello: Hello | None = None,
    config: MuxConfig | None = None,
    hello_timeout: float = 10.0,
) -> Mux:
    """Exchange hellos over ``transport`` and start a :class:`Mux` on it.

    Raises :class:`HelloError` when the peer's hello is malformed or its version differs.
    """
    local = hello or Hello()
    peer, leftover = await exchange_hello(transport, local, timeout=hello_timeout)
    return Mux(
        transport,
        client=client,
        config=config,
        initial_data=leftover,
        features=local.features & peer.features,
        peer_hello=peer,
    )
