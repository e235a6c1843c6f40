"""What pod isolation this machine allows, tried for real rather than guessed from uids and sysctls.

- ``root``: network namespaces joined to the host by veth pairs, nftables capture and socket marks
  (a throwaway pod is created, probed and destroyed);
- ``userns``: an unprivileged user + network namespace (``unshare -Urn``) where nftables capture and
  socket marks work, but with no veth into the host and one mapped uid, so the caretaker is exempted by
  socket mark and the pod reaches the server some other way;
- ``none``: neither; ``reason`` says why each failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ._commands import PodError
from .naming import DEFAULT_PREFIX
from .pod import DEFAULT_RUN_DIR, Pod, PodHost

PROBE_TIMEOUT = 20.0
PROBE = [sys.executable, "-m", "server.backends.local.probe"]


@dataclass(frozen=True)
class Isolation:
    kind: Literal["root", "userns", "none"]
    reason: str
    failures: tuple[str, ...] = ()  # why the stronger kinds were not available


async def detect_isolation(
    *, prefix: str = DEFAULT_PREFIX, run_dir: str | Path = DEFAULT_RUN_DIR
) -> Isolation:
    failures: list[str] = []
    if os.geteuid() != 0:
        failures.append("root pods: not running as root")
    else:
        problem = await probe_root(prefix=prefix, run_dir=run_dir)
        if problem is None:
            return Isolation(
                "root", "root: pods are network namespaces with a veth to the host; capture works"
            )
        failures.append(f"root pods: {problem}")
    problem = await probe_userns()
    if problem is None:
        return Isolation(
            "userns",
            "user namespaces: capture works, but pods have no veth to the host and one uid "
            "(the caretaker is exempted by socket mark)",
            tuple(failures),
        )
    failures.append(f"user namespaces: {problem}")
    return Isolation("none", "no pod isolation available: " + "; ".join(failures), tuple(failures))


async def probe_root(*, prefix: str = DEFAULT_PREFIX, run_dir: str | Path = DEFAULT_RUN_DIR) -> str | None:
    """None when a real pod can be made here and capture works in it, else what went wrong."""
    try:
        host = PodHost(prefix=prefix, run_dir=run_dir, stop_grace=1.0)
    except PodError as exc:
        return str(exc)
    try:
        try:
            pod = await Pod.create(host)
            problem = await _probe(pod.command(PROBE))
        except PodError as exc:
            problem = str(exc)
    finally:
        try:
            await host.close()
        except PodError as exc:
            problem = f"the probe pod was not removed: {exc}"
    return problem


async def probe_userns() -> str | None:
    """None when ``unshare -Urn`` gives a namespace where capture works, else what went wrong."""
    return await _probe(["unshare", "-Urn", *PROBE, "--link"])


async def _probe(argv: list[str]) -> str | None:
    pipe = asyncio.subprocess.PIPE
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe
        )
    except OSError as exc:
        return f"cannot run {argv[0]}: {exc.strerror or exc}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return f"the capture probe did not finish within {PROBE_TIMEOUT:.0f} s"
    try:
        answer = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
        ok, reason = bool(answer["ok"]), str(answer.get("reason", ""))
    except (IndexError, ValueError, KeyError, TypeError):
        text = err.decode(errors="replace").strip() or f"exit status {proc.returncode}"
        return f"{argv[0]} failed: {text.splitlines()[-1]}"
    return None if ok else reason
