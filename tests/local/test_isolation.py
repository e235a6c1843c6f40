"""What isolation this machine allows, found by trying it, and the fallback with its reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

from server.backends.local import detect_isolation

from .conftest import needs_root

pytestmark = needs_root()


def netns_with(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith(prefix)]


async def test_root_pods_are_detected_and_the_probe_pod_is_removed(prefix: str, run_dir: Path) -> None:
    found = await detect_isolation(prefix=prefix, run_dir=run_dir)
    assert (found.kind, found.failures) == ("root", ())
    assert netns_with(prefix) == []


async def test_falls_back_to_user_namespaces_and_says_why(prefix: str, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    found = await detect_isolation(prefix=prefix, run_dir=blocker / "run")
    assert found.kind == "userns"
    assert "capture works" in found.reason and "socket mark" in found.reason
    assert len(found.failures) == 1
    assert found.failures[0].startswith(
        f"root pods: cannot use the pod run directory {blocker / 'run'}: Not a directory"
    )
    assert netns_with(prefix) == []
