"""Throughput, latency and connection rate through caretaker -> server -> caller -> target, side by
side with direct connections to the same target in the same run.

Processes: cornus-server (spawns the caretaker), the caller (plain-mode session), and this script
(the app and the targets). CPU-seconds are read from /proc for each. Every process, this one included,
runs the event loop our processes use (uvloop when installed). The connection rate is measured with
16 connections open at once, and also at 1 and 64 to show how it scales with concurrency.

    .venv/bin/python bench/relay.py [--mb 512] [--seconds 3] [--concurrency 16] [--sweep 1,64]

Last line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time

from cornus_core import aio

CLK = os.sysconf("SC_CLK_TCK")
CHUNK = 256 * 1024


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


async def source_server(total: int) -> tuple[asyncio.Server, int]:
    """Sends `total` bytes to whoever connects (after reading one request byte)."""
    block = os.urandom(CHUNK)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        left = total
        while left > 0:
            n = min(left, CHUNK)
            writer.write(block[:n])
            left -= n
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def echo_server() -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def connect(port: int, proxy: int | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if proxy is None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    else:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy)
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"proxy refused: {head!r}")
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


async def throughput(port: int, proxy: int | None, total: int) -> float:
    reader, writer = await connect(port, proxy)
    start = time.perf_counter()
    writer.write(b"g")
    got = 0
    while data := await reader.read(CHUNK):
        got += len(data)
    elapsed = time.perf_counter() - start
    writer.close()
    assert got == total, (got, total)
    return total / elapsed / 1e6


async def rtt(port: int, proxy: int | None, count: int) -> list[float]:
    reader, writer = await connect(port, proxy)
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        writer.write(b"x")
        await reader.readexactly(1)
        samples.append((time.perf_counter() - start) * 1e6)
    writer.close()
    return samples


async def conn_rate(port: int, proxy: int | None, seconds: float, concurrency: int) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            reader, writer = await connect(port, proxy)
            writer.write(b"x")
            await reader.readexactly(1)
            writer.close()
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / (time.perf_counter() - start)


def pct(samples: list[float], q: float) -> float:
    samples = sorted(samples)
    return samples[min(len(samples) - 1, int(q * len(samples)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=512, help="bytes per throughput run, MiB")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of the connection-rate run")
    parser.add_argument("--concurrency", type=int, default=16, help="connections open at once in the rate run")
    parser.add_argument("--sweep", default="1,64", help="other concurrencies to measure the rate at (comma list)")
    args = parser.parse_args()
    total = args.mb * 1024 * 1024

    source, source_port = await source_server(total)
    echo, echo_port = await echo_server()
    token = secrets.token_urlsafe(16)
    env = {**os.environ, "CORNUS_AUTH_TOKEN": token}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        server_port = s.getsockname()[1]
    data_dir = f"/tmp/cornus-bench-{os.getpid()}"
    server = subprocess.Popen([sys.executable, "-m", "server.cli", "--listen", f"127.0.0.1:{server_port}",
                               "--data-dir", data_dir, "--backend", "process"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert server.stdout is not None
    server.stdout.readline()  # "listening on"
    spec = {"command": ["sh", "-c", 'echo "proxy=$HTTP_PROXY"; exec sleep 3600'],
            "egress": {"mode": "proxy", "rules": [{"pattern": "127.0.0.1", "route": "client"}]}}
    caller_code = (
        "import json, sys\n"
        "from cornus_core import aio\n"
        "from cornus_tui.plain import run_plain\n"
        "from cornus_core.spec import DeploySpec\n"
        "spec = DeploySpec.model_validate(json.loads(sys.argv[1]))\n"
        "sys.exit(aio.run(run_plain(spec, server_url=sys.argv[2], as_json=True)))\n"
    )
    events_path = f"{data_dir}.events"
    with open(events_path, "w") as events_out:  # a file, never a pipe the bench must keep draining
        caller = subprocess.Popen(
            [sys.executable, "-c", caller_code, json.dumps(spec), f"ws://127.0.0.1:{server_port}"],
            env={**env, "NO_PROXY": "", "no_proxy": ""}, stdout=events_out, stderr=subprocess.DEVNULL,
        )
    proxy_port = None
    with open(events_path) as events_in:
        while proxy_port is None:
            line = events_in.readline()
            if not line:
                if caller.poll() is not None:
                    raise SystemExit("the session ended before the workload started")
                time.sleep(0.05)
                continue
            event = json.loads(line)
            if event.get("type") == "log" and event.get("line", "").startswith("proxy="):
                proxy_port = int(event["line"].rsplit(":", 1)[1])
    caretaker = children(server.pid)[0]
    procs = {"server": server.pid, "caretaker": caretaker, "caller": caller.pid, "bench": os.getpid()}

    try:
        direct_mbps = statistics.median([await throughput(source_port, None, total) for _ in range(2)])
        cpu0 = {k: cpu_seconds(p) for k, p in procs.items()}
        runs = [await throughput(source_port, proxy_port, total) for _ in range(2)]
        cpu1 = {k: cpu_seconds(p) for k, p in procs.items()}
        relay_mbps = statistics.median(runs)
        gb = 2 * total / 1e9
        cpu_per_gb = {k: round((cpu1[k] - cpu0[k]) / gb, 2) for k in procs}
        relay_cpu = round(sum(v for k, v in cpu_per_gb.items() if k != "bench"), 2)

        await rtt(echo_port, proxy_port, 100)  # warm up
        direct_rtt = await rtt(echo_port, None, 2000)
        relay_rtt = await rtt(echo_port, proxy_port, 2000)
        direct_cps = await conn_rate(echo_port, None, args.seconds, args.concurrency)
        cpu2 = {k: cpu_seconds(p) for k, p in procs.items()}
        relay_cps = await conn_rate(echo_port, proxy_port, args.seconds, args.concurrency)
        cpu3 = {k: cpu_seconds(p) for k, p in procs.items()}
        sweep = {args.concurrency: relay_cps}
        for level in (int(x) for x in args.sweep.split(",") if x.strip()):
            sweep[level] = await conn_rate(echo_port, proxy_port, args.seconds, level)
        conns = relay_cps * args.seconds
        cpu_ms_per_conn = {k: round((cpu3[k] - cpu2[k]) * 1000 / conns, 3) for k in procs}
    finally:
        caller.terminate()
        caller.wait(30)
        server.terminate()
        server.wait(10)
        os.unlink(events_path)
        source.close()
        echo.close()

    figures = {
        "relay_MBps": round(relay_mbps, 1),
        "direct_MBps": round(direct_mbps, 1),
        "relay_vs_direct": round(relay_mbps / direct_mbps, 3),
        "relay_cpu_s_per_GB": relay_cpu,
        "cpu_s_per_GB_by_process": cpu_per_gb,
        "rtt_p50_us": round(pct(relay_rtt, 0.5)),
        "rtt_p99_us": round(pct(relay_rtt, 0.99)),
        "direct_rtt_p50_us": round(pct(direct_rtt, 0.5)),
        "direct_rtt_p99_us": round(pct(direct_rtt, 0.99)),
        "conn_per_s": round(relay_cps),
        "conn_concurrency": args.concurrency,
        "conn_per_s_by_concurrency": {str(k): round(v) for k, v in sorted(sweep.items())},
        "direct_conn_per_s": round(direct_cps),
        "cpu_ms_per_conn_by_process": cpu_ms_per_conn,
    }
    print(f"throughput   relay {relay_mbps:8.1f} MB/s   direct {direct_mbps:8.1f} MB/s "
          f"({relay_mbps / direct_mbps:.2f}x)")
    print(f"cpu per GB   {cpu_per_gb}")
    print(f"rtt          relay p50 {figures['rtt_p50_us']} us p99 {figures['rtt_p99_us']} us   "
          f"direct p50 {figures['direct_rtt_p50_us']} us")
    print(f"connections  relay {relay_cps:.0f}/s   direct {direct_cps:.0f}/s   ({args.concurrency} at once)   "
          f"CPU ms per connection {cpu_ms_per_conn}")
    print("             relay by concurrency " + "   ".join(f"{k}: {v:.0f}/s" for k, v in sorted(sweep.items())))
    print(json.dumps(figures))


if __name__ == "__main__":
    aio.run(main())  # the app and the targets run on the same event loop as our processes
