"""Finding and stopping every process inside a network namespace, ours or not (daemons included)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

KILL_WAIT = 5.0
POLL = 0.02


def namespace_pids(ns_path: str) -> list[int]:
    """Processes whose network namespace is the one bound at ``ns_path`` (like ``ip netns pids``)."""
    try:
        target = os.stat(ns_path)
    except FileNotFoundError:
        return []
    pids = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                ns = os.stat(f"/proc/{entry.name}/ns/net")
            except OSError:
                continue  # gone, or a zombie that has left its namespaces
            if (ns.st_dev, ns.st_ino) == (target.st_dev, target.st_ino):
                pids.append(int(entry.name))
    return pids


async def stop_namespace(ns_path: str, grace: float) -> list[int]:
    """SIGTERM everything in the namespace, SIGKILL what outstays ``grace`` (and anything it forked
    meanwhile); return the processes that were still there after that."""
    _signal_all(namespace_pids(ns_path), signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while (pids := namespace_pids(ns_path)) and loop.time() < deadline:
        await asyncio.sleep(POLL)
    deadline = loop.time() + KILL_WAIT
    while pids and loop.time() < deadline:
        _signal_all(pids, signal.SIGKILL)
        await asyncio.sleep(POLL)
        pids = namespace_pids(ns_path)
    return pids


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
