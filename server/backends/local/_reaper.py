"""Finding and stopping every process inside a network namespace, ours or not (daemons included)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

KILL_WAIT = 5.0
POLL = 0.02

NamespaceId = tuple[int, int]  # (st_dev, st_ino) of a namespace file: what identifies the namespace


def namespace_id(ns_path: str) -> NamespaceId | None:
    """The identity of the namespace bound at (or linked from) ``ns_path``; None when it is gone."""
    try:
        st = os.stat(ns_path)
    except OSError:  # gone, or another user's process
        return None
    return st.st_dev, st.st_ino


def namespace_pids(ns_path: str | NamespaceId, *, user: NamespaceId | None = None) -> list[int]:
    """Processes whose network namespace is ``ns_path`` (a path like ``ip netns pids`` takes, or an
    identity), and whose user namespace is ``user`` when given."""
    target = namespace_id(ns_path) if isinstance(ns_path, str) else ns_path
    if target is None:
        return []
    pids = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            # Gone, a zombie that has left its namespaces, or another user's: not in ours.
            if namespace_id(f"/proc/{entry.name}/ns/net") != target:
                continue
            if user is not None and namespace_id(f"/proc/{entry.name}/ns/user") != user:
                continue
            pids.append(int(entry.name))
    return pids


async def stop_namespace(
    ns_path: str | NamespaceId, grace: float, *, user: NamespaceId | None = None
) -> list[int]:
    """SIGTERM everything in the namespace, SIGKILL what outstays ``grace`` (and anything it forked
    meanwhile); return the processes that were still there after that. The namespace is identified
    once, up front, so it is followed to the end even when the file naming it goes first."""
    target = namespace_id(ns_path) if isinstance(ns_path, str) else ns_path
    if target is None:
        return []
    _signal_all(namespace_pids(target, user=user), signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while (pids := namespace_pids(target, user=user)) and loop.time() < deadline:
        await asyncio.sleep(POLL)
    deadline = loop.time() + KILL_WAIT
    while pids and loop.time() < deadline:
        _signal_all(pids, signal.SIGKILL)
        await asyncio.sleep(POLL)
        pids = namespace_pids(target, user=user)
    return pids


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
