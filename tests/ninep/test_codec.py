"""9P2000.L codec: every message round trip, exact layouts, chunked decoding, malformed input, fuzzing."""

from __future__ import annotations

import struct
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cornus_core.ninep import (
    Decoder,
    DirEntry,
    ProtocolError,
    Qid,
    decode,
    decode_dirents,
    encode,
    encode_dirents,
)
from cornus_core.ninep.constants import MessageType
from cornus_core.ninep.messages import MESSAGES, Message, Rread, Tread, Tversion, Twalk, Twrite

INTS = {"B": 0xFF, "H": 0xFFFF, "I": 0xFFFFFFFF, "Q": 0xFFFFFFFFFFFFFFFF}
names = st.text(max_size=40)
qids = st.builds(Qid, st.integers(0, 0xFF), st.integers(0, 0xFFFFFFFF), st.integers(0, 2**64 - 1))


def field_strategy(code: str) -> st.SearchStrategy[Any]:
    if code in INTS:
        return st.integers(0, INTS[code])
    return {
        "s": names,
        "q": qids,
        "S": st.lists(names, max_size=20).map(tuple),
        "W": st.lists(qids, max_size=20).map(tuple),
        "d": st.binary(max_size=300),
    }[code]


def message_strategy(cls: type[Message]) -> st.SearchStrategy[Message]:
    return st.builds(cls, st.integers(0, 0xFFFF), *(field_strategy(code) for code in cls.WIRE))


any_message = st.one_of(*(message_strategy(cls) for cls in MESSAGES.values()))


def test_every_linux_v9fs_message_is_defined() -> None:
    wanted = {
        "version", "attach", "auth", "walk", "lopen", "lcreate", "read", "write", "clunk", "remove", "getattr",
        "setattr", "readdir", "mkdir", "symlink", "readlink", "mknod", "link", "rename", "renameat", "unlinkat",
        "statfs", "fsync", "lock", "getlock", "xattrwalk", "xattrcreate", "flush",
    }  # fmt: skip
    defined = {cls.__name__[1:].lower() for cls in MESSAGES.values()}
    assert wanted <= defined
    for name in wanted:  # both directions exist, numbered T = R - 1
        t, r = MessageType[f"T{name.upper()}"], MessageType[f"R{name.upper()}"]
        assert MESSAGES[t].__name__ == f"T{name}" and MESSAGES[r].__name__ == f"R{name}" and r == t + 1
    assert MESSAGES[MessageType.RLERROR].__name__ == "Rlerror"


