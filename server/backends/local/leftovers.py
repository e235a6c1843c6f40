"""Removing what a crashed server run left behind: its pods' namespaces, veths, NAT tables, mount
namespace files and processes, and the holders of its user-namespace pods (with every process in them).

A run is alive while it holds the lock file named after its ``<prefix><instance>``; everything
carrying the prefix whose run is not alive is a leftover.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..runlock import held
from . import _links
from ._commands import PodError, run
from ._reaper import stop_namespace
from .naming import DEFAULT_PREFIX, PodName, check_prefix, parse_pod_name
from .pod import (
    DEFAULT_RUN_DIR,
    NETNS_DIR,
    mounts_dir,
    owners_dir,
    remove_mount_namespace,
    remove_nat_table,
    remove_netns,
)
from .rootless import holder_names, remove_holder

LEFTOVER_GRACE = 1.0  # their server is gone; nobody waits for these processes to finish cleanly


async def cleanup_leftovers(
    prefix: str = DEFAULT_PREFIX, *, run_dir: str | Path = DEFAULT_RUN_DIR
) -> list[str]:
    """Remove every pod named with ``prefix`` whose server run is no longer alive; return their names.

    Live runs (this one included) are left alone, so any run may call this at start-up.
    """
    check_prefix(prefix)
    run_dir = Path(run_dir)
    netns: set[PodName] = set()
    links: set[PodName] = set()
    tables: set[PodName] = set()
    if os.geteuid() == 0:  # without root there are none of these to find (or to remove)
        netns = _names(_listdir(NETNS_DIR), prefix)
        links = _names(await _links.link_names(), prefix)
        tables = _names(await _nat_tables(), prefix)
    mounts = _names(_listdir(mounts_dir(run_dir)), prefix)
    holders = _names(holder_names(run_dir), prefix)
    owners = {n.owner for n in netns | links | tables | mounts | holders}
    owners |= {p.stem for p in _lock_files(run_dir) if p.stem.startswith(prefix)}
    dead = {owner for owner in owners if not _alive(run_dir, owner)}

    removed: set[str] = set()
    errors = []
    for name in sorted(netns | links | tables | mounts | holders, key=str):
        if name.owner not in dead:
            continue
        try:
            if name in holders:
                await remove_holder(run_dir, str(name), LEFTOVER_GRACE)
            if name in netns:
                await stop_namespace(str(NETNS_DIR / str(name)), LEFTOVER_GRACE)
            if name in tables:
                await remove_nat_table(name.nft_table)
            if name in links:
                await _links.delete_link(str(name))
            if name in netns:
                await remove_netns(str(name))
            if name in mounts:
                await remove_mount_namespace(mounts_dir(run_dir) / str(name))
        except PodError as exc:
            errors.append(str(exc))
        removed.add(str(name))
    for owner in dead:
        with contextlib.suppress(FileNotFoundError):
            (owners_dir(run_dir) / f"{owner}.lock").unlink()
    if errors:
        raise PodError(f"leftover pods not fully removed: {'; '.join(errors)}")
    return sorted(removed)


def _alive(run_dir: Path, owner: str) -> bool:
    """Whether a server run still holds ``owner``'s lock."""
    return held(owners_dir(run_dir) / f"{owner}.lock")


def _names(candidates: list[str], prefix: str) -> set[PodName]:
    return {name for text in candidates if (name := parse_pod_name(text, prefix)) is not None}


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def _lock_files(run_dir: Path) -> list[Path]:
    try:
        return list(owners_dir(run_dir).glob("*.lock"))
    except OSError:
        return []


async def _nat_tables() -> list[str]:
    out = await run(["nft", "list", "tables", "inet"], what="listing nft tables")
    return [line.split()[-1] for line in out.splitlines() if line.startswith("table inet ")]
