"""Several tasks may drain one stream together, as with asyncio's StreamWriter."""

from __future__ import annotations

import asyncio

from cornus_core.wire import Mux, StreamTransport


async def _pair() -> tuple[Mux, Mux]:
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Future()
    server = await asyncio.start_server(lambda r, w: accepted.set_result((r, w)), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client_rw = await asyncio.open_connection("127.0.0.1", port)
    server_rw = await accepted
    server.close()
    a = Mux(StreamTransport(*client_rw), client=True)
    b = Mux(StreamTransport(*server_rw), client=False)
    return a, b


async def test_concurrent_drains_on_one_stream() -> None:
    a, b = await _pair()
    try:
        stream = await a.open_stream()
        peer_task = asyncio.ensure_future(b.accept_stream())
        chunk = b"x" * (256 * 1024)

        async def writer(tag: bytes) -> None:
            for _ in range(8):
                stream.write(tag + chunk)
                await stream.drain()

        async def reader() -> bytes:
            peer = await peer_task
            data = bytearray()
            while len(data) < 4 * 8 * (len(chunk) + 1):
                data += await peer.read(1 << 20)
            return bytes(data)

        received, *_ = await asyncio.gather(reader(), *(writer(bytes([65 + i])) for i in range(4)))
        assert len(received) == 4 * 8 * (len(chunk) + 1)
        for i in range(4):
            assert received.count(bytes([65 + i])) == 8
    finally:
        await a.aclose()
        await b.aclose()
