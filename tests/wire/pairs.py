"""Two muxes joined by a real socket pair, or by a real loopback WebSocket."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from websockets.asyncio.server import ServerConnection, serve

from cornus_core.wire import (
    Mux,
    MuxConfig,
    StreamTransport,
    accept_websocket,
    dial_websocket,
    open_mux,
    websocket_options,
)
from cornus_core.wire.frames import Payload

READ_LIMIT = 1024 * 1024


async def socket_transports() -> tuple[StreamTransport, StreamTransport]:
    left, right = socket.socketpair()
    a = StreamTransport(*await asyncio.open_connection(sock=left, limit=READ_LIMIT))
    b = StreamTransport(*await asyncio.open_connection(sock=right, limit=READ_LIMIT))
    return a, b


@asynccontextmanager
async def socket_mux_pair(
    client_config: MuxConfig | None = None, server_config: MuxConfig | None = None
) -> AsyncIterator[tuple[Mux, Mux]]:
    ta, tb = await socket_transports()
    client, server = await asyncio.gather(
        open_mux(ta, client=True, config=client_config), open_mux(tb, client=False, config=server_config)
    )
    try:
        yield client, server
    finally:
        await asyncio.gather(client.aclose(timeout=1), server.aclose(timeout=1))


@asynccontextmanager
async def websocket_mux_pair(config: MuxConfig | None = None) -> AsyncIterator[tuple[Mux, Mux]]:
    accepted: asyncio.Queue[Mux] = asyncio.Queue()

    async def handler(ws: ServerConnection) -> None:
        mux = await accept_websocket(ws, config=config)
        await accepted.put(mux)
        await mux.wait_closed()

    async with serve(handler, "127.0.0.1", 0, **websocket_options(config)) as server:
        port = server.sockets[0].getsockname()[1]
        client = await dial_websocket(f"ws://127.0.0.1:{port}/", config=config, proxy=None)
        server_mux = await asyncio.wait_for(accepted.get(), 10)
        try:
            yield client, server_mux
        finally:
            await asyncio.gather(client.aclose(timeout=1), server_mux.aclose(timeout=1))


class DelayedTransport:
    """A real transport seen through a delay line: every chunk arrives ``delay`` seconds late, as over a
    long-distance link. Reads ahead, so the delay adds latency without limiting throughput."""

    def __init__(self, inner: StreamTransport, delay: float) -> None:
        self.inner = inner
        self.delay = delay
        self._arrivals: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self._pump = asyncio.create_task(self._read_ahead())

    async def _read_ahead(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await self.inner.receive()
            await self._arrivals.put((loop.time() + self.delay, data))
            if not data:
                return

    async def receive(self) -> bytes:
        due, data = await self._arrivals.get()
        await asyncio.sleep(max(0.0, due - asyncio.get_running_loop().time()))
        return data

    async def send(self, pieces: Sequence[Payload]) -> None:
        await self.inner.send(pieces)

    async def close(self) -> None:
        self._pump.cancel()
        await self.inner.close()


@asynccontextmanager
async def delayed_mux_pair(delay: float) -> AsyncIterator[tuple[Mux, Mux]]:
    ta, tb = await socket_transports()
    client, server = await asyncio.gather(
        open_mux(DelayedTransport(ta, delay), client=True),
        open_mux(DelayedTransport(tb, delay), client=False),
    )
    try:
        yield client, server
    finally:
        await asyncio.gather(client.aclose(timeout=1), server.aclose(timeout=1))
