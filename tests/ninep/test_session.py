"""The sans-IO server session: no sockets, bytes in and replies out over a real temporary export."""

from __future__ import annotations

import errno
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cornus_core.ninep import Export, Job, ProtocolError, Reply, ServerSession, decode, encode
from cornus_core.ninep.constants import NOFID, NONUNAME, NOTAG, OpenFlag
from cornus_core.ninep.messages import (
    Message,
    Rflush,
    Rlerror,
    Rread,
    Rversion,
    Rwalk,
    Tattach,
    Tauth,
    Tclunk,
    Tflush,
    Tfsync,
    Tgetattr,
    Tgetlock,
    Tlcreate,
    Tlink,
    Tlock,
    Tlopen,
    Tmkdir,
    Tmknod,
    Tread,
    Treaddir,
    Treadlink,
    Tremove,
    Trename,
    Trenameat,
    Tsetattr,
    Tstatfs,
    Tsymlink,
    Tunlinkat,
    Tversion,
    Twalk,
    Twrite,
    Txattrcreate,
    Txattrwalk,
)

from .conftest import SECRET, snapshot_tree


def rpc(session: ServerSession, msg: Message) -> Message:
    (outcome,) = session.receive_data(encode(msg))
    data = outcome.run() if isinstance(outcome, Job) else outcome.data
    reply = decode(data)
    assert reply.tag == msg.tag
    return reply


@pytest.fixture
def session(export_dir: Path) -> Iterator[ServerSession]:
    export = Export(export_dir)
    s = ServerSession(export)
    assert rpc(s, Tversion(NOTAG, 1 << 20, "9P2000.L")) == Rversion(NOTAG, 1 << 20, "9P2000.L")
    rpc(s, Tattach(1, 0, NOFID, "", "", NONUNAME))
    yield s
    s.close()
    export.close()


def test_version_negotiates_the_smaller_msize_and_resets_fids(export_dir: Path) -> None:
    s = ServerSession(Export(export_dir), max_msize=1 << 20)
    assert rpc(s, Tversion(NOTAG, 4 << 20, "9P2000.L")) == Rversion(NOTAG, 1 << 20, "9P2000.L")
    assert rpc(s, Tversion(NOTAG, 8192, "9P2000.L.x")) == Rversion(NOTAG, 8192, "9P2000.L")
    assert rpc(s, Tversion(NOTAG, 8192, "9P2000.u")).version == "unknown"  # type: ignore[attr-defined]
    assert rpc(s, Tversion(NOTAG, 100, "9P2000.L")).version == "unknown"  # type: ignore[attr-defined]
    rpc(s, Tversion(NOTAG, 8192, "9P2000.L"))
    rpc(s, Tattach(1, 0, NOFID, "", "", NONUNAME))
    assert s.fid_count == 1
    rpc(s, Tversion(NOTAG, 8192, "9P2000.L"))
    assert s.fid_count == 0


def test_auth_is_refused_and_attach_checks_fids(session: ServerSession) -> None:
    assert rpc(session, Tauth(1, 5, "u", "", NONUNAME)) == Rlerror(1, errno.EOPNOTSUPP)
    assert rpc(session, Tattach(1, 0, NOFID, "", "", NONUNAME)) == Rlerror(1, errno.EBADF)  # fid 0 in use
    assert rpc(session, Tattach(1, 1, 7, "", "", NONUNAME)) == Rlerror(1, errno.EBADF)  # no such afid
    assert rpc(session, Tattach(1, 1, NOFID, "", "sub/deeper", NONUNAME)).TYPE == 105
    assert rpc(session, Tattach(1, 2, NOFID, "", "../outside", NONUNAME)) == Rlerror(1, errno.EACCES)
    assert rpc(session, Tattach(1, 3, NOFID, "", "a.txt", NONUNAME)) == Rlerror(1, errno.ENOTDIR)


def test_large_reads_and_writes_and_fsync_become_jobs_small_ones_do_not(session: ServerSession) -> None:
    rpc(session, Twalk(1, 0, 1, ("sub", "b.bin")))
    rpc(session, Tlopen(1, 1, OpenFlag.RDWR))
    (small,) = session.receive_data(encode(Tread(2, 1, 0, 100)))
    (large,) = session.receive_data(encode(Tread(3, 1, 0, 65536)))
    assert isinstance(small, Reply) and isinstance(large, Job) and large.tag == 3
    reply = decode(large.run())
    assert isinstance(reply, Rread) and len(reply.data) == 65536
    (write,) = session.receive_data(encode(Twrite(4, 1, 0, b"z" * 70000)))
    assert isinstance(write, Job)
    (fsync,) = session.receive_data(encode(Tfsync(5, 1, 0)))
    assert isinstance(fsync, Job)
    rpc(session, Tclunk(6, 1))  # a clunk while jobs are pending cannot pull the fd away from them
    assert decode(write.run()).TYPE == 119 and decode(fsync.run()).TYPE == 51


