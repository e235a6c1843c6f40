"""The server over real TCP with the real client: data, metadata, paging, concurrency, flush, stats, CLI."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cornus_core.ninep import Client, Decoder, RemoteError, TCPServer, encode
from cornus_core.ninep.constants import NOFID, NONUNAME, NOTAG, LockStatus, LockType, OpenFlag, SetattrMask
from cornus_core.ninep.messages import (
    Message,
    Rflush,
    Rfsync,
    Rgetlock,
    Rlink,
    Rlock,
    Rread,
    Rrename,
    Rxattrwalk,
    Tattach,
    Tflush,
    Tfsync,
    Tgetlock,
    Tlink,
    Tlock,
    Tlopen,
    Tmknod,
    Tread,
    Tremove,
    Trename,
    Tversion,
    Twalk,
    Txattrcreate,
    Txattrwalk,
)


async def test_write_through_and_read_back(client: Client, export_dir: Path) -> None:
    data = os.urandom(3 * client.iounit + 12345)
    await client.write_file(("sub", "big.bin"), data)
    assert (export_dir / "sub" / "big.bin").read_bytes() == data
    assert await client.read_file(("sub", "big.bin")) == data
    fid, _ = await client.walk(("sub", "big.bin"))
    await client.lopen(fid, OpenFlag.RDWR)
    assert await client.write(fid, 10, b"patch") == 5
    assert await client.read(fid, 8, 9) == data[8:10] + b"patch" + data[15:17]
    await client.call(Tfsync(0, fid, 0), Rfsync)
    await client.call(Tfsync(0, fid, 1), Rfsync)
    await client.clunk(fid)
    assert (export_dir / "sub" / "big.bin").read_bytes()[10:15] == b"patch"


async def test_getattr_and_statfs_report_the_host_values(client: Client, export_dir: Path) -> None:
    attr = await client.stat(("sub", "b.bin"))
    st = (export_dir / "sub" / "b.bin").lstat()
    assert (attr.mode, attr.size, attr.nlink, attr.uid, attr.gid) == (
        st.st_mode, st.st_size, st.st_nlink, st.st_uid, st.st_gid,
    )  # fmt: skip
    assert attr.mtime_sec * 10**9 + attr.mtime_nsec == st.st_mtime_ns
    assert attr.qid.path == st.st_ino and attr.qid.type == 0
    vfs = os.statvfs(export_dir)
    got = await client.statvfs()
    assert (got.bsize, got.blocks, got.namelen) == (vfs.f_bsize, vfs.f_blocks, vfs.f_namemax)


async def test_setattr_changes_mode_size_and_times(client: Client, export_dir: Path) -> None:
    fid, _ = await client.walk("a.txt")
    await client.setattr(fid, SetattrMask.MODE, mode=0o640)
    await client.setattr(fid, SetattrMask.SIZE, size=3)
    times = SetattrMask.ATIME | SetattrMask.ATIME_SET | SetattrMask.MTIME | SetattrMask.MTIME_SET
    await client.setattr(fid, times, atime=(1000, 5), mtime=(981173106, 7))
    st = (export_dir / "a.txt").stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_size == 3
    assert (st.st_atime_ns, st.st_mtime_ns) == (1000 * 10**9 + 5, 981173106 * 10**9 + 7)
    await client.setattr(fid, SetattrMask.MTIME)  # "now", atime left alone
    st2 = (export_dir / "a.txt").stat()
    assert st2.st_atime_ns == st.st_atime_ns and st2.st_mtime_ns > st.st_mtime_ns
    await client.clunk(fid)


async def test_namespace_operations(client: Client, export_dir: Path) -> None:
    await client.mkdir("d", 0o750)
    assert stat.S_IMODE((export_dir / "d").stat().st_mode) & 0o750 == 0o750
    await client.symlink(("d", "l"), "../a.txt")
    assert os.readlink(export_dir / "d" / "l") == "../a.txt"
    await client.rename("a.txt", ("d", "moved.txt"))
    assert (export_dir / "d" / "moved.txt").read_bytes() == b"hello\n" and not (export_dir / "a.txt").exists()
    dfid, _ = await client.walk("d")
    ffid, _ = await client.walk(("d", "moved.txt"))
    await client.call(Tlink(0, dfid, ffid, "hard"), Rlink)
    await client.call(Tlink(0, dfid, ffid, "hard2"), Rlink)
    assert (export_dir / "d" / "hard").stat().st_nlink == 3
    # old-style Trename moves the fid with the file
    assert isinstance(await client.request(Trename(0, ffid, client.root, "back.txt")), Rrename)
    assert (await client.getattr(ffid)).size == 6
    await client.request(Tmknod(0, dfid, "fifo", stat.S_IFIFO | 0o600, 0, 0, 0))
    assert stat.S_ISFIFO((export_dir / "d" / "fifo").lstat().st_mode)
    await client.clunk(dfid)
    await client.request(Tremove(0, ffid))
    assert not (export_dir / "back.txt").exists()
    with pytest.raises(RemoteError) as info:
        await client.unlink("d", directory=True)
    assert info.value.errno == errno.ENOTEMPTY
    for name in ("l", "hard", "hard2", "fifo"):
        await client.unlink(("d", name))
    await client.unlink("d", directory=True)
    assert not (export_dir / "d").exists()
    with pytest.raises(RemoteError) as info:
        await client.unlink("missing")
    assert info.value.errno == errno.ENOENT


async def test_xattrs_and_the_capability_probe(client: Client, export_dir: Path) -> None:
    fid, _ = await client.walk("a.txt")
    reply = await client.request(Txattrwalk(0, fid, 77, "security.capability"))
    assert getattr(reply, "ecode", None) == errno.ENODATA
    try:
        os.setxattr(export_dir / "a.txt", "user.probe", b"1")
    except OSError:
        pytest.skip("the temporary filesystem has no user xattrs")
    os.removexattr(export_dir / "a.txt", "user.probe")
    await client.request(Txattrcreate(0, fid, "user.color", 4, 0))
    assert await client.write(fid, 0, b"blue") == 4
    await client.clunk(fid)
    assert os.getxattr(export_dir / "a.txt", "user.color") == b"blue"
    fid, _ = await client.walk("a.txt")
    listing = await client.request(Txattrwalk(0, fid, 78, ""))
    assert isinstance(listing, Rxattrwalk)
    assert b"user.color\0" in await client.read(78, 0, listing.size)
    await client.clunk(78)
    value = await client.request(Txattrwalk(0, fid, 79, "user.color"))
    assert isinstance(value, Rxattrwalk) and value.size == 4
    assert await client.read(79, 0, 4) == b"blue"
    await client.clunk(79)
    await client.clunk(fid)


async def test_locks_are_granted(client: Client) -> None:
    fid, _ = await client.walk("a.txt")
    await client.lopen(fid, OpenFlag.RDWR)
    locked = await client.call(Tlock(0, fid, LockType.WRLCK, 0, 0, 0, 42, "guest"), Rlock)
    assert locked.status == LockStatus.SUCCESS
    got = await client.request(Tgetlock(0, fid, LockType.WRLCK, 0, 10, 42, "guest"))
    assert isinstance(got, Rgetlock) and got.type == LockType.UNLCK
    await client.clunk(fid)


async def test_readdir_pages_through_5000_entries(client: Client, export_dir: Path) -> None:
    many = export_dir / "many"
    many.mkdir()
    for i in range(5000):
        (many / f"entry-{i}").touch()
    fid, _ = await client.walk("many")
    await client.lopen(fid, OpenFlag.RDONLY | OpenFlag.DIRECTORY)
    names: list[str] = []
    offset = pages = 0
    while batch := await client.readdir(fid, offset, 8192):
        pages += 1
        assert [e.offset for e in batch] == sorted(e.offset for e in batch) and batch[0].offset > offset
        names += [e.name for e in batch]
        offset = batch[-1].offset
    assert pages >= 10
    assert sorted(names) == sorted([".", "..", *(f"entry-{i}" for i in range(5000))])
    # resuming from an offset in the middle returns exactly the rest
    middle = await client.readdir(fid, 2500, 1 << 20)
    assert [e.name for e in middle] == names[2500 : 2500 + len(middle)]
    await client.clunk(fid)
    assert len(await client.listdir("many")) == 5002


async def test_large_msize_is_negotiated_and_used(server: TCPServer, export_dir: Path) -> None:
    data = os.urandom(5 << 20)
    (export_dir / "five").write_bytes(data)
    async with await Client.connect(*server.address, msize=4 << 20) as client:
        assert client.msize == 1 << 20  # clamped to the server's 1 MiB
        fid, _ = await client.walk("five")
        await client.lopen(fid, OpenFlag.RDONLY)
        chunk = await client.read(fid, 0, 1 << 20)
        assert len(chunk) == (1 << 20) - 24 and chunk == data[: len(chunk)]
        await client.clunk(fid)
        assert await client.read_file("five") == data
    before = server.stats.snapshot()
    assert before.bytes_read == len(chunk) + len(data) and before.ops["read"] >= 7


async def test_concurrent_clients(server: TCPServer, export_dir: Path) -> None:
    async def worker(n: int) -> None:
        async with await Client.connect(*server.address) as c:
            for i in range(20):
                payload = f"{n}-{i}".encode() * (n * 1000 + 1)
                await c.write_file(f"w{n}-{i}", payload)
                assert await c.read_file(f"w{n}-{i}") == payload
            names = {e.name for e in await c.listdir()}
            assert {f"w{n}-{i}" for i in range(20)} <= names

    await asyncio.gather(*(worker(n) for n in range(8)))
    assert len(list(export_dir.glob("w*"))) == 160
    snap = server.stats.snapshot()
    assert snap.sessions_total == 8 and snap.ops["lcreate"] == 160 and snap.errors == {}


async def test_flush_reply_follows_the_flushed_request(server: TCPServer, export_dir: Path) -> None:
    (export_dir / "f").write_bytes(b"x" * (1 << 20))
    reader, writer = await asyncio.open_connection(*server.address)
    decoder = Decoder()

    async def replies(n: int) -> list[Message]:
        out: list[Message] = []
        while len(out) < n:
            decoder.feed(await reader.read(1 << 20))
            out += list(decoder)
        return out

    writer.write(encode(Tversion(NOTAG, 1 << 20, "9P2000.L")))
    writer.write(encode(Tattach(1, 0, NOFID, "", "", NONUNAME)))
    writer.write(encode(Twalk(2, 0, 1, ("f",))))
    writer.write(encode(Tlopen(3, 1, 0)))
    await replies(4)
    # a large read (served on a worker thread), its flush, and a flush of a tag nobody used
    writer.write(encode(Tread(10, 1, 0, 900_000)) + encode(Tflush(11, 10)) + encode(Tflush(12, 999)))
    got = {m.tag: (i, m) for i, m in enumerate(await replies(3))}
    assert isinstance(got[10][1], Rread) and len(got[10][1].data) == 900_000
    assert got[11][1] == Rflush(11) and got[12][1] == Rflush(12)
    assert got[10][0] < got[11][0]  # never an Rflush before the reply to the request it flushes
    writer.close()
    await writer.wait_closed()


async def test_garbage_closes_only_that_connection(server: TCPServer, client: Client) -> None:
    reader, writer = await asyncio.open_connection(*server.address)
    writer.write(b"\x03\x00\x00\x00garbage")
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    assert await client.read_file("a.txt") == b"hello\n"


async def test_stats_count_ops_errors_and_bytes(server: TCPServer, client: Client) -> None:
    await client.read_file("a.txt")
    with pytest.raises(RemoteError):
        await client.walk("nope")
    snap = server.stats.snapshot()
    assert snap.ops["read"] >= 1 and snap.bytes_read >= 6
    assert snap.errors == {"walk": 1} and snap.latency_s["walk"] > 0
    assert snap.sessions == 1 and snap.total_ops > snap.total_errors


@pytest.mark.slow
async def test_256_mib_file_round_trip_with_checksum(client: Client, export_dir: Path) -> None:
    block = os.urandom(1 << 20)
    digest = hashlib.sha256()
    with open(export_dir / "huge", "wb") as f:
        for i in range(256):
            chunk = block[i:] + block[:i]
            f.write(chunk)
            digest.update(chunk)
    got = hashlib.sha256()
    fid, _ = await client.walk("huge")
    await client.lopen(fid, OpenFlag.RDONLY)
    offset, step = 0, client.iounit
    while True:
        parts = await asyncio.gather(*(client.read(fid, offset + i * step, step) for i in range(4)))
        for part in parts:
            got.update(part)
        offset += 4 * step
        if len(parts[-1]) < step:
            break
    await client.clunk(fid)
    assert got.hexdigest() == digest.hexdigest()
    (export_dir / "huge").unlink()
    await client.write_file("huge-copy", memoryview(block * 64))
    assert (
        hashlib.sha256((export_dir / "huge-copy").read_bytes()).digest()
        == hashlib.sha256(block * 64).digest()
    )


def test_cli_serves_prints_its_address_and_exits_cleanly_on_ctrl_c(export_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cornus_core.ninep", str(export_dir), "--listen", "127.0.0.1:0", "--ro"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        port = int(line.split()[2].rsplit(":", 1)[1])

        async def probe() -> bytes:
            async with await Client.connect("127.0.0.1", port) as c:
                with pytest.raises(RemoteError) as info:
                    await c.write_file("new", b"x")
                assert info.value.errno == errno.EROFS
                return await c.read_file("a.txt")

        assert asyncio.run(probe()) == b"hello\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_cli_rejects_a_bad_listen_address(export_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cornus_core.ninep", str(export_dir), "--listen", "localhost"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--listen 'localhost'" in out.stderr


async def test_created_modes_are_exact_whatever_our_umask(client: Client, export_dir: Path) -> None:
    old = os.umask(0o077)  # the client applied its own umask already; the server's must not strip more
    try:
        await client.write_file("f664", b"x", mode=0o664)
        await client.mkdir("d775", 0o775)
        await client.request(Tmknod(0, client.root, "p660", stat.S_IFIFO | 0o660, 0, 0, 0))
    finally:
        os.umask(old)
    assert stat.S_IMODE((export_dir / "f664").stat().st_mode) == 0o664
    assert stat.S_IMODE((export_dir / "d775").stat().st_mode) == 0o775
    assert stat.S_IMODE((export_dir / "p660").lstat().st_mode) == 0o660


async def test_a_cancelled_request_is_flushed_and_the_connection_goes_on(
    client: Client, server: TCPServer, export_dir: Path
) -> None:
    (export_dir / "f").write_bytes(b"x" * (1 << 20))
    fid, _ = await client.walk("f")
    await client.lopen(fid, OpenFlag.RDONLY)
    task = asyncio.create_task(client.read(fid, 0, 1 << 20))
    await asyncio.sleep(0)  # the request is on the wire; now give up on it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await client.read_file("a.txt") == b"hello\n"
    for _ in range(200):  # bounded wait for the Tflush to reach the server
        if server.stats.snapshot().ops.get("flush"):
            break
        await asyncio.sleep(0.05)
    assert server.stats.snapshot().ops["flush"] == 1
    assert len(await client.read(fid, 0, 100)) == 100