@pytest.mark.parametrize("cls", list(MESSAGES.values()), ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_message_round_trips(cls: type[Message], data: st.DataObject) -> None:
    msg = data.draw(message_strategy(cls))
    wire = encode(msg)
    assert struct.unpack_from("<IBH", wire) == (len(wire), cls.TYPE, msg.tag)
    assert decode(wire) == msg
    decoder = Decoder()
    decoder.feed(wire[:3])
    assert decoder.next_message() is None
    decoder.feed(wire[3:])
    assert decoder.next_message() == msg and decoder.buffered == 0


def test_exact_layouts_match_the_protocol() -> None:
    assert encode(Tversion(0xFFFF, 8192, "9P2000.L")) == (
        struct.pack("<IBHIH", 21, 100, 0xFFFF, 8192, 8) + b"9P2000.L"
    )
    assert encode(Twalk(1, 2, 3, ("ab", "c"))) == (
        struct.pack("<IBHIIH", 24, 110, 1, 2, 3, 2) + b"\x02\x00ab" + b"\x01\x00c"
    )
    assert encode(Tread(7, 1, 1 << 40, 4096)) == struct.pack("<IBHIQI", 23, 116, 7, 1, 1 << 40, 4096)
    assert encode(Rread(7, b"xyz")) == struct.pack("<IBHI", 14, 117, 7, 3) + b"xyz"
    assert encode(Twrite(9, 4, 10, b"hi"))[-6:] == struct.pack("<I", 2) + b"hi"


def test_write_payload_is_a_zero_copy_view_of_the_received_chunk() -> None:
    chunk = encode(Twrite(1, 2, 0, b"p" * 1000)) + encode(Twrite(2, 2, 1000, b"q" * 10))
    decoder = Decoder()
    decoder.feed(chunk)
    first, second = list(decoder)
    assert isinstance(first, Twrite) and isinstance(first.data, memoryview)
    assert first.data.obj is chunk and bytes(first.data) == b"p" * 1000
    assert isinstance(second, Twrite) and bytes(second.data) == b"q" * 10


def test_decoder_joins_frames_split_across_chunks_at_every_point() -> None:
    msgs = [Tversion(0xFFFF, 65536, "9P2000.L"), Twalk(1, 0, 1, ("a", "b")), Twrite(2, 1, 5, b"data" * 50)]
    wire = b"".join(encode(m) for m in msgs)
    for cut in range(len(wire) + 1):
        decoder = Decoder()
        decoder.feed(wire[:cut])
        got = list(decoder)
        decoder.feed(bytearray(wire[cut:]))  # mutable input is copied, not aliased
        got += list(decoder)
        assert got == msgs, cut


def test_dirents_round_trip() -> None:
    entries = [DirEntry(Qid(0x80, 0, 1), 1, 4, "."), DirEntry(Qid(0, 3, 2**63), 2, 8, "ünï cödé")]
    assert decode_dirents(encode_dirents(entries)) == entries
    with pytest.raises(ProtocolError, match="truncated"):
        decode_dirents(encode_dirents(entries)[:-3])


@pytest.mark.parametrize(
    ("frame", "fatal", "match"),
    [
        (struct.pack("<I", 3) + b"abc", True, "outside 7"),
        (struct.pack("<I", 1 << 30), True, "outside 7"),
        (struct.pack("<IBH", 7, 250, 5), False, "unknown 9P2000.L message type 250"),
        (struct.pack("<IBHI", 11, 116, 5, 1), False, "malformed Tread .* too short"),
        (encode(Tread(5, 1, 2, 3)) + b"x", None, None),
        (struct.pack("<IBHIIH", 19, 110, 5, 1, 2, 1) + b"\x09\x00", False, "runs past the end"),
    ],
)
def test_malformed_frames_raise_protocol_error(frame: bytes, fatal: bool | None, match: str | None) -> None:
    if fatal is None:  # trailing garbage after a well-formed message inside its frame size
        frame = struct.pack("<I", len(frame)) + frame[4:]
        with pytest.raises(ProtocolError, match="trailing bytes") as info:
            decode(frame)
        assert info.value.tag == 5 and not info.value.fatal
        return
    decoder = Decoder(max_size=1 << 20)
    decoder.feed(frame)
    with pytest.raises(ProtocolError, match=match) as info:
        decoder.next_message()
    assert info.value.fatal is fatal
    if not fatal:
        assert info.value.tag == 5
        assert decoder.next_message() is None  # the bad frame was consumed; the stream goes on


def test_fatal_error_sticks() -> None:
    decoder = Decoder(max_size=100)
    decoder.feed(struct.pack("<I", 101) + b"x" * 200)
    for _ in range(2):
        with pytest.raises(ProtocolError, match="negotiated msize"):
            decoder.next_message()


def test_encode_refuses_out_of_range_values() -> None:
    with pytest.raises(ProtocolError, match="Tread"):
        encode(Tread(70000, 1, 0, 1))
    with pytest.raises(ProtocolError, match="UTF-8"):
        encode(Twalk(1, 1, 2, ("\ud800",)))
    with pytest.raises(ProtocolError, match="65535"):
        encode(Twalk(1, 1, 2, ("x" * 70000,)))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(1, 64), max_size=20))
def test_fuzz_decoder_any_bytes_any_chunks(data: bytes, cuts: list[int]) -> None:
    decoder = Decoder(max_size=4096)
    pos = 0
    for size in [*cuts, len(data)]:
        decoder.feed(data[pos : pos + size])
        pos += size
        try:
            for msg in decoder:
                assert isinstance(msg, Message)
        except ProtocolError as exc:
            if exc.fatal:
                return


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(MESSAGES)), st.integers(0, 0xFFFF), st.binary(max_size=120))
def test_fuzz_decoder_known_types_with_random_bodies(type_: int, tag: int, body: bytes) -> None:
    frame = struct.pack("<IBH", 7 + len(body), type_, tag) + body
    try:
        msg = decode(frame)
    except ProtocolError as exc:
        assert exc.tag == tag and not exc.fatal
    else:
        assert msg.tag == tag and encode(msg) == frame


@settings(max_examples=200, deadline=None)
@given(st.lists(any_message, max_size=8), st.integers(1, 50))
def test_fuzz_streams_of_messages_decode_in_order(msgs: list[Message], step: int) -> None:
    wire = b"".join(encode(m) for m in msgs)
    decoder = Decoder()
    got: list[Message] = []
    for i in range(0, len(wire), step):
        decoder.feed(wire[i : i + step])
        got += list(decoder)
    assert got == msgs


def test_field_names_are_the_documented_ones() -> None:
    assert [f.name for f in fields(Twalk)] == ["tag", "fid", "newfid", "wnames"]
    assert [f.name for f in fields(Rread)] == ["tag", "data"]
