"""A crashed server run's pods are found by name and removed; a live run's pods are left alone."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from server.backends.local import Pod, PodHost, cleanup_leftovers
from server.backends.local.pod import NETNS_DIR, owners_dir

from .conftest import host_state, needs_root, pid_alive, run_in

pytestmark = needs_root()

# A server run that makes a pod with everything a pod can have, then dies without cleaning up.
CRASHING_RUN = """
import asyncio, json, os, sys
from server.backends.local import Pod, PodHost

async def main():
    host = PodHost(prefix=sys.argv[1], run_dir=sys.argv[2])
    pod = await Pod.create(host, nat=True, private_mounts=True)
    sleeper = await pod.spawn(["sleep", "300"], stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    print(json.dumps({"name": pod.name, "owner": host.owner, "pid": sleeper.pid}), flush=True)
    os._exit(1)

asyncio.run(main())
"""


async def crash_a_run(prefix: str, run_dir: Path) -> dict[str, object]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CRASHING_RUN,
        prefix,
        str(run_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1 and out, err.decode()
    leaked: dict[str, object] = json.loads(out)
    return leaked


async def test_cleanup_removes_a_crashed_runs_pod_and_spares_live_ones(
    pod_host: PodHost, prefix: str, run_dir: Path
) -> None:
    live = await Pod.create(pod_host)
    try:
        leaked = await crash_a_run(prefix, run_dir)
        owner, name, pid = str(leaked["owner"]), str(leaked["name"]), int(str(leaked["pid"]))
        before = host_state(owner, run_dir)
        assert before.netns and before.links and before.tables and before.mount_files
        assert pid_alive(pid)

        assert await cleanup_leftovers(prefix, run_dir=run_dir) == [name]

        assert host_state(owner, run_dir).empty
        assert not pid_alive(pid)
        assert not (owners_dir(run_dir) / f"{owner}.lock").exists()
        # This run is alive, so its pod is untouched and still works.
        assert (NETNS_DIR / live.name).exists()
        assert await run_in(live, ["true"]) == (0, "")
        assert await cleanup_leftovers(prefix, run_dir=run_dir) == []
    finally:
        await cleanup_leftovers(prefix, run_dir=run_dir)
