"""The mount role end to end: the caller serves a directory of this machine, the server relays, and the
role mounts it (FUSE here) at a target; the test reads and writes through the mount like a workload."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import threading
from pathlib import Path

import pytest

from caretaker.config import MountConfig
from caretaker.roles.mount import MountError, bridge_to_export, choose_mechanism, is_mounted, kernel_has_9p
from cornus_core.mountinfo import mounted_under
from cornus_core.ninep import Client

from .mount_support import StartPod, errno_of, needs_fuse

pytestmark = needs_fuse()


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


async def test_read_write_and_errors_through_a_mount(pod: StartPod, tmp_path: Path) -> None:
    export = tmp_path / "export"
    (export / "sub").mkdir(parents=True)
    (export / "hello.txt").write_text("from the caller\n")
    target = tmp_path / "pod" / "work"
    p = await pod([{"source": str(export), "target": str(target)}])
    role = await p.role()
    assert is_mounted(str(target))

    def workload() -> None:
        assert (target / "hello.txt").read_text() == "from the caller\n"
        assert sorted(os.listdir(target)) == ["hello.txt", "sub"]
        (target / "sub" / "new.txt").write_text("from the pod\n")
        os.mkdir(target / "made")
        os.rename(target / "sub" / "new.txt", target / "made" / "moved.txt")
        os.symlink("moved.txt", target / "made" / "link")
        os.chmod(target / "made" / "moved.txt", 0o600)
        with open(target / "made" / "moved.txt", "r+b") as f:
            f.seek(4)
            f.write(b"POD")
            f.flush()
            os.fsync(f.fileno())
            os.ftruncate(f.fileno(), 9)
        os.utime(target / "made" / "moved.txt", ns=(1_000_000_000, 2_000_000_000))
        os.link(target / "hello.txt", target / "hard")
        # errors come back with the errno the caller's filesystem gave
        assert errno_of(open, target / "missing") == errno.ENOENT
        assert errno_of(os.mkdir, target / "made") == errno.EEXIST
        assert errno_of(os.rmdir, target / "made") == errno.ENOTEMPTY
        assert errno_of(os.unlink, target / "sub") in (errno.EISDIR, errno.EPERM)
        assert errno_of(os.listdir, target / "hello.txt") == errno.ENOTDIR
        os.unlink(target / "made" / "link")
        assert os.statvfs(target).f_bsize > 0

    await asyncio.to_thread(workload)
    moved = export / "made" / "moved.txt"
    assert moved.read_bytes() == b"fromPODe "
    assert moved.stat().st_mode & 0o777 == 0o600 and moved.stat().st_mtime_ns == 2_000_000_000
    assert not (export / "sub" / "new.txt").exists() and not (export / "made" / "link").exists()
    assert (export / "hard").stat().st_ino == (export / "hello.txt").stat().st_ino
    assert sorted(os.listdir(export)) == ["hard", "hello.txt", "made", "sub"]  # no .fuse_hidden leftovers
    await role.aclose()
    assert mounted_under(tmp_path) == []


async def test_read_only_mount_refuses_every_change(pod: StartPod, tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    (export / "keep.txt").write_text("keep\n")
    target = tmp_path / "pod" / "ro"
    p = await pod([{"source": str(export), "target": str(target), "read_only": True}])
    await p.role()

    def workload() -> list[int]:
        assert (target / "keep.txt").read_text() == "keep\n"
        return [
            errno_of(_write, target / "new.txt", b"x"),
            errno_of(_write, target / "keep.txt", b"x"),
            errno_of(os.mkdir, target / "d"),
            errno_of(os.unlink, target / "keep.txt"),
            errno_of(os.rename, target / "keep.txt", target / "k2"),
            errno_of(os.chmod, target / "keep.txt", 0o777),
            errno_of(os.truncate, target / "keep.txt", 0),
            errno_of(os.symlink, "keep.txt", target / "l"),
        ]

    assert await asyncio.to_thread(workload) == [errno.EROFS] * 8
    assert os.listdir(export) == ["keep.txt"] and (export / "keep.txt").read_text() == "keep\n"


async def test_single_file_mount_shows_just_that_file(pod: StartPod, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = dev\n")
    (home / "neighbour").write_text("not exported\n")
    target = tmp_path / "pod" / "etc" / "gitconfig"
    p = await pod([{"source": str(home / ".gitconfig"), "target": str(target)}])
    await p.role()

    def workload() -> str:
        assert target.is_file()
        text = target.read_text()
        with open(target, "a") as f:
            f.write("\temail = dev@example.com\n")
        return text

    assert await asyncio.to_thread(workload) == "[user]\n\tname = dev\n"
    assert (home / ".gitconfig").read_text().endswith("email = dev@example.com\n")
    # the file is the only thing mounted: the target's directory holds nothing else of the caller's
    assert mounted_under(tmp_path) == [str(target)]
    assert os.listdir(target.parent) == ["gitconfig"]


async def test_large_file_checksums_both_ways(pod: StartPod, tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    data = os.urandom(32 << 20)
    (export / "big.bin").write_bytes(data)
    target = tmp_path / "pod" / "data"
    p = await pod([{"source": str(export), "target": str(target)}])
    await p.role()

    def workload() -> str:
        digest = hashlib.sha256()
        with open(target / "big.bin", "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        with open(target / "copy.bin", "wb") as f:
            for at in range(0, len(data), 1 << 20):
                f.write(data[at : at + (1 << 20)])
        return digest.hexdigest()

    assert await asyncio.to_thread(workload) == hashlib.sha256(data).hexdigest()
    assert hashlib.sha256((export / "copy.bin").read_bytes()).digest() == hashlib.sha256(data).digest()


async def test_several_mounts_are_all_live_when_start_returns(pod: StartPod, tmp_path: Path) -> None:
    sources = [tmp_path / f"src{i}" for i in range(3)]
    for i, source in enumerate(sources):
        source.mkdir()
        (source / "id").write_text(str(i))
    targets = [tmp_path / "pod" / f"t{i}" for i in range(3)]
    p = await pod([{"source": str(s), "target": str(t), "read_only": i == 1}
                   for i, (s, t) in enumerate(zip(sources, targets, strict=True))])
    role = await p.role(mechanism=None)  # chosen at start: v9fs where the kernel has 9P, else FUSE
    assert role.mechanism == ("kernel" if kernel_has_9p() else "fuse")
    assert sorted(mounted_under(tmp_path)) == [str(t) for t in targets]
    ids = await asyncio.to_thread(lambda: [(t / "id").read_text() for t in targets])
    assert ids == ["0", "1", "2"]
    await role.aclose()
    assert mounted_under(tmp_path) == []


async def test_busy_mount_is_detached_and_nothing_stays_mounted(pod: StartPod, tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    (export / "f").write_text("held\n")
    target = tmp_path / "pod" / "busy"
    p = await pod([{"source": str(export), "target": str(target)}])
    role = await p.role()
    held = await asyncio.to_thread(open, target / "f", "rb")
    try:
        await role.aclose()  # the open file keeps the mount busy: a lazy unmount, and the link closed
        assert mounted_under(tmp_path) == []
        with pytest.raises(OSError) as caught:  # the detached mount's last user is not left hanging
            await asyncio.to_thread(held.read)
        assert caught.value.errno in (errno.EIO, errno.ENOTCONN)
    finally:
        await asyncio.to_thread(held.close)  # never a system call on the mount from the loop thread
    assert target.is_dir() and os.listdir(target) == []  # the plain mount point is back
    for _ in range(200):  # once its last user lets go, the detached filesystem's loop ends too
        if not [t for t in threading.enumerate() if t.name == f"fuse {target}"]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the FUSE loop of the detached mount is still running")


async def test_undeclared_name_is_refused_and_nothing_is_mounted(pod: StartPod, tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    p = await pod([{"source": str(export), "target": str(tmp_path / "pod" / "ok")}])
    forged = MountConfig(name="m7", target=str(tmp_path / "pod" / "forged"))
    with pytest.raises(MountError, match=r"mount m7 at .*forged: the server refused the mount"):
        await p.role([*p.mounts, forged])
    assert mounted_under(tmp_path) == []  # the declared mount made before the refusal is undone too


async def test_dotdot_at_the_mount_root_stays_in_the_pod(pod: StartPod, tmp_path: Path) -> None:
    caller = tmp_path / "caller"
    (caller / "export").mkdir(parents=True)
    (caller / "secret").write_text("caller secret\n")
    (caller / "export" / "up").symlink_to("../secret")
    target = tmp_path / "pod" / "mnt"
    p = await pod([{"source": str(caller / "export"), "target": str(target)}])
    await p.role()

    def workload() -> tuple[list[str], str, int]:
        return (sorted(os.listdir(target / "..")), os.readlink(target / "up"),
                errno_of(open, target / "up"))  # fmt: skip

    above, link, code = await asyncio.to_thread(workload)
    assert above == ["mnt"]  # the pod's own directory, not the caller's
    assert link == "../secret" and code == errno.ENOENT  # the symlink resolves in the pod, not at the caller


async def test_mounts_come_back_after_the_server_connection_drops(pod: StartPod, tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    (export / "a").write_text("alpha\n")
    target = tmp_path / "pod" / "work"
    p = await pod([{"source": str(export), "target": str(target)}])
    await p.role()
    held = await asyncio.to_thread(open, target / "a", "r+b")
    try:
        assert await asyncio.to_thread(held.read) == b"alpha\n"
        await p.drop_connection()
        (export / "b").write_text("beta\n")

        def after() -> tuple[bytes, str]:
            held.seek(0)
            held.write(b"ALPHA")  # an open file is walked to and opened again on the new connection
            held.flush()
            held.seek(0)
            return held.read(), (target / "b").read_text()

        assert await asyncio.to_thread(after) == (b"ALPHA\n", "beta\n")
    finally:
        await asyncio.to_thread(held.close)  # never a system call on the mount from the loop thread
    assert (export / "a").read_text() == "ALPHA\n"


@pytest.mark.skipif(kernel_has_9p(), reason="the kernel has 9P here: the kernel mechanism would mount")
async def test_kernel_mechanism_without_kernel_9p_fails_cleanly(pod: StartPod, tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    p = await pod([{"source": str(export), "target": str(tmp_path / "pod" / "k")}])
    with pytest.raises(MountError, match=r"mount m0 at .*/pod/k: mount cornus:m0 on .*No such device"):
        await p.role(mechanism="kernel")
    assert mounted_under(tmp_path) == []
    assert choose_mechanism() == "fuse"  # what a role picks here when not told


async def test_kernel_transport_carries_9p_to_the_export(pod: StartPod, tmp_path: Path) -> None:
    # What v9fs gets with trans=fd: one end of a socketpair spliced to an M stream. A 9P client stands in
    # for the kernel, which this machine lacks.
    export = tmp_path / "export"
    export.mkdir()
    (export / "k.txt").write_text("over the socketpair\n")
    p = await pod([{"source": str(export), "target": str(tmp_path / "pod" / "k")}])
    assert p.link is not None
    theirs, splicing = await bridge_to_export(p.link, "m0")
    reader, writer = await asyncio.open_connection(sock=theirs)
    client = Client(reader, writer)
    try:
        await client.start()
        await client.attach()
        assert await client.read_file("k.txt") == b"over the socketpair\n"
        await client.write_file("back.txt", b"from the kernel side\n")
    finally:
        await client.close()
    await asyncio.wait_for(splicing, 10)  # our side closed: the splice and its stream end too
    assert (export / "back.txt").read_text() == "from the kernel side\n"
