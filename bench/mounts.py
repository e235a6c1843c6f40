"""Client-local mount throughput: sequential read/write MB/s and small-file ops/s through the FUSE mount
over the full relay (FUSE -> 9P client -> caretaker link -> server -> caller -> export), side by side
with the same work on the caller's directory directly, in the same run.

Everything runs in this one process (server, caller session, the mount role and the workload threads),
so the CPU-seconds are the whole relay's, and the figures are a floor: in a pod the three hops run on
three machines. Needs root and FUSE.

    .venv/bin/python bench/mounts.py [--mib 64] [--files 400] [--repeat 3]

Last line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from caretaker.config import MountConfig
from caretaker.link import ServerLink
from caretaker.roles.mount import MountRole
from caretaker.telemetry import Telemetry
from cornus_core.caller import CallerSession
from cornus_core.events import Ready
from cornus_core.ninep.fuse import fuse_unavailable
from cornus_core.spec import DeploySpec
from server.app import CornusServer
from server.auth import Authenticator, new_secret
from server.backends.process import ProcessBackend
from server.gateway import Gateway

TOKEN = "bench-caller-token"
# The deployment's own caretaker only reports ready: this process runs the mount role instead.
PLACEHOLDER_CARETAKER = [sys.executable, "-c", "import time; print('READY {}', flush=True); time.sleep(3600)"]
CHUNK = 1 << 20
SMALL = 4096


def timed(fn: Callable[[], int]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this whole process, work units) of one run of ``fn``."""
    wall, cpu = time.perf_counter(), time.process_time()
    units = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, units


def seq_write(root: Path, data: bytes) -> int:
    with open(root / "seq.bin", "wb") as f:
        for at in range(0, len(data), CHUNK):
            f.write(data[at : at + CHUNK])
        os.fsync(f.fileno())
    return len(data)


def seq_read(root: Path) -> int:
    total = 0
    with open(root / "seq.bin", "rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            total += len(chunk)
    return total


def small_create(root: Path, count: int) -> int:
    (root / "small").mkdir(exist_ok=True)
    block = b"x" * SMALL
    for i in range(count):
        with open(root / "small" / f"f{i:05d}", "wb") as f:
            f.write(block)
    return count


def small_stat(root: Path, count: int) -> int:
    for i in range(count):
        os.stat(root / "small" / f"f{i:05d}")
    return count


def small_read(root: Path, count: int) -> int:
    for i in range(count):
        with open(root / "small" / f"f{i:05d}", "rb") as f:
            f.read()
    return count


def small_unlink(root: Path, count: int) -> int:
    for i in range(count):
        os.unlink(root / "small" / f"f{i:05d}")
    os.rmdir(root / "small")
    return count


def run_suite(root: Path, data: bytes, files: int, repeat: int) -> dict[str, dict[str, float]]:
    """Median figures of each phase over ``repeat`` runs: rate (MB/s or ops/s) and CPU-s per unit."""
    phases: dict[str, tuple[Callable[[], int], float]] = {
        "seq_write_MBps": (lambda: seq_write(root, data), 1 << 20),
        "seq_read_MBps": (lambda: seq_read(root), 1 << 20),
        "small_create_ops": (lambda: small_create(root, files), 1),
        "small_stat_ops": (lambda: small_stat(root, files), 1),
        "small_read_ops": (lambda: small_read(root, files), 1),
        "small_unlink_ops": (lambda: small_unlink(root, files), 1),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in phases}
    for _ in range(repeat):
        for name, (fn, unit) in phases.items():
            wall, cpu, units = timed(fn)
            samples[name].append((units / unit / wall, cpu / (units / unit)))
    return {
        name: {"rate": statistics.median(r for r, _ in runs), "cpu_per_unit": statistics.median(c for _, c in runs)}
        for name, runs in samples.items()
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64, help="size of the sequential file (MiB)")
    parser.add_argument("--files", type=int, default=400, help="small files per phase")
    parser.add_argument("--repeat", type=int, default=3, help="runs per phase (medians are reported)")
    args = parser.parse_args()
    why = fuse_unavailable()
    if os.geteuid() != 0 or why is not None:
        print(f"bench/mounts.py needs root and FUSE ({why or 'not root'})", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="cornus-bench-mounts-"))
    export, target = work / "export", work / "pod" / "mnt"
    export.mkdir()
    data = os.urandom(args.mib << 20)
    server = CornusServer(auth=Authenticator(TOKEN, new_secret()),
                          backend=ProcessBackend(caretaker_argv=PLACEHOLDER_CARETAKER, host_mounts=True),
                          gateway=Gateway(enabled=False))  # fmt: skip
    await server.start()
    events: list[Any] = []
    spec = DeploySpec.model_validate({"command": "sleep 3600", "mounts": [{"source": str(export),
                                                                           "target": str(target)}]})
    session = CallerSession(server.url, TOKEN, spec, on_event=events.append)
    task = asyncio.create_task(session.run())
    link: ServerLink | None = None
    role: MountRole | None = None
    try:
        assert server.registry is not None
        while not (ready := [e.deployment for e in events if isinstance(e, Ready)]):
            if task.done():
                raise RuntimeError(f"the session ended: {task.result()}")
            await asyncio.sleep(0.05)
        dep = server.registry.deployments[ready[0]].deployment
        assert dep is not None
        link = ServerLink(dep.server_url, dep.caretaker_token)
        link.start()
        await link.wait_up(20)
        mounts = [MountConfig.model_validate(m) for m in dep.caretaker_config["mounts"]]
        role = MountRole(mounts, link, Telemetry(), mechanism="fuse")
        await role.start()

        direct = await asyncio.to_thread(run_suite, export, data, args.files, args.repeat)
        mounted = await asyncio.to_thread(run_suite, target, data, args.files, args.repeat)
    finally:
        if role is not None:
            await role.aclose()
        if link is not None:
            await link.aclose()
        if not task.done():
            await session.down()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
        await server.close()
        shutil.rmtree(work, ignore_errors=True)

    print(f"{'phase':<18} {'mount':>12} {'direct':>12} {'ratio':>7} {'mount CPU-s/unit':>17} {'direct CPU-s/unit':>18}")
    figures: dict[str, Any] = {"mib": args.mib, "files": args.files, "repeat": args.repeat, "phases": {}}
    for name in direct:
        m, d = mounted[name], direct[name]
        ratio = m["rate"] / d["rate"] if d["rate"] else 0.0
        print(f"{name:<18} {m['rate']:>12.1f} {d['rate']:>12.1f} {ratio:>7.3f} "
              f"{m['cpu_per_unit']:>17.6f} {d['cpu_per_unit']:>18.6f}")  # fmt: skip
        figures["phases"][name] = {"mount": round(m["rate"], 2), "direct": round(d["rate"], 2),
                                   "ratio": round(ratio, 4), "mount_cpu_s_per_unit": round(m["cpu_per_unit"], 6),
                                   "direct_cpu_s_per_unit": round(d["cpu_per_unit"], 6)}  # fmt: skip
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
