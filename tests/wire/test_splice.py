"""splice(): relaying between mux streams and real TCP sockets, with half-close and errors."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import struct
from collections.abc import AsyncIterator

from cornus_core.wire import Mux, MuxStream, StreamReset, splice

from .pairs import socket_mux_pair


@contextlib.asynccontextmanager
async def digest_server() -> AsyncIterator[int]:
    """A TCP service: reads the request to EOF, answers its SHA-256 and length, then the data reversed."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        writer.write(hashlib.sha256(data).hexdigest().encode() + b" %d\n" % len(data) + data[::-1])
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_mux_stream_to_tcp_with_half_close() -> None:
    payload = os.urandom(3 * 1024 * 1024 + 17)
    async with digest_server() as port, socket_mux_pair() as (client, server):

        async def relay() -> tuple[int, int, BaseException | None]:
            stream = await server.accept_stream()
            result = await splice(stream, await asyncio.open_connection("127.0.0.1", port))
            return result.a_to_b, result.b_to_a, result.error

        relaying = asyncio.create_task(relay())
        stream = await client.open_stream()
        for at in range(0, len(payload), 100_000):
            stream.write(payload[at : at + 100_000])
            await stream.drain()
        stream.close()  # the FIN becomes the socket's EOF, which makes the service answer
        head = await stream.readline()
        assert head == hashlib.sha256(payload).hexdigest().encode() + b" %d\n" % len(payload)
        assert await stream.read() == payload[::-1]
        up, down, error = await asyncio.wait_for(relaying, 10)
        assert (up, down, error) == (len(payload), len(head) + len(payload), None)


async def test_mux_to_mux_relay_both_directions() -> None:
    size = 8 * 1024 * 1024
    async with socket_mux_pair() as (caretaker, server_in), socket_mux_pair() as (caller, server_out):

        async def relay() -> tuple[int, int]:
            inbound = await server_in.accept_stream()
            outbound = await server_out.open_stream()
            result = await splice(inbound, outbound)
            assert result.error is None
            return result.a_to_b, result.b_to_a

        async def caller_side() -> bytes:
            stream = await caller.accept_stream()
            digest = hashlib.sha256()
            while chunk := await stream.read_chunk():
                digest.update(chunk)
                stream.write(bytes(chunk)[::-1])
                await stream.drain()
            await stream.aclose()
            return digest.digest()

        async def send(stream: MuxStream, data: bytes) -> None:
            for at in range(0, len(data), 65536):
                stream.write(data[at : at + 65536])
                await stream.drain()
            stream.close()

        relaying = asyncio.create_task(relay())
        answering = asyncio.create_task(caller_side())
        stream = await caretaker.open_stream()
        data = os.urandom(size)
        sending = asyncio.create_task(send(stream, data))
        received = hashlib.sha256()
        total = 0
        while chunk := await stream.read_chunk():
            received.update(chunk)
            total += len(chunk)
        await sending
        assert total == size
        assert await answering == hashlib.sha256(data).digest()
        assert await asyncio.wait_for(relaying, 10) == (size, size)


async def test_reset_on_one_side_aborts_the_other() -> None:
    async with socket_mux_pair() as (a_side, relay_a), socket_mux_pair() as (b_side, relay_b):

        async def relay() -> BaseException | None:
            result = await splice(await relay_a.accept_stream(), await relay_b.open_stream())
            return result.error

        relaying = asyncio.create_task(relay())
        a = await a_side.open_stream()
        a.write(b"hello")
        b = await b_side.accept_stream()
        assert await b.readexactly(5) == b"hello"
        a.reset()
        error = await asyncio.wait_for(relaying, 10)
        assert isinstance(error, StreamReset)
        try:
            await asyncio.wait_for(b.read(), 10)
            raise AssertionError("the far side should have been reset")
        except StreamReset:
            pass


async def test_socket_abort_resets_the_mux_stream() -> None:
    closed = asyncio.Event()

    async def rude(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        writer.transport.abort()
        closed.set()

    tcp = await asyncio.start_server(rude, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    async with socket_mux_pair() as (client, server):

        async def relay(mux: Mux) -> BaseException | None:
            stream = await mux.accept_stream()
            return (await splice(stream, await asyncio.open_connection("127.0.0.1", port))).error

        relaying = asyncio.create_task(relay(server))
        stream = await client.open_stream()
        stream.write(b"ping")
        await closed.wait()
        error = await asyncio.wait_for(relaying, 10)
        assert isinstance(error, ConnectionError)
        try:
            while await asyncio.wait_for(stream.read(), 10):
                pass
            raise AssertionError("the mux stream should have been reset")
        except StreamReset:
            pass
    tcp.close()
