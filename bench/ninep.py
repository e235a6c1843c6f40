"""9P2000.L server benchmark.

1. Our server (``python -m cornus_core.ninep``, its own process) driven by our asyncio client over
   loopback TCP: sequential write and read MB/s of one large file, small-file create/read/stat/unlink
   ops/s. Baseline: the same sequential I/O done directly on the local filesystem in this process.
2. Fairness: latency of small requests from one client while another streams 1 MiB reads, with large
   reads on worker threads (the default) and with everything on the event loop.
3. When a cached kernel-client guest (tests/ninep/kernel) and ``diod`` are both present: the Linux v9fs
   client under QEMU against our server and against diod, same workload, side by side.

Prints figures with CPU-seconds, then ONE JSON object on the last line.
usage: python bench/ninep.py [--mb 256] [--small 1000] [--no-kernel]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cornus_core.ninep import Client, serve_tcp  # noqa: E402
from cornus_core.ninep.constants import OpenFlag  # noqa: E402
from tests.ninep.kernel.guest import cache_dir, ensure_guest, run_guest  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def our_server(root: Path) -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cornus_core.ninep", str(root), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield proc.pid, int(line.split()[2].rsplit(":", 1)[1])
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def rate(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else float("inf")


# ---------------------------------------------------------------------------- 1. loopback client
async def loopback(port: int, server_pid: int, mb: int, small: int) -> dict[str, float]:
    data = os.urandom(1 << 20) * mb
    out: dict[str, float] = {}
    async with await Client.connect("127.0.0.1", port, msize=1 << 20) as c:
        for phase in ("write", "read"):
            cpu0, own0, t0 = cpu_seconds(server_pid), time.process_time(), time.perf_counter()
            if phase == "write":
                await c.write_file("big", data, window=4)
            else:
                got = await c.read_file("big", window=4)
                assert len(got) == len(data)
            seconds = time.perf_counter() - t0
            out[f"{phase}_MBps"] = rate(mb, seconds)
            out[f"{phase}_server_cpu_s"] = cpu_seconds(server_pid) - cpu0
            out[f"{phase}_client_cpu_s"] = time.process_time() - own0
        await c.unlink("big")
        await c.mkdir("small")
        cpu0, t_all = cpu_seconds(server_pid), 0.0
        names = [("small", f"f{i}") for i in range(small)]
        phases = {
            "create": lambda p: c.write_file(p, b"small file\n"),
            "read": lambda p: c.read_file(p),
            "stat": lambda p: c.stat(p),
            "unlink": lambda p: c.unlink(p),
        }
        for name, op in phases.items():
            t0 = time.perf_counter()
            for p in names:
                await op(p)
            seconds = time.perf_counter() - t0
            t_all += seconds
            out[f"small_{name}_ops_per_s"] = rate(small, seconds)
        out["small_ops_per_s"] = rate(4 * small, t_all)
        out["small_server_cpu_s"] = cpu_seconds(server_pid) - cpu0
    return out


def local_baseline(root: Path, mb: int) -> dict[str, float]:
    """Plain sequential I/O on the same filesystem, 1 MiB at a time, in this process."""
    block = os.urandom(1 << 20)
    path = root / "baseline"
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for i in range(mb):
        os.pwrite(fd, block, i << 20)
    os.close(fd)
    write = time.perf_counter() - t0
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    while os.read(fd, 1 << 20):
        pass
    os.close(fd)
    read = time.perf_counter() - t0
    path.unlink()
    return {"local_write_MBps": rate(mb, write), "local_read_MBps": rate(mb, read)}


# ---------------------------------------------------------------------------- 2. fairness
async def fairness(root: Path, offload_bytes: int) -> dict[str, float]:
    (root / "stream").write_bytes(os.urandom(64 << 20))
    async with (
        await serve_tcp(root, "127.0.0.1", 0, offload_bytes=offload_bytes) as srv,
        await Client.connect(*srv.address) as bulk,
        await Client.connect(*srv.address) as small,
    ):
        stop = asyncio.Event()

        async def stream() -> None:
            fid, _ = await bulk.walk("stream")
            await bulk.lopen(fid, OpenFlag.RDONLY)
            offset = 0
            while not stop.is_set():
                parts = await asyncio.gather(
                    *(bulk.read(fid, offset + i * bulk.iounit, bulk.iounit) for i in range(4))
                )
                offset = 0 if len(parts[-1]) < bulk.iounit else offset + 4 * bulk.iounit
            await bulk.clunk(fid)

        task = asyncio.create_task(stream())
        await asyncio.sleep(0.2)
        latencies = []
        for _ in range(300):
            t0 = time.perf_counter()
            await small.stat("stream")
            latencies.append(time.perf_counter() - t0)
        stop.set()
        await task
    (root / "stream").unlink()
    latencies.sort()
    return {
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * len(latencies))],
    }


# ---------------------------------------------------------------------------- 3. kernel client
def kernel_side_by_side(mb: int, small: int) -> dict[str, float | None]:
    results: dict[str, float | None] = {}
    guest = ensure_guest()
    sizes = {"BIG_MB": mb, "SMALL_N": small}
    for name in ("ours", "diod"):
        with tempfile.TemporaryDirectory(prefix=f"ninep-bench-{name}-") as tmp:
            export = Path(tmp)
            if name == "ours":
                with our_server(export) as (pid, port):
                    cpu0 = cpu_seconds(pid)
                    run = run_guest(guest, port, "bench", sizes=sizes)
                    cpu = cpu_seconds(pid) - cpu0
            else:
                port = free_port()
                proc = subprocess.Popen(
                    ["diod", "-f", "-n", "-l", f"127.0.0.1:{port}", "-e", str(export), "-L", "stderr"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                try:
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:
                        with socket.socket() as s:
                            if s.connect_ex(("127.0.0.1", port)) == 0:
                                break
                        time.sleep(0.1)
                    cpu0 = cpu_seconds(proc.pid)
                    run = run_guest(guest, port, "bench", options=f"aname={export}", sizes=sizes)
                    cpu = cpu_seconds(proc.pid) - cpu0
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
        ok, detail = run.steps.get("bench", (False, "no result"))
        if not ok:
            print(f"kernel bench against {name} failed: {detail}\n{run.console[-1500:]}", file=sys.stderr)
            continue
        f = dict(kv.split("=") for kv in detail.split())
        ms = {k: max(int(v), 1) for k, v in f.items() if k.endswith("_ms")}
        prefix = "kernel" if name == "ours" else "diod"
        results[f"{prefix}_write_MBps"] = 1000 * mb / ms["write_ms"]
        results[f"{prefix}_read_MBps"] = 1000 * mb / ms["read_ms"]
        small_ms = ms["create_ms"] + ms["read_small_ms"] + ms["stat_ms"] + ms["unlink_ms"]
        results[f"{prefix}_small_ops_per_s"] = 1000 * 4 * small / small_ms
        results[f"{prefix}_server_cpu_s"] = cpu
        print(f"  kernel client vs {name:4}: write {results[f'{prefix}_write_MBps']:.1f} MB/s, read "
              f"{results[f'{prefix}_read_MBps']:.1f} MB/s, small {results[f'{prefix}_small_ops_per_s']:.0f} ops/s, "
              f"server CPU {cpu:.1f} s ({run.seconds:.0f} s wall, cache {cache_dir()})")  # fmt: skip
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=256, help="size of the sequential file (MiB)")
    parser.add_argument("--small", type=int, default=1000, help="number of small files")
    parser.add_argument("--kernel-mb", type=int, default=64)
    parser.add_argument("--kernel-small", type=int, default=300)
    parser.add_argument("--no-kernel", action="store_true", help="skip the kernel-client comparison")
    args = parser.parse_args()
    summary: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory(prefix="ninep-bench-") as tmp:
        root = Path(tmp)
        base = local_baseline(root, args.mb)
        with our_server(root) as (pid, port):
            ours = asyncio.run(loopback(port, pid, args.mb, args.small))
        print(
            f"our server, our client, loopback TCP, msize 1 MiB, {args.mb} MiB file, {args.small} small files:"
        )
        for phase in ("write", "read"):
            ratio = ours[f"{phase}_MBps"] / base[f"local_{phase}_MBps"]
            print(f"  sequential {phase:5}: {ours[f'{phase}_MBps']:7.1f} MB/s  (local fs {base[f'local_{phase}_MBps']:.0f}"
                  f" MB/s, ratio {ratio:.2f}); server CPU {ours[f'{phase}_server_cpu_s']:.2f} s, "
                  f"client CPU {ours[f'{phase}_client_cpu_s']:.2f} s")  # fmt: skip
        rates = ", ".join(
            f"{op} {ours[f'small_{op}_ops_per_s']:.0f}/s" for op in ("create", "read", "stat", "unlink")
        )
        print(f"  small files: {rates}; all {ours['small_ops_per_s']:.0f} ops/s, "
              f"server CPU {ours['small_server_cpu_s']:.2f} s")  # fmt: skip
        summary |= {k: ours[k] for k in ("read_MBps", "write_MBps", "small_ops_per_s")}
        summary |= {"local_read_MBps": base["local_read_MBps"], "local_write_MBps": base["local_write_MBps"]}
        offloaded = asyncio.run(fairness(root, 64 * 1024))
        inline = asyncio.run(fairness(root, 1 << 40))
        print(f"fairness, stat latency beside a 1 MiB read stream: worker threads p50 {offloaded['p50_ms']:.2f} ms "
              f"p99 {offloaded['p99_ms']:.2f} ms; all on the loop p50 {inline['p50_ms']:.2f} ms "
              f"p99 {inline['p99_ms']:.2f} ms")  # fmt: skip
        summary |= {"stat_p99_ms_offloaded": offloaded["p99_ms"], "stat_p99_ms_inline": inline["p99_ms"]}
    kernel: dict[str, float | None] = {}
    if args.no_kernel:
        print("kernel client: skipped (--no-kernel)")
    elif shutil.which("diod") is None or not (cache_dir() / "guest.ready").exists():
        print("kernel client: skipped (needs diod and the guest cached by tests/ninep/test_kernel_client.py)")
    else:
        print(
            f"kernel client under QEMU (software emulation), {args.kernel_mb} MiB, {args.kernel_small} small files:"
        )
        kernel = kernel_side_by_side(args.kernel_mb, args.kernel_small)
        ratios = []
        for what in ("write_MBps", "read_MBps", "small_ops_per_s"):
            ours_k, diod_k = kernel.get(f"kernel_{what}"), kernel.get(f"diod_{what}")
            if ours_k and diod_k:
                ratios.append(f"{what} {ours_k / diod_k:.2f}")
        print("  ratio ours/diod: " + (", ".join(ratios) or "n/a"))
    for key in ("diod_read_MBps", "diod_write_MBps", "diod_small_ops_per_s", "kernel_read_MBps",
                "kernel_write_MBps", "kernel_small_ops_per_s"):  # fmt: skip
        summary[key] = kernel.get(key)
    print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in summary.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
