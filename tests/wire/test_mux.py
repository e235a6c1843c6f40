"""The asyncio Mux over real transports: a socket pair and a loopback WebSocket."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random

import pytest

from cornus_core.wire import (
    INITIAL_WINDOW,
    Hello,
    KeepaliveTimeout,
    Mux,
    MuxConfig,
    MuxStream,
    SessionClosed,
    StreamReset,
    WriteAfterClose,
    encode_hello,
    open_mux,
)

from .pairs import delayed_mux_pair, socket_mux_pair, socket_transports


async def echo_server(mux: Mux) -> None:
    async def echo(stream: MuxStream) -> None:
        while chunk := await stream.read_chunk():
            stream.write(chunk)
            await stream.drain()
        await stream.aclose()

    tasks = set()
    async for stream in mux:
        task = asyncio.create_task(echo(stream))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


async def test_echo_and_half_close(mux_pair) -> None:  # type: ignore[no-untyped-def]
    async with mux_pair() as (client, server):
        serving = asyncio.create_task(echo_server(server))
        stream = await client.open_stream()
        stream.write(b"line one\nline two\n")
        await stream.drain()
        assert await stream.readline() == b"line one\n"
        assert await stream.readuntil(b"two") == b"line two"
        assert await stream.readexactly(1) == b"\n"
        stream.close()
        assert await stream.read() == b""
        assert stream.at_eof()
        with pytest.raises(WriteAfterClose):
            stream.write(b"late")
        serving.cancel()


async def test_server_can_open_streams_too(mux_pair) -> None:  # type: ignore[no-untyped-def]
    async with mux_pair() as (client, server):
        serving = asyncio.create_task(echo_server(client))
        stream = await server.open_stream()
        assert stream.id % 2 == 0
        stream.write(b"from the server")
        stream.close()
        assert await stream.read(100) + await stream.read() == b"from the server"
        serving.cancel()


async def test_thousand_concurrent_streams_echo_checksummed_payloads(mux_pair) -> None:  # type: ignore[no-untyped-def]
    async with mux_pair() as (client, server):
        serving = asyncio.create_task(echo_server(server))
        rng = random.Random(7)

        async def one(i: int) -> None:
            payload = rng.randbytes(rng.randint(1, 64 * 1024))
            stream = await client.open_stream()
            writer = asyncio.create_task(write_all(stream, payload))
            received = hashlib.sha256()
            size = 0
            while chunk := await stream.read(65536):
                received.update(chunk)
                size += len(chunk)
            await writer
            assert (size, received.digest()) == (len(payload), hashlib.sha256(payload).digest()), i

        async def write_all(stream: MuxStream, payload: bytes) -> None:
            for at in range(0, len(payload), 8192):
                stream.write(payload[at : at + 8192])
                await stream.drain()
            await stream.aclose()

        async with asyncio.timeout(60):
            await asyncio.gather(*(one(i) for i in range(1000)))
        assert client.stream_count == 0
        serving.cancel()


async def test_one_gib_on_one_stream_over_a_socket_pair() -> None:
    total = 1 << 30
    block = os.urandom(1 << 20)
    async with socket_mux_pair() as (client, server):
        sender = await client.open_stream()

        async def send() -> str:
            digest = hashlib.sha256()
            for i in range(total // len(block)):
                piece = block[i % 7 :] + block[: i % 7]  # vary the content per block
                digest.update(piece)
                sender.write(piece)
                await sender.drain()
            await sender.aclose()
            return digest.hexdigest()

        async def receive() -> tuple[int, str, int]:
            stream = await server.accept_stream()
            digest = hashlib.sha256()
            size = 0
            while chunk := await stream.read_chunk():
                digest.update(chunk)
                size += len(chunk)
            return size, digest.hexdigest()

        async with asyncio.timeout(120):
            sent, (size, got) = await asyncio.gather(send(), receive())
        assert size == total
        assert got == sent


async def test_window_grows_on_a_long_link_for_a_fast_reader() -> None:
    async with delayed_mux_pair(0.02) as (client, server):  # a 40 ms round trip
        sender = await client.open_stream()
        block = bytes(256 * 1024)

        async def send() -> None:
            for _ in range(64):
                sender.write(block)
                await sender.drain()
            await sender.aclose()

        task = asyncio.create_task(send())
        stream = await server.accept_stream()
        largest = 0
        while await stream.read_chunk():
            largest = max(largest, server.window(stream))
        await task
        assert largest >= 4 * INITIAL_WINDOW  # 256 KiB per 40 ms is far below what the link carries
        assert client.min_rtt is not None and client.min_rtt >= 0.04
        assert client.flight_limit is not None and client.flight_limit > 2 * client.config.min_flight
        fresh = await client.open_stream()
        fresh.write(b"?")
        assert server.window(await server.accept_stream()) == INITIAL_WINDOW


async def test_stopped_reader_keeps_memory_bounded_and_blocks_the_writer(mux_pair) -> None:  # type: ignore[no-untyped-def]
    async with mux_pair() as (client, server):
        sender = await client.open_stream()
        sender.write(b"x")
        receiver = await server.accept_stream()
        assert await receiver.readexactly(1) == b"x"  # the reader takes one byte, then stops
        written = 0
        block = bytes(64 * 1024)

        async def flood() -> None:
            nonlocal written
            while True:
                sender.write(block)
                written += len(block)
                await sender.drain()

        flooding = asyncio.create_task(flood())
        async with asyncio.timeout(10):
            while server.buffered(receiver) < INITIAL_WINDOW - 1:  # the window, less the byte read
                await asyncio.sleep(0.01)
        for _ in range(20):  # the pipeline is full: give the writer every chance to push more
            await asyncio.sleep(0.01)
        assert not flooding.done()
        assert server.buffered(receiver) == INITIAL_WINDOW - 1
        assert server.window(receiver) == INITIAL_WINDOW
        queued = client._pending(sender.id)
        assert queued <= client.config.write_buffer + len(block)
        assert written <= INITIAL_WINDOW + queued + len(block)

        total = 0
        while total < 4 * INITIAL_WINDOW:  # reading again releases the writer
            total += len(await receiver.read(1 << 20))
        assert written > 2 * INITIAL_WINDOW
        flooding.cancel()


async def test_peer_reset_fails_reads_and_writes(mux_pair) -> None:  # type: ignore[no-untyped-def]
    async with mux_pair() as (client, server):
        stream = await client.open_stream()
        stream.write(b"hello")
        accepted = await server.accept_stream()
        assert await accepted.readexactly(5) == b"hello"
        accepted.write(b"tail")
        async with asyncio.timeout(5):
            while client.buffered(stream) < 4:
                await asyncio.sleep(0.005)
        accepted.reset()
        await client.ping()  # the RST went out before the pong, so it has arrived now
        assert await stream.readexactly(4) == b"tail"  # data that arrived before the RST is kept
        with pytest.raises(StreamReset, match="reset by the peer"):
            await stream.read()
        with pytest.raises(StreamReset):
            stream.write(b"more")
        with pytest.raises(StreamReset, match="reset by this side"):
            await accepted.read()


async def test_local_reset_reaches_the_accepting_side(mux_pair) -> None:  # type: ignore[no-untyped-def]
    async with mux_pair() as (client, server):
        stream = await client.open_stream()
        stream.write(b"abc")
        accepted = await server.accept_stream()
        await accepted.readexactly(3)
        stream.reset()
        with pytest.raises(StreamReset):
            await accepted.read()
        with pytest.raises(StreamReset):
            await accepted.drain()
        other = await client.open_stream()  # the session itself is fine
        other.write(b"ok")
        assert await (await server.accept_stream()).readexactly(2) == b"ok"


async def test_transport_killed_mid_transfer_fails_every_stream_promptly() -> None:
    ta, tb = await socket_transports()
    config = MuxConfig(keepalive_interval=None)  # only the transport's death can end the session
    client, server = await asyncio.gather(
        open_mux(ta, client=True, config=config), open_mux(tb, client=False, config=config)
    )
    streams = [await client.open_stream() for _ in range(20)]
    accepted = [await server.accept_stream() for _ in range(20)]

    async def flood(stream: MuxStream) -> None:
        block = bytes(32 * 1024)
        while True:
            stream.write(block)
            await stream.drain()

    async def read_forever(stream: MuxStream) -> None:
        while await stream.read(65536):
            pass

    jobs = [asyncio.create_task(flood(s)) for s in streams[:10]]
    jobs += [asyncio.create_task(read_forever(s)) for s in streams[10:]]
    jobs += [asyncio.create_task(read_forever(s)) for s in accepted[:10]]
    await asyncio.sleep(0.2)
    tb.writer.transport.abort()  # the server side's socket dies
    async with asyncio.timeout(5):
        results = await asyncio.gather(*jobs, return_exceptions=True)
    for result in results:
        assert isinstance(result, SessionClosed), result
    assert client.is_closed and server.is_closed
    with pytest.raises(SessionClosed, match="transport"):
        await client.open_stream()
    with pytest.raises(SessionClosed):
        await client.accept_stream()
    await asyncio.wait_for(client.wait_closed(), 5)


async def test_go_away_lets_open_streams_finish_and_refuses_new_ones(mux_pair) -> None:  # type: ignore[no-untyped-def]
    async with mux_pair() as (client, server):
        serving = asyncio.create_task(echo_server(server))
        stream = await client.open_stream()
        stream.write(b"before")
        assert await stream.readexactly(6) == b"before"
        server.go_away()
        async with asyncio.timeout(5):
            while not client.peer_went_away:
                await client.ping()
        with pytest.raises(SessionClosed, match="go-away"):
            await client.open_stream()
        stream.write(b"after")  # the open stream still works
        assert await stream.readexactly(5) == b"after"
        stream.close()
        assert await stream.read() == b""
        serving.cancel()


async def test_aclose_flushes_and_ends_the_peer_session(mux_pair) -> None:  # type: ignore[no-untyped-def]
    async with mux_pair() as (client, server):
        stream = await client.open_stream()
        stream.write(b"last words")
        stream.close()
        await client.aclose()
        accepted = await server.accept_stream()
        assert await accepted.read() == b"last words"
        async with asyncio.timeout(5):
            await server.wait_closed()
        assert isinstance(server.close_reason, SessionClosed)
        with pytest.raises(SessionClosed, match="closed by this side"):
            await client.open_stream()


async def test_keepalive_timeout_fails_the_session_when_the_peer_goes_silent() -> None:
    left, right = await socket_transports()
    await right.send([encode_hello(Hello())])  # the peer says hello, then never answers again
    mux = await open_mux(left, client=True, config=MuxConfig(keepalive_interval=0.05, keepalive_timeout=0.2))
    stream = await mux.open_stream()
    async with asyncio.timeout(10):
        with pytest.raises(KeepaliveTimeout, match="keepalive"):
            await stream.read()
    assert isinstance(mux.close_reason, KeepaliveTimeout)
    await right.close()


async def test_keepalive_keeps_a_quiet_session_alive() -> None:
    config = MuxConfig(keepalive_interval=0.02, keepalive_timeout=1.0)
    async with socket_mux_pair(config, config) as (client, server):
        await asyncio.sleep(0.3)  # many keepalive rounds
        assert not client.is_closed and not server.is_closed


async def test_accept_backlog_overflow_refuses_streams() -> None:
    async with socket_mux_pair(server_config=MuxConfig(accept_backlog=2)) as (client, server):
        streams = [await client.open_stream() for _ in range(4)]
        for stream in streams:
            stream.write(b"?")
        refused = 0
        for stream in streams[2:]:
            with pytest.raises(StreamReset):
                await stream.read()
            refused += 1
        assert refused == 2
        assert (await server.accept_stream()).id == streams[0].id


async def test_read_helpers_follow_asyncio_semantics() -> None:
    async with socket_mux_pair() as (client, server):
        stream = await client.open_stream()
        stream.write(b"abc")
        stream.close()
        accepted = await server.accept_stream()
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await accepted.readexactly(10)
        assert info.value.partial == b"abc"

        stream = await client.open_stream()
        stream.write(b"x" * 100)
        accepted = await server.accept_stream()
        with pytest.raises(asyncio.LimitOverrunError):
            await accepted.readuntil(b"\n", limit=50)
        stream.write(b"\n")
        assert await accepted.readuntil(b"\n", limit=200) == b"x" * 100 + b"\n"
        stream.write(b"partial")
        stream.close()
        assert await accepted.readline() == b"partial"
        assert await accepted.readline() == b""


async def test_reads_larger_than_the_window_complete() -> None:
    async with socket_mux_pair() as (client, server):
        payload = os.urandom(4 * INITIAL_WINDOW + 3)
        stream = await client.open_stream()

        async def send() -> None:
            stream.write(payload)
            await stream.aclose()

        sending = asyncio.create_task(send())
        accepted = await server.accept_stream()
        async with asyncio.timeout(10):
            assert await accepted.readexactly(len(payload) - 1) == payload[:-1]
            assert await accepted.read() == payload[-1:]
        await sending

        line = b"x" * (3 * INITIAL_WINDOW) + b"\n"  # a line three windows long, then a payload
        stream = await client.open_stream()
        sending = asyncio.create_task(send_all(stream, line + b"after"))
        accepted = await server.accept_stream()
        async with asyncio.timeout(10):
            assert await accepted.readuntil(b"\n", limit=4 * INITIAL_WINDOW) == line
            assert await accepted.read() == b"after"
        await sending


async def send_all(stream: MuxStream, data: bytes) -> None:
    stream.write(data)
    await stream.aclose()
