"""Wire benchmark: the mux over loopback WebSocket between two processes.

Measures, against baselines taken in the same run and on the same pair of processes:
  - one-stream throughput (client -> server upload), MB/s and CPU-seconds per GB (both processes);
  - 32-stream aggregate throughput;
  - 1-byte request/response latency on a separate stream while 2 upload + 2 download bulk streams run;
  - the product's path: one stream relayed caretaker -> server -> caller (three processes, the server
    splicing mux stream to mux stream), MB/s and CPU-seconds per GB of all three;
  - baselines: raw loopback TCP (asyncio streams), and plain websockets without the mux.

Usage: python bench/wire.py [--runs 3] [--mib 1024] [--samples 2000]
Each figure is the median of --runs runs. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from cornus_core import aio
from cornus_core.wire import (
    Mux,
    MuxStream,
    accept_websocket,
    dial_websocket,
    read_header,
    splice,
    websocket_options,
    write_header,
)

CHUNK = 256 * 1024
BLOB = os.urandom(CHUNK)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU of a process (this one by default), from /proc."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


# ---------------------------------------------------------------------------------------------- server


CALLER: asyncio.Future[Mux] | None = None


async def relay(stream: MuxStream) -> None:
    """The server's part of the product's path: splice the stream to a fresh stream on the caller."""
    assert CALLER is not None
    upstream = await (await CALLER).open_stream()
    await write_header(upstream, "S")
    await splice(stream, upstream)


async def serve_mux_stream(stream: MuxStream) -> None:
    header = await read_header(stream)
    if header.tag == "S":  # sink: count to EOF, answer the count
        n = 0
        while chunk := await stream.read_chunk():
            n += len(chunk)
        stream.write(b"%d\n" % n)
    elif header.tag == "D":  # download: send the requested number of bytes
        left = int(header["bytes"])
        while left > 0:
            piece = BLOB if left >= CHUNK else BLOB[:left]
            stream.write(piece)
            left -= len(piece)
            await stream.drain()
    elif header.tag == "R":  # relay to the caller's process
        await relay(stream)
        return
    elif header.tag == "E":  # echo
        while chunk := await stream.read_chunk():
            stream.write(chunk)
            await stream.drain()
    await stream.aclose()


async def mux_handler(ws: ServerConnection) -> None:
    mux = await accept_websocket(ws)
    if ws.request is not None and ws.request.path == "/caller":
        assert CALLER is not None
        CALLER.set_result(mux)
        await mux.wait_closed()
        return
    tasks = set()
    async for stream in mux:
        task = asyncio.create_task(serve_mux_stream(stream))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


async def plain_ws_handler(ws: ServerConnection) -> None:
    n = 0
    async for message in ws:
        if isinstance(message, str):
            break
        n += len(message)
    await ws.send(str(n))


async def tcp_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    n = 0
    while data := await reader.read(CHUNK):
        n += len(data)
    writer.write(b"%d\n" % n)
    await writer.drain()
    writer.close()


async def run_server() -> None:
    global CALLER
    CALLER = asyncio.get_running_loop().create_future()
    options = websocket_options()
    async with (
        serve(mux_handler, "127.0.0.1", 0, **options) as mux_server,
        serve(plain_ws_handler, "127.0.0.1", 0, **options) as ws_server,
    ):
        tcp_server = await asyncio.start_server(tcp_handler, "127.0.0.1", 0, limit=CHUNK)
        ports = [s.sockets[0].getsockname()[1] for s in (mux_server, ws_server, tcp_server)]
        print(*ports, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent exits


async def run_caller(port: int) -> None:
    """The caller's process: dial the server, answer the streams it opens (sinks)."""
    mux = await dial_websocket(f"ws://127.0.0.1:{port}/caller", proxy=None)
    print("ready", flush=True)
    tasks = set()
    async for stream in mux:
        task = asyncio.create_task(serve_mux_stream(stream))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


# ---------------------------------------------------------------------------------------------- client