def test_flush_is_ordered_after_the_flushed_request(session: ServerSession) -> None:
    (outcome,) = session.receive_data(encode(Tflush(9, 3)))
    assert isinstance(outcome, Reply) and outcome.after == 3 and decode(outcome.data) == Rflush(9)


def test_malformed_and_unknown_messages_get_errors_and_the_session_goes_on(session: ServerSession) -> None:
    bad = struct.pack("<IBHI", 11, 116, 7, 0)  # Tread without offset and count
    unknown = struct.pack("<IBH", 7, 112, 8)  # 9P2000 Topen is not 9P2000.L
    reply_type = encode(Rread(9, b""))  # an R-message sent to a server
    outcomes = session.receive_data(bad + unknown + reply_type + encode(Tgetattr(10, 0, 0x7FF)))
    replies = [decode(o.data) for o in outcomes if isinstance(o, Reply)]
    assert replies[:3] == [
        Rlerror(7, errno.EINVAL),
        Rlerror(8, errno.EOPNOTSUPP),
        Rlerror(9, errno.EOPNOTSUPP),
    ]
    assert replies[3].TYPE == 25
    with pytest.raises(ProtocolError, match="frame size 3"):
        session.receive_data(struct.pack("<I", 3))


def test_readdir_pages_by_offset(session: ServerSession, export_dir: Path) -> None:
    for i in range(300):
        (export_dir / f"entry-{i:03}").touch()
    rpc(session, Twalk(1, 0, 1, ()))
    rpc(session, Tlopen(1, 1, OpenFlag.RDONLY | OpenFlag.DIRECTORY))
    from cornus_core.ninep import decode_dirents

    names: list[str] = []
    offset, pages = 0, 0
    while True:
        reply = rpc(session, Treaddir(2, 1, offset, 512))
        entries = decode_dirents(reply.data)  # type: ignore[attr-defined]
        if not entries:
            break
        pages += 1
        assert all(e.offset > offset for e in entries)
        names += [e.name for e in entries]
        offset = entries[-1].offset
    assert pages > 10
    assert sorted(names) == sorted([".", "..", *os.listdir(export_dir)])


# ---------------------------------------------------------------------------- structured fuzzing
NAMES = ["a.txt", "sub", "deeper", "b.bin", "new", "esc_abs", "esc_rel", "esc_root", "link_a", "..", ".", "",
         "x/y", "../outside", "/", "secret", "outside", "ünï"]  # fmt: skip
fids = st.integers(0, 9)  # 0-5 exist when the sequence starts (see SETUP); walks may make the rest
name = st.sampled_from(NAMES)
small = st.integers(0, 0o7777)
requests = st.one_of(
    st.builds(Twalk, st.just(1), fids, fids, st.lists(name, max_size=4).map(tuple)),
    st.builds(Tlopen, st.just(1), fids, st.sampled_from([0, 1, 2, 0o1002, 0o200000, 0o2001])),
    st.builds(Tlcreate, st.just(1), fids, name, st.sampled_from([1, 2, 0o301]), small, st.just(0)),
    st.builds(Tread, st.just(1), fids, st.integers(0, 400_000), st.integers(0, 70_000)),
    st.builds(Twrite, st.just(1), fids, st.integers(0, 400_000), st.binary(max_size=100)),
    st.builds(Tclunk, st.just(1), fids),
    st.builds(Tremove, st.just(1), fids),
    st.builds(Tgetattr, st.just(1), fids, st.just(0x3FFF)),
    st.builds(Tsetattr, st.just(1), fids, st.integers(0, 0x1FF), small, st.just(0xFFFFFFFF),
              st.just(0xFFFFFFFF), st.integers(0, 100_000), st.just(1), st.just(0), st.just(2), st.just(0)),
    st.builds(Treaddir, st.just(1), fids, st.integers(0, 20), st.integers(0, 5000)),
    st.builds(Tmkdir, st.just(1), fids, name, small, st.just(0)),
    st.builds(Tsymlink, st.just(1), fids, name, st.sampled_from(["/", "../outside", "a.txt"]), st.just(0)),
    st.builds(Tmknod, st.just(1), fids, name, st.sampled_from([0o10644, 0o20644, 0o60644, 0o140644]),
              st.just(1), st.just(3), st.just(0)),
    st.builds(Treadlink, st.just(1), fids),
    st.builds(Tlink, st.just(1), fids, fids, name),
    st.builds(Trename, st.just(1), fids, fids, name),
    st.builds(Trenameat, st.just(1), fids, name, fids, name),
    st.builds(Tunlinkat, st.just(1), fids, name, st.sampled_from([0, 0x200])),
    st.builds(Tstatfs, st.just(1), fids),
    st.builds(Tfsync, st.just(1), fids, st.integers(0, 1)),
    st.builds(Tlock, st.just(1), fids, st.integers(0, 2), st.just(0), st.just(0), st.just(0), st.just(1), name),
    st.builds(Tgetlock, st.just(1), fids, st.integers(0, 2), st.just(0), st.just(0), st.just(1), name),
    st.builds(Txattrwalk, st.just(1), fids, fids, st.sampled_from(["", "user.x", "security.capability"])),
    st.builds(Txattrcreate, st.just(1), fids, st.sampled_from(["user.x", "trusted.y"]), st.integers(0, 8),
              st.just(0)),
    st.builds(Tflush, st.just(1), st.integers(0, 3)),
)  # fmt: skip


