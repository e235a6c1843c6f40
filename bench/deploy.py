"""Deploy latency: from the caller's attach to the workload's first output line (the session is live and the
app runs), and from the workload's exit to the session's end (teardown), on each backend this machine
has. Baselines in the same run: the same command as a plain subprocess, and, with Docker, the same
container created, started, waited for and removed through the engine directly.

    .venv/bin/python bench/deploy.py [--runs 10] [--backends process,local,dockerhost]

The dockerhost runs use a private Docker engine this script starts (root, docker.io, busybox-static).
Last line: one JSON object with the figures (milliseconds, medians and p90).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cornus_core import aio  # noqa: E402
from cornus_core.caller import CallerSession  # noqa: E402
from cornus_core.events import Done, Event, Log  # noqa: E402
from cornus_core.spec import DeploySpec  # noqa: E402
from server.app import CornusServer  # noqa: E402
from server.auth import Authenticator, new_secret  # noqa: E402
from server.backends.base import Backend  # noqa: E402
from server.backends.docker import DockerBackend  # noqa: E402
from server.backends.local.backend import LocalBackend  # noqa: E402
from server.backends.process import ProcessBackend  # noqa: E402
from server.gateway import Gateway  # noqa: E402
from tests.docker.engine_support import IMAGE, docker_api, missing_tools, private_dockerd  # noqa: E402

TOKEN = "deploy-bench"
COMMAND = "echo up"


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(samples), 1), "p90": round(pct(samples, 0.9), 1)}


@contextlib.asynccontextmanager
async def serving(backend: Backend) -> AsyncIterator[CornusServer]:
    server = CornusServer(auth=Authenticator(TOKEN, new_secret()), backend=backend, gateway=Gateway(enabled=False))
    if isinstance(backend, LocalBackend | DockerBackend):
        backend.listeners = server
    await server.start()
    try:
        if isinstance(backend, LocalBackend | DockerBackend):
            await backend.start()
        yield server
    finally:
        await server.close()
        if isinstance(backend, LocalBackend | DockerBackend):
            await backend.close()


async def one_deploy(server: CornusServer, spec: dict[str, Any]) -> tuple[float, float]:
    """(attach -> first app line, app exit -> session done), in milliseconds."""
    marks: dict[str, float] = {}

    def on_event(event: Event) -> None:
        now = time.perf_counter()
        if isinstance(event, Log) and event.source == "app":
            marks.setdefault("up", now)
        elif event.type == "exit":
            marks.setdefault("exit", now)
        elif isinstance(event, Done):
            marks.setdefault("done", now)

    start = time.perf_counter()
    session = CallerSession(server.url, TOKEN, DeploySpec.model_validate(spec), on_event=on_event)
    outcome = await session.run()
    if outcome.exit_code != 0 or not {"up", "exit", "done"} <= marks.keys():
        raise SystemExit(f"deploy failed: {outcome} {marks}")
    return (marks["up"] - start) * 1000, (marks["done"] - marks["exit"]) * 1000


async def measure(backend: Backend, spec: dict[str, Any], runs: int) -> dict[str, Any]:
    async with serving(backend) as server:
        await one_deploy(server, spec)  # warm up (imports, first namespace, image layers)
        results = [await one_deploy(server, spec) for _ in range(runs)]
    return {"ready_ms": summary([r[0] for r in results]), "teardown_ms": summary([r[1] for r in results])}


def plain_subprocess(runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(["sh", "-c", COMMAND], check=True, capture_output=True)
        samples.append((time.perf_counter() - start) * 1000)
    return summary(samples)


def plain_container(host: str, runs: int) -> dict[str, float]:
    """create + start + wait + remove of the same container, straight through the engine."""
    samples = []
    with docker_api(host) as api:
        for _ in range(runs):
            start = time.perf_counter()
            cid = api.post("/containers/create", json={"Image": IMAGE, "Cmd": ["sh", "-c", COMMAND],
                                                       "HostConfig": {"NetworkMode": "none"}}).json()["Id"]
            api.post(f"/containers/{cid}/start")
            api.post(f"/containers/{cid}/wait", timeout=60)
            api.delete(f"/containers/{cid}", params={"force": "1"})
            samples.append((time.perf_counter() - start) * 1000)
    return summary(samples)


@contextlib.contextmanager
def maybe_dockerd(wanted: bool) -> Iterator[str | None]:
    if not wanted or missing_tools():
        yield None
        return
    with private_dockerd() as host:
        yield host


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--backends", default="process,local,dockerhost")
    args = parser.parse_args()
    chosen = [b.strip() for b in args.backends.split(",") if b.strip()]
    figures: dict[str, Any] = {"runs": args.runs, "subprocess_ms": plain_subprocess(args.runs)}
    spec = {"command": COMMAND, "egress": {"mode": "proxy"}}
    if "process" in chosen:
        figures["process"] = await measure(ProcessBackend(), spec, args.runs)
    if "local" in chosen:
        figures["local"] = await measure(LocalBackend(prefix="cnbd"), spec, args.runs)
    with maybe_dockerd("dockerhost" in chosen) as host:
        if host is not None:
            figures["container_ms"] = plain_container(host, args.runs)
            with tempfile.TemporaryDirectory(prefix="cornus-bench-docker-") as run_dir:
                backend = DockerBackend(host=host, run_dir=run_dir, network="none", prefix="cnbench")
                figures["dockerhost"] = await measure(backend, {**spec, "image": IMAGE}, args.runs)
    print(f"plain subprocess         {figures['subprocess_ms']['p50']:8.1f} ms")
    if "container_ms" in figures:
        print(f"plain container          {figures['container_ms']['p50']:8.1f} ms  (create, start, wait, remove)")
    for name in ("process", "local", "dockerhost"):
        if name in figures:
            f = figures[name]
            print(f"{name:10} ready p50 {f['ready_ms']['p50']:7.1f} ms  p90 {f['ready_ms']['p90']:7.1f} ms   "
                  f"teardown p50 {f['teardown_ms']['p50']:7.1f} ms  p90 {f['teardown_ms']['p90']:7.1f} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    aio.run(main())