async def upload(mux: Mux, nbytes: int, tag: str = "S") -> None:
    stream = await mux.open_stream()
    await write_header(stream, tag)
    left = nbytes
    while left > 0:
        piece = BLOB if left >= CHUNK else BLOB[:left]
        stream.write(piece)
        left -= len(piece)
        await stream.drain()
    stream.close()
    got = int(await stream.readline())
    assert got == nbytes, (got, nbytes)


async def download(mux: Mux, nbytes: int) -> None:
    stream = await mux.open_stream()
    await write_header(stream, "D", {"bytes": str(nbytes)})
    stream.close()
    n = 0
    while chunk := await stream.read_chunk():
        n += len(chunk)
    assert n == nbytes, (n, nbytes)


async def tcp_upload(port: int, nbytes: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=CHUNK)
    left = nbytes
    while left > 0:
        piece = BLOB if left >= CHUNK else BLOB[:left]
        writer.write(piece)
        left -= len(piece)
        await writer.drain()
    writer.write_eof()
    assert int(await reader.readline()) == nbytes
    writer.close()


async def plain_ws_upload(port: int, nbytes: int) -> None:
    async with connect(f"ws://127.0.0.1:{port}/", proxy=None, **websocket_options()) as ws:
        left = nbytes
        while left > 0:
            piece = BLOB if left >= CHUNK else BLOB[:left]
            await ws.send(piece)
            left -= len(piece)
        await ws.send("end")
        assert int(await ws.recv()) == nbytes