SETUP = {1: ("sub",), 2: ("a.txt",), 3: ("esc_abs",), 4: ("sub", "deeper"), 5: ("esc_rel",)}


@pytest.fixture(scope="module")
def fuzz_sandbox() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="ninep-fuzz-"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def fresh_sandbox(base: Path) -> Path:
    shutil.rmtree(base, ignore_errors=True)
    (base / "outside").mkdir(parents=True)
    (base / "outside" / "secret").write_bytes(SECRET)
    root = base / "export"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"hello\n")
    (root / "sub" / "b.bin").write_bytes(b"b" * 300_000)
    (root / "esc_abs").symlink_to(base / "outside")
    (root / "esc_rel").symlink_to("../outside")
    (root / "esc_root").symlink_to("/")
    (root / "link_a").symlink_to("a.txt")
    return root


@pytest.mark.parametrize("openat2", [None, False], ids=["openat2", "per-component"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(requests, min_size=1, max_size=40), st.booleans())
def test_fuzz_random_requests_answer_every_tag_and_never_leave_the_export(
    fuzz_sandbox: Path, openat2: bool | None, msgs: list[Message], read_only: bool
) -> None:
    root = fresh_sandbox(fuzz_sandbox)
    outside_before = snapshot_tree(fuzz_sandbox / "outside")
    export = Export(root, read_only=read_only, use_openat2=openat2)
    session = ServerSession(export)
    rpc(session, Tversion(NOTAG, 65536, "9P2000.L"))
    rpc(session, Tattach(0, 0, NOFID, "", "", NONUNAME))
    for fid, path in SETUP.items():
        assert rpc(session, Twalk(0, 0, fid, path)).TYPE == Rwalk.TYPE
    try:
        for tag, msg in enumerate(msgs):
            msg = replace(msg, tag=tag)
            (outcome,) = session.receive_data(encode(msg))
            data = outcome.run() if isinstance(outcome, Job) else outcome.data
            reply = decode(data)
            assert reply.tag == tag
            assert reply.TYPE in (msg.TYPE + 1, Rlerror.TYPE), (msg, reply)
    finally:
        session.close()
        export.close()
    assert snapshot_tree(fuzz_sandbox / "outside") == outside_before
    assert not (fuzz_sandbox / "new").exists() and sorted(os.listdir(fuzz_sandbox)) == ["export", "outside"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300), st.integers(1, 40))
def test_fuzz_any_bytes_into_a_session(fuzz_sandbox: Path, data: bytes, step: int) -> None:
    root = fuzz_sandbox / "bytes-export"
    root.mkdir(parents=True, exist_ok=True)
    export = Export(root, read_only=True)
    session = ServerSession(export, max_msize=8192)
    try:
        for i in range(0, len(data), step):
            try:
                outcomes = session.receive_data(data[i : i + step])
            except ProtocolError as exc:
                assert exc.fatal
                return
            for outcome in outcomes:
                frame = outcome.run() if isinstance(outcome, Job) else outcome.data
                decode(frame)
    finally:
        session.close()
        export.close()
