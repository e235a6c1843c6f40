"""Fixtures for the local-pod tests: a pod host of this test's own (unique name prefix, run directory
under tmp_path) that is torn down in a finally, and a look at what the host holds afterwards."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import string
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.backends.local import Pod, PodHost
from server.backends.local.pod import is_mount_point, mounts_dir

from .backend_support import deploy, local_backend, local_server, target

__all__ = ["deploy", "local_backend", "local_server", "target"]  # fixtures of the backend tests

TOOLS = ("ip", "nft", "nsenter", "unshare", "curl", "mount")


def needs_root() -> list[pytest.MarkDecorator]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    return [
        pytest.mark.root,
        pytest.mark.skipif(
            os.geteuid() != 0, reason="needs root: creates network namespaces, veths and nft tables"
        ),
        pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} on PATH"),
    ]


@dataclass(frozen=True)
class HostState:
    """What the host holds whose name contains ``owner``: namespaces, interfaces, nft tables, files."""

    netns: list[str]
    links: list[str]
    tables: list[str]
    mount_files: list[str]

    @property
    def empty(self) -> bool:
        return not (self.netns or self.links or self.tables or self.mount_files)


def host_state(owner: str, run_dir: Path) -> HostState:
    def lines(argv: list[str]) -> list[str]:
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout
        return [line for line in out.splitlines() if owner in line or owner.replace("-", "_") in line]

    mount_dir = mounts_dir(run_dir)
    files = sorted(p.name for p in mount_dir.iterdir()) if mount_dir.exists() else []
    return HostState(
        netns=lines(["ip", "netns", "list"]),
        links=lines(["ip", "-o", "link", "show"]),
        tables=lines(["nft", "list", "tables"]),
        mount_files=[f for f in files if f.startswith(owner)],
    )


@pytest.fixture
def prefix() -> str:
    """A name prefix no other test run uses, so clean-ups here never touch anyone else's pods."""
    return "t" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(3))


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "run"
    try:
        yield path
    finally:
        if is_mount_point(mounts_dir(path)):  # the private bind made for mount namespaces
            subprocess.run(["umount", "-l", str(mounts_dir(path))], check=False, timeout=10)


@pytest.fixture
async def pod_host(prefix: str, run_dir: Path) -> AsyncIterator[PodHost]:
    host = PodHost(prefix=prefix, run_dir=run_dir, stop_grace=2.0)
    try:
        yield host
    finally:
        await host.close()
    assert host_state(host.owner, run_dir).empty, "the pod host left something behind"


@pytest.fixture
async def pod(pod_host: PodHost) -> Pod:
    return await Pod.create(pod_host)


async def run_in(
    pod: Pod, argv: Sequence[str], *, timeout: float = 20.0, **kwargs: object
) -> tuple[int, str]:
    """Run ``argv`` in the pod to completion: (exit status, stdout + stderr)."""
    proc = await pod.spawn(argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, **kwargs)  # type: ignore[arg-type]
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has already stopped