async def measure(server_pid: int, nbytes: int, job: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """(MB/s, CPU-seconds per GB of both processes) for one transfer of ``nbytes``."""
    cpu0, srv0, t0 = cpu_seconds(), cpu_seconds(server_pid), time.perf_counter()
    await job()
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0 + cpu_seconds(server_pid) - srv0
    return nbytes / elapsed / 1e6, cpu / (nbytes / 1e9)


async def latency_under_bulk(mux: Mux, samples: int, bulk_bytes: int) -> tuple[float, float, float]:
    """p50/p99 of 1-byte echo round trips (ms) while 2 uploads and 2 downloads run; and the bulk MB/s."""
    echo = await mux.open_stream()
    await write_header(echo, "E")
    for _ in range(20):  # warm up, idle
        echo.write(b"x")
        await echo.readexactly(1)
    stop = asyncio.Event()

    async def bulk(job: Callable[[Mux, int], Awaitable[None]]) -> int:
        moved = 0
        while not stop.is_set():
            await job(mux, bulk_bytes)
            moved += bulk_bytes
        return moved

    t0 = time.perf_counter()
    bulks = [asyncio.create_task(bulk(upload if i % 2 == 0 else download)) for i in range(4)]
    await asyncio.sleep(0.3)  # let the bulk streams fill their windows
    rtts = []
    for _ in range(samples):
        start = time.perf_counter()
        echo.write(b"x")
        await echo.readexactly(1)
        rtts.append((time.perf_counter() - start) * 1e3)
    stop.set()
    moved = sum(await asyncio.gather(*bulks))
    bulk_mbps = moved / (time.perf_counter() - t0) / 1e6
    echo.close()
    rtts.sort()
    return rtts[len(rtts) // 2], rtts[int(len(rtts) * 0.99)], bulk_mbps


async def run_client(args: argparse.Namespace) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        mux_port, ws_port, tcp_port = map(int, server.stdout.readline().split())
        caller = subprocess.Popen(
            [sys.executable, __file__, "--caller", str(mux_port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert caller.stdout is not None and caller.stdout.readline().strip() == b"ready"
        nbytes = args.mib << 20
        results: dict[str, list[float]] = {}

        def record(name: str, value: float) -> None:
            results.setdefault(name, []).append(value)

        for run in range(args.runs):
            mbps, cpu = await measure(server.pid, nbytes, lambda: tcp_upload(tcp_port, nbytes))
            record("tcp_MBps", mbps)
            record("tcp_cpu_s_per_GB", cpu)
            mbps, cpu = await measure(server.pid, nbytes, lambda: plain_ws_upload(ws_port, nbytes))
            record("ws_MBps", mbps)
            record("ws_cpu_s_per_GB", cpu)

            mux = await dial_websocket(f"ws://127.0.0.1:{mux_port}/", proxy=None)
            mbps, cpu = await measure(server.pid, nbytes, lambda m=mux: upload(m, nbytes))
            record("one_stream_MBps", mbps)
            record("cpu_s_per_GB", cpu)

            async def many(m: Mux = mux) -> None:
                await asyncio.gather(*(upload(m, nbytes // 32) for _ in range(32)))

            mbps, cpu = await measure(server.pid, nbytes, many)
            record("streams32_MBps", mbps)
            record("streams32_cpu_s_per_GB", cpu)

            p50, p99, bulk_mbps = await latency_under_bulk(mux, args.samples, 16 << 20)
            record("ping_p50_ms_under_bulk", p50)
            record("ping_p99_ms_under_bulk", p99)
            record("bulk_MBps_during_ping", bulk_mbps)
            relay_cpu0 = cpu_seconds(caller.pid)
            mbps, cpu = await measure(server.pid, nbytes, lambda m=mux: upload(m, nbytes, "R"))
            record("relay_MBps", mbps)
            record("relay_cpu_s_per_GB", cpu + (cpu_seconds(caller.pid) - relay_cpu0) / (nbytes / 1e9))
            idle = []
            for _ in range(200):
                idle.append(await mux.ping() * 1e3)
            record("ping_ms_idle", statistics.median(idle))
            await mux.aclose()
            print(
                f"run {run + 1}: " + ", ".join(f"{k}={v[-1]:.2f}" for k, v in results.items()),
                file=sys.stderr,
                flush=True,
            )
        return {k: round(statistics.median(v), 3) for k, v in results.items()}
    finally:
        for process in (server, caller):
            process.terminate()
            process.wait(5)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--caller", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=1024, help="bytes per throughput transfer, in MiB")
    parser.add_argument("--samples", type=int, default=2000, help="latency samples per run")
    args = parser.parse_args()
    if args.serve:
        aio.run(run_server())
        return
    if args.caller:
        aio.run(run_caller(args.caller))
        return
    figures = aio.run(run_client(args))
    print(f"\nmedians of {args.runs} runs, {args.mib} MiB per transfer, loopback, 2 processes:")
    print(
        f"  raw TCP (asyncio streams)    {figures['tcp_MBps']:8.0f} MB/s  {figures['tcp_cpu_s_per_GB']:.2f} CPU-s/GB"
    )
    print(
        f"  websockets, no mux           {figures['ws_MBps']:8.0f} MB/s  {figures['ws_cpu_s_per_GB']:.2f} CPU-s/GB"
    )
    print(
        f"  mux, one stream              {figures['one_stream_MBps']:8.0f} MB/s  {figures['cpu_s_per_GB']:.2f} CPU-s/GB"
    )
    print(
        f"  mux, 32 streams              {figures['streams32_MBps']:8.0f} MB/s  "
        f"{figures['streams32_cpu_s_per_GB']:.2f} CPU-s/GB"
    )
    print(
        f"  1-byte echo under bulk       p50 {figures['ping_p50_ms_under_bulk']:.2f} ms  "
        f"p99 {figures['ping_p99_ms_under_bulk']:.2f} ms  (bulk {figures['bulk_MBps_during_ping']:.0f} MB/s; "
        f"idle mux ping {figures['ping_ms_idle']:.3f} ms)"
    )
    print(
        f"  relay caretaker->server->caller {figures['relay_MBps']:5.0f} MB/s  "
        f"{figures['relay_cpu_s_per_GB']:.2f} CPU-s/GB (three processes)"
    )
    figures["one_stream_vs_ws"] = round(figures["one_stream_MBps"] / figures["ws_MBps"], 3)
    figures["one_stream_vs_tcp"] = round(figures["one_stream_MBps"] / figures["tcp_MBps"], 3)
    print(
        f"  one stream / plain websockets = {figures['one_stream_vs_ws']:.2f}, / raw TCP = {figures['one_stream_vs_tcp']:.2f}"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
