"""yamux framing: encode/decode round trips, chunking, malformed input, fuzzing."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.wire import Flag, Frame, FrameDecoder, FrameType, ProtocolError, encode_frame
from cornus_core.wire.frames import HEADER_SIZE, encode_header


def frames_equal(a: Frame, b: Frame) -> bool:
    return (a.type, a.flags, a.stream_id, a.length, bytes(a.payload)) == (
        b.type,
        b.flags,
        b.stream_id,
        b.length,
        bytes(b.payload),
    )


SAMPLE = [
    Frame(FrameType.WINDOW_UPDATE, Flag.SYN, 1, 0),
    Frame(FrameType.DATA, 0, 1, 5, b"hello"),
    Frame(FrameType.DATA, Flag.FIN, 1, 0),
    Frame(FrameType.WINDOW_UPDATE, 0, 2, 65536),
    Frame(FrameType.PING, Flag.SYN, 0, 0xDEADBEEF),
    Frame(FrameType.PING, Flag.ACK, 0, 7),
    Frame(FrameType.DATA, Flag.ACK | Flag.FIN, 2, 3, b"xyz"),
    Frame(FrameType.WINDOW_UPDATE, Flag.RST, 3, 0),
    Frame(FrameType.GO_AWAY, 0, 0, 2),
]


def test_header_layout_is_big_endian_12_bytes() -> None:
    raw = encode_frame(Frame(FrameType.DATA, Flag.SYN | Flag.FIN, 0x01020304, 2, b"ab"))
    assert raw == bytes([0, 0, 0, 5, 1, 2, 3, 4, 0, 0, 0, 2]) + b"ab"
    assert len(encode_header(FrameType.PING, Flag.SYN, 0, 1)) == HEADER_SIZE


def test_round_trip_in_one_chunk() -> None:
    wire = b"".join(encode_frame(f) for f in SAMPLE)
    decoded = FrameDecoder().feed(wire)
    assert len(decoded) == len(SAMPLE)
    assert all(frames_equal(a, b) for a, b in zip(decoded, SAMPLE, strict=True))


def test_round_trip_byte_by_byte_and_every_split() -> None:
    wire = b"".join(encode_frame(f) for f in SAMPLE)
    decoder = FrameDecoder()
    one_by_one = [frame for i in range(len(wire)) for frame in decoder.feed(wire[i : i + 1])]
    assert all(frames_equal(a, b) for a, b in zip(one_by_one, SAMPLE, strict=True))
    for cut in range(len(wire) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
        assert all(frames_equal(a, b) for a, b in zip(got, SAMPLE, strict=True)), cut
        assert decoder.buffered == 0


def test_payload_inside_one_chunk_is_a_zero_copy_view() -> None:
    chunk = encode_frame(Frame(FrameType.DATA, 0, 1, 4, b"data"))
    (frame,) = FrameDecoder().feed(chunk)
    assert isinstance(frame.payload, memoryview)
    assert frame.payload.obj is chunk


def test_mutable_input_is_copied() -> None:
    chunk = bytearray(encode_frame(Frame(FrameType.DATA, 0, 1, 4, b"data")))
    (frame,) = FrameDecoder().feed(chunk)
    chunk[-4:] = b"XXXX"
    assert bytes(frame.payload) == b"data"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (struct.pack(">BBHII", 1, 0, 0, 1, 0), "unsupported yamux version 1"),
        (struct.pack(">BBHII", 0, 4, 0, 1, 0), "unknown frame type 4"),
        (struct.pack(">BBHII", 0, 0, 0x10, 1, 0), "unknown flags 0x0010"),
        (struct.pack(">BBHII", 0, 0, 0, 0, 0), "DATA frame for stream 0"),
        (struct.pack(">BBHII", 0, 1, 0, 0, 5), "WINDOW_UPDATE frame for stream 0"),
        (struct.pack(">BBHII", 0, 2, 1, 3, 0), "PING frame names stream 3"),
        (struct.pack(">BBHII", 0, 2, 0, 0, 0), "PING frame with flags 0x0000"),
        (struct.pack(">BBHII", 0, 2, 3, 0, 0), "PING frame with flags 0x0003"),
        (struct.pack(">BBHII", 0, 3, 0, 5, 0), "GO_AWAY frame names stream 5"),
        (struct.pack(">BBHII", 0, 3, 1, 0, 0), "GO_AWAY frame with flags"),
        (struct.pack(">BBHII", 0, 0, 0, 1, 1024 + 1), "exceeds the 1024-byte limit"),
    ],
)
def test_malformed_headers(raw: bytes, message: str) -> None:
    decoder = FrameDecoder(max_payload=1024)
    with pytest.raises(ProtocolError, match=message):
        decoder.feed(raw)
    with pytest.raises(ProtocolError, match=message):  # the decoder stays failed
        decoder.feed(b"")


def test_error_names_the_byte_offset() -> None:
    good = encode_frame(Frame(FrameType.DATA, 0, 1, 3, b"abc"))
    decoder = FrameDecoder()
    decoder.feed(good)
    with pytest.raises(ProtocolError, match=f"at byte {len(good)}"):
        decoder.feed(b"\x07" + bytes(11))


frame_strategy = st.one_of(
    st.builds(
        lambda flags, sid, payload: Frame(FrameType.DATA, flags, sid, len(payload), payload),
        st.integers(0, 15),
        st.integers(1, 2**32 - 1),
        st.binary(max_size=300),
    ),
    st.builds(
        lambda flags, sid, delta: Frame(FrameType.WINDOW_UPDATE, flags, sid, delta),
        st.integers(0, 15),
        st.integers(1, 2**32 - 1),
        st.integers(0, 2**32 - 1),
    ),
    st.builds(
        lambda flag, opaque: Frame(FrameType.PING, flag, 0, opaque),
        st.sampled_from([Flag.SYN, Flag.ACK]),
        st.integers(0, 2**32 - 1),
    ),
    st.builds(lambda code: Frame(FrameType.GO_AWAY, 0, 0, code), st.integers(0, 2**32 - 1)),
)


@settings(deadline=None)
@given(st.lists(frame_strategy, max_size=20), st.lists(st.integers(0, 4000), max_size=10))
def test_round_trip_any_frames_any_chunking(frames: list[Frame], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(f) for f in frames)
    points = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})
    decoder = FrameDecoder()
    got = [f for a, b in itertools.pairwise(points) for f in decoder.feed(wire[a:b])]
    assert len(got) == len(frames)
    assert all(frames_equal(a, b) for a, b in zip(got, frames, strict=True))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_fuzz_decoder_yields_frames_or_protocol_error(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_payload=4096)
    try:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                assert frame.type in FrameType.__members__.values()
                if frame.type == FrameType.DATA:
                    assert len(frame.payload) == frame.length
    except ProtocolError:
        pass


header_fields = st.tuples(
    st.sampled_from([0, 0, 0, 0, 1, 255]),
    st.integers(0, 5),
    st.integers(0, 31),
    st.sampled_from([0, 1, 2, 3, 2**32 - 1]),
    st.integers(0, 5000),
    st.binary(max_size=64),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(header_fields, max_size=8), st.integers(1, 50))
def test_fuzz_decoder_with_plausible_headers(parts: list[tuple[int, ...]], step: int) -> None:
    wire = b"".join(struct.pack(">BBHII", *p[:5]) + p[5] for p in parts)  # type: ignore[operator]
    decoder = FrameDecoder(max_payload=4096)
    try:
        for i in range(0, len(wire), step):
            decoder.feed(wire[i : i + step])
    except ProtocolError as exc:
        assert str(exc)
