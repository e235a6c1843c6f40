"""A read-only export refuses every mutating request with EROFS and leaves the tree untouched."""

from __future__ import annotations

import errno
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from cornus_core.ninep import Client, TCPServer, serve_tcp
from cornus_core.ninep.constants import OpenFlag, SetattrMask
from cornus_core.ninep.messages import (
    Message,
    Rclunk,
    Rlerror,
    Rremove,
    Tclunk,
    Tlcreate,
    Tlink,
    Tlopen,
    Tmkdir,
    Tmknod,
    Tremove,
    Trename,
    Trenameat,
    Tsetattr,
    Tsymlink,
    Tunlinkat,
    Twrite,
    Txattrcreate,
)

from .conftest import snapshot_tree


@pytest.fixture
async def ro_server(export_dir: Path) -> AsyncIterator[TCPServer]:
    async with await serve_tcp(export_dir, "127.0.0.1", 0, read_only=True) as srv:
        yield srv


class Fids:
    """Fresh fids for each mutation: the root, a file, a directory."""

    def __init__(self, root: int, file: int, dir: int) -> None:
        self.root, self.file, self.dir = root, file, dir


def setattr_msg(valid: int, **values: int) -> Callable[[Fids], Message]:
    fields = {"mode": 0, "uid": 0, "gid": 0, "size": 0, "asec": 0, "ansec": 0, "msec": 0, "mnsec": 0} | values
    return lambda f: Tsetattr(0, f.file, valid, *fields.values())


MUTATIONS: dict[str, Callable[[Fids], Message]] = {
    "lcreate": lambda f: Tlcreate(0, f.root, "new", OpenFlag.WRONLY | OpenFlag.CREATE, 0o644, 0),
    "lcreate_existing": lambda f: Tlcreate(0, f.root, "a.txt", OpenFlag.RDWR, 0o644, 0),
    "lopen_wronly": lambda f: Tlopen(0, f.file, OpenFlag.WRONLY),
    "lopen_rdwr": lambda f: Tlopen(0, f.file, OpenFlag.RDWR),
    "lopen_trunc": lambda f: Tlopen(0, f.file, OpenFlag.RDONLY | OpenFlag.TRUNC),
    "lopen_append": lambda f: Tlopen(0, f.file, OpenFlag.WRONLY | OpenFlag.APPEND),
    "mkdir": lambda f: Tmkdir(0, f.root, "d", 0o755, 0),
    "symlink": lambda f: Tsymlink(0, f.root, "l", "a.txt", 0),
    "mknod": lambda f: Tmknod(0, f.root, "fifo", stat.S_IFIFO | 0o644, 0, 0, 0),
    "link": lambda f: Tlink(0, f.root, f.file, "hard"),
    "rename": lambda f: Trename(0, f.file, f.root, "renamed"),
    "renameat": lambda f: Trenameat(0, f.root, "a.txt", f.root, "renamed"),
    "unlinkat_file": lambda f: Tunlinkat(0, f.root, "a.txt", 0),
    "unlinkat_dir": lambda f: Tunlinkat(0, f.dir, "deeper", 0x200),
    "remove": lambda f: Tremove(0, f.file),
    "remove_dir": lambda f: Tremove(0, f.dir),
    "setattr_mode": setattr_msg(SetattrMask.MODE, mode=0o600),
    "setattr_owner": setattr_msg(SetattrMask.UID | SetattrMask.GID, uid=0, gid=0),
    "setattr_size": setattr_msg(SetattrMask.SIZE, size=0),
    "setattr_times": setattr_msg(
        SetattrMask.ATIME | SetattrMask.ATIME_SET | SetattrMask.MTIME | SetattrMask.MTIME_SET, asec=1, msec=1
    ),
    "setattr_now": setattr_msg(SetattrMask.ATIME | SetattrMask.MTIME),
    "xattrcreate": lambda f: Txattrcreate(0, f.file, "user.x", 1, 0),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
async def test_every_mutation_is_refused_with_erofs(ro_server: TCPServer, sandbox: Path, name: str) -> None:
    before = snapshot_tree(sandbox)
    async with await Client.connect(*ro_server.address) as client:
        file, _ = await client.walk("a.txt")
        dir, _ = await client.walk("sub")
        reply = await client.request(MUTATIONS[name](Fids(client.root, file, dir)))
        assert reply == Rlerror(reply.tag, errno.EROFS)
        for fid in (file, dir):  # Tremove clunks its fid even when refused
            closing = await client.request(Tclunk(0, fid))
            assert isinstance(closing, Rclunk) or (name.startswith("remove") and isinstance(closing, Rlerror))
    assert snapshot_tree(sandbox) == before


async def test_write_on_a_read_only_fid_is_refused(ro_server: TCPServer, export_dir: Path) -> None:
    async with await Client.connect(*ro_server.address) as client:
        fid, _ = await client.walk("a.txt")
        await client.lopen(fid, OpenFlag.RDONLY)
        reply = await client.request(Twrite(0, fid, 0, b"x"))
        assert reply == Rlerror(reply.tag, errno.EROFS)
    assert (export_dir / "a.txt").read_bytes() == b"hello\n"


async def test_reading_still_works(ro_server: TCPServer, export_dir: Path) -> None:
    async with await Client.connect(*ro_server.address) as client:
        assert await client.read_file(("sub", "b.bin")) == (export_dir / "sub" / "b.bin").read_bytes()
        names = {e.name for e in await client.listdir("sub")}
        assert names == {".", "..", "b.bin", "deeper"}
        assert await client.readlink("link_a") == "a.txt"
        assert (await client.statvfs()).blocks > 0
        fid, _ = await client.walk("sub")
        assert isinstance(await client.request(Tremove(0, 999)), Rlerror)
        assert not isinstance(await client.request(Tclunk(0, fid)), Rremove)
