"""Client-local bind mounts end to end on local pods: the caller serves a directory over 9P, the server
bridges, the caretaker mounts it at the target inside the pod's own mount namespace, and the workload
reads and writes it there — and only there."""

from __future__ import annotations

from pathlib import Path

import pytest

from cornus_core.ninep.fuse import fuse_unavailable

from .backend_support import Deploy
from .conftest import needs_root

pytestmark = [*needs_root(), pytest.mark.skipif(bool(fuse_unavailable()), reason=fuse_unavailable() or "")]


async def test_the_workload_reads_and_writes_the_callers_directory(deploy: Deploy, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello.txt").write_text("written by the caller\n")
    target = tmp_path / "in-pod" / "src"  # exists only inside the pod's mount namespace as a mount
    command = f"cat {target}/hello.txt && echo 'written by the workload' > {target}/reply.txt && echo ok"
    run = await deploy({"command": command, "mounts": [{"source": str(src), "target": str(target)}]})
    assert run.outcome.exit_code == 0, run.events
    assert "written by the caller" in run.app_lines
    assert (src / "reply.txt").read_text() == "written by the workload\n"
    # The mount lived in the pod's mount namespace and went with it.
    assert str(target) not in Path("/proc/self/mountinfo").read_text()
    stats = [e for e in run.events if e.type == "mount"]
    assert stats and stats[-1].target == str(target) and stats[-1].bytes_written > 0


async def test_a_read_only_mount_refuses_writes(deploy: Deploy, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.ini").write_text("[x]\n")
    target = tmp_path / "in-pod" / "config"
    command = f"cat {target}/config.ini; touch {target}/new 2>&1 || echo refused"
    run = await deploy({"command": command, "mounts": [{"source": str(src), "target": str(target),
                                                        "read_only": True}]})
    assert "[x]" in run.app_lines and "refused" in run.app_lines
    assert any("Read-only file system" in line for line in run.app_lines)
    assert sorted(p.name for p in src.iterdir()) == ["config.ini"]


async def test_a_mount_that_ends_is_mounted_again(deploy: Deploy, tmp_path: Path) -> None:
    # The caretaker supervises its mounts: the workload unmounts one (as anything in the pod might),
    # and it is back at its target before long, serving the same export.
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello.txt").write_text("still here\n")
    target = tmp_path / "in-pod" / "src"
    command = (f"cat {target}/hello.txt && umount -l {target} && echo unmounted; "
               f"for i in $(seq 300); do grep -q ' {target} ' /proc/self/mountinfo && break; sleep 0.1; done; "
               f"cat {target}/hello.txt")
    run = await deploy({"command": command, "mounts": [{"source": str(src), "target": str(target)}]})
    assert run.outcome.exit_code == 0, run.events
    assert run.app_lines == ["still here", "unmounted", "still here"]
    assert any("mounting it again" in line for line in (e.line for e in run.events if e.type == "log"))
