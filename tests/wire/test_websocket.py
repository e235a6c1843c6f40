"""The mux over a real WebSocket: dialing with a token, a peer process that dies, bad peers."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection, serve

from cornus_core.wire import (
    DialError,
    Hello,
    MuxStream,
    SessionClosed,
    dial_websocket,
    encode_hello,
    websocket_options,
)

from .pairs import websocket_mux_pair

SERVER = Path(__file__).with_name("ws_echo_server.py")


@asynccontextmanager
async def echo_process() -> AsyncIterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(await asyncio.to_thread(process.stdout.readline))
        yield process, f"ws://127.0.0.1:{port}/"
    finally:
        process.kill()
        process.wait(10)


async def test_dial_with_bearer_token_and_echo() -> None:
    async with echo_process() as (_, url):
        mux = await dial_websocket(url, token="secret", proxy=None)
        stream = await mux.open_stream()
        stream.write(b"over a real websocket")
        stream.close()
        assert await stream.read() == b"over a real websocket"
        await mux.aclose()


async def test_wrong_token_is_a_dial_error_with_the_status() -> None:
    async with echo_process() as (_, url):
        with pytest.raises(DialError, match="HTTP 401") as info:
            await dial_websocket(url, token="wrong", proxy=None)
        assert info.value.status == 401


async def test_nothing_listening_is_a_dial_error() -> None:
    with pytest.raises(DialError, match="could not connect") as info:
        await dial_websocket("ws://127.0.0.1:1/", proxy=None)
    assert info.value.status is None


async def test_peer_process_killed_mid_transfer_fails_every_stream() -> None:
    async with echo_process() as (process, url):
        mux = await dial_websocket(url, token="secret", proxy=None)
        streams = [await mux.open_stream() for _ in range(16)]

        async def pump(stream: MuxStream) -> None:
            block = os.urandom(64 * 1024)
            reader = asyncio.create_task(drain_reads(stream))
            try:
                while True:
                    stream.write(block)
                    await stream.drain()
            finally:
                reader.cancel()

        async def drain_reads(stream: MuxStream) -> None:
            while await stream.read(1 << 20):
                pass

        jobs = [asyncio.create_task(pump(s)) for s in streams]
        await asyncio.sleep(0.3)
        process.send_signal(signal.SIGKILL)
        async with asyncio.timeout(5):
            results = await asyncio.gather(*jobs, return_exceptions=True)
        assert all(isinstance(r, SessionClosed) for r in results), results
        assert mux.is_closed
        with pytest.raises(SessionClosed):
            await streams[0].read()


async def test_256_mib_on_one_stream_over_loopback_websocket() -> None:
    total = 256 << 20
    block = os.urandom(1 << 20)
    async with websocket_mux_pair() as (client, server):
        stream = await client.open_stream()

        async def send() -> bytes:
            digest = hashlib.sha256()
            for i in range(total // len(block)):
                piece = block[i % 5 :] + block[: i % 5]
                digest.update(piece)
                stream.write(piece)
                await stream.drain()
            await stream.aclose()
            return digest.digest()

        async def receive() -> tuple[int, bytes]:
            accepted = await server.accept_stream()
            digest = hashlib.sha256()
            size = 0
            while chunk := await accepted.read_chunk():
                digest.update(chunk)
                size += len(chunk)
            return size, digest.digest()

        async with asyncio.timeout(60):
            sent, (size, got) = await asyncio.gather(send(), receive())
        assert (size, got) == (total, sent)


async def test_garbage_after_the_hello_ends_the_session_with_a_protocol_error() -> None:
    async def bad_peer(ws: ServerConnection) -> None:
        await ws.send(encode_hello(Hello()))
        await ws.recv()  # the client's hello
        await ws.send(b"\x01" + bytes(11))  # yamux version 1: malformed
        await ws.wait_closed()

    async with serve(bad_peer, "127.0.0.1", 0, **websocket_options()) as server:
        port = server.sockets[0].getsockname()[1]
        mux = await dial_websocket(f"ws://127.0.0.1:{port}/", proxy=None)
        async with asyncio.timeout(5):
            await mux.wait_closed()
        assert "protocol error from the peer: unsupported yamux version 1" in str(mux.close_reason)
