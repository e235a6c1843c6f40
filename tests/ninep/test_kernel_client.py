"""The real Linux v9fs client (a stock Debian kernel under QEMU) mounts our server over TCP and runs a
filesystem workload, read-write and read-only. See ``kernel/guest.py`` for how the guest is built."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from caretaker.roles.mount import v9fs_options

from .conftest import snapshot_tree
from .kernel.guest import Guest, RunResult, ensure_guest, run_guest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RW_STEPS = {"mount", "workdir", "big_file", "small_files", "many_entries", "renames", "symlinks", "edits",
            "escape", "umount", "end"}  # fmt: skip
RO_STEPS = {"mount", "ro_manifest", "ro_refusals", "ro_escape", "umount", "end"}


@pytest.fixture(scope="module")
def guest() -> Guest:
    if os.geteuid() != 0:
        pytest.skip("the kernel-client tier needs root: it apt-get installs qemu-system-x86, busybox-static")
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("the kernel-client tier needs apt and dpkg to fetch qemu, busybox and a Debian kernel")
    return ensure_guest()


@contextmanager
def serving(root: Path, *flags: str) -> Iterator[int]:
    """``python -m cornus_core.ninep`` on a free loopback port, stopped with Ctrl-C afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cornus_core.ninep", str(root), "--listen", "127.0.0.1:0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line + (proc.stderr.read() if proc.stderr else "")
        yield int(line.split()[2].rsplit(":", 1)[1])
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def explain(result: RunResult) -> str:
    return f"steps={result.steps}\nqemu exit={result.returncode}\nconsole tail:\n{result.console[-3000:]}"


@pytest.mark.parametrize("options", ["", "cache=loose"], ids=["default", "cache-loose"])
def test_kernel_client_read_write(guest: Guest, tmp_path: Path, options: str) -> None:
    export = tmp_path / "export"
    export.mkdir()
    with serving(export) as port:
        result = run_guest(guest, port, "rw", options=options)
    assert result.ended and not result.failures(), explain(result)
    assert set(result.steps) == RW_STEPS, explain(result)
    # the guest's writes landed in the caller's directory, byte for byte
    work = export / "workload"
    reported = result.steps["big_file"][1].strip().removeprefix("sha256=")
    assert hashlib.sha256((work / "big").read_bytes()).hexdigest() == reported
    assert (work / "big").stat().st_size == 16 << 20
    assert (work / "renamed-dir" / "inner" / "x").read_text() == "deep\n"
    assert (work / "r2").read_text() == "two\n" and os.readlink(work / "link") == "r2"
    assert os.readlink(work / "to-root") == "/" and (work / "e").read_bytes() == b"ab"
    assert not (work / "small").exists() and not (work / "many").exists()


def test_kernel_client_over_file_descriptors_with_the_caretakers_options(guest: Guest, tmp_path: Path) -> None:
    """The caretaker mounts with ``trans=fd`` over a socketpair it relays; the guest does the same over two
    FIFOs relayed to our server, with the caretaker's own option string."""
    export = tmp_path / "export"
    export.mkdir()
    with serving(export) as port:
        result = run_guest(guest, port, "rw", fd_options=v9fs_options(3, 4, 512 * 1024))
    assert result.ended and not result.failures(), explain(result)
    assert set(result.steps) == RW_STEPS, explain(result)
    assert "trans=fd" in result.steps["mount"][1] and "rfd=3" in result.steps["mount"][1], explain(result)
    assert (export / "workload" / "renamed-dir" / "inner" / "x").read_text() == "deep\n"


def test_kernel_client_read_only(guest: Guest, tmp_path: Path) -> None:
    export = tmp_path / "export"
    (export / "sub" / "deeper").mkdir(parents=True)
    (export / "a.txt").write_bytes(b"hello\n")
    (export / "sub" / "bin.dat").write_bytes(os.urandom(300_000))
    (export / "sub" / "deeper" / "c").write_bytes(b"deep\n")
    (export / "to-root").symlink_to("/")
    (export / "up").symlink_to("../../../..")
    manifest = {
        str(p.relative_to(export)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(export.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }
    before = snapshot_tree(tmp_path)
    with serving(export, "--ro") as port:
        result = run_guest(guest, port, "ro", manifest=manifest)
    assert result.ended and not result.failures(), explain(result)
    assert set(result.steps) == RO_STEPS, explain(result)
    assert result.steps["ro_manifest"][1].strip() == f"files={len(manifest)}"
    assert snapshot_tree(tmp_path) == before
