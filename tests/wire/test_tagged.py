"""Tagged stream headers: format, limits, fuzzing, and reading them off a real mux stream."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.wire import (
    HeaderParser,
    ProtocolError,
    TaggedHeader,
    encode_header,
    read_header,
    write_header,
)
from cornus_core.wire.tagged import MAX_LINE, MAX_LINES

from .pairs import socket_mux_pair


def parse(data: bytes) -> tuple[TaggedHeader | None, bytes]:
    parser = HeaderParser()
    header = parser.feed(data)
    return header, parser.leftover


def test_encode_layout() -> None:
    raw = encode_header("E", {"route": "client", "dest": "example.com:443"})
    assert raw == b"Eroute: client\ndest: example.com:443\n\n"
    assert encode_header("C") == b"C\n"


def test_parse_round_trip_and_leftover() -> None:
    header, rest = parse(encode_header("K", {"name": "aws", "note": "a: b: c"}) + b"payload")
    assert header == TaggedHeader("K", {"name": "aws", "note": "a: b: c"})
    assert header is not None and header["note"] == "a: b: c" and header.get("missing") is None
    assert rest == b"payload"


def test_parse_incrementally_byte_by_byte() -> None:
    raw = encode_header("L", {"name": "src"}) + b"\x00\x01"
    parser = HeaderParser()
    results = [parser.feed(raw[i : i + 1]) for i in range(len(raw) - 2)]
    assert results[:-1] == [None] * (len(results) - 1)
    assert results[-1] == TaggedHeader("L", {"name": "src"})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"1x: y\n\n", "tag must be one ASCII letter, got byte 0x31"),
        (b"\xffx: y\n\n", "tag must be one ASCII letter"),
        (b"Ekey value\n\n", "line 1 is not 'key: value'"),
        (b"EKey: v\n\n", "line 1 is not 'key: value'"),
        (b"Ea: 1\na: 2\n\n", "line 2 repeats key 'a'"),
        (b"Ea: \xff\n\n", "line 1 is not UTF-8"),
        (b"Ea: x\ry\n\n", "value for 'a' contains CR or NUL"),
    ],
)
def test_malformed_headers(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        HeaderParser().feed(raw)


def test_line_length_limit() -> None:
    longest = b"k: " + b"v" * (MAX_LINE - 4) + b"\n"
    assert len(longest) == MAX_LINE
    header, _ = parse(b"E" + longest + b"\n")
    assert header is not None and len(header["k"]) == MAX_LINE - 4
    with pytest.raises(ProtocolError, match=f"line 1 is longer than {MAX_LINE} bytes"):
        HeaderParser().feed(b"E" + b"k: " + b"v" * (MAX_LINE - 3) + b"\n\n")
    with pytest.raises(ValueError, match="over 4096"):
        encode_header("E", {"k": "v" * MAX_LINE})


def test_line_count_limit() -> None:
    fields = {f"k{i}": "v" for i in range(MAX_LINES)}
    header, _ = parse(encode_header("E", fields))
    assert header is not None and len(header.fields) == MAX_LINES
    too_many = b"E" + b"".join(b"k%d: v\n" % i for i in range(MAX_LINES + 1)) + b"\n"
    with pytest.raises(ProtocolError, match=f"more than {MAX_LINES} lines"):
        HeaderParser().feed(too_many)
    with pytest.raises(ValueError, match="over the limit of 16"):
        encode_header("E", {**fields, "one-more": "v"})


@pytest.mark.parametrize(
    ("tag", "fields"), [("", {}), ("EE", {}), ("é", {}), ("E", {"Bad": "v"}), ("E", {"k": "a\nb"})]
)
def test_encode_rejects_what_the_format_cannot_carry(tag: str, fields: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        encode_header(tag, fields)


keys = st.from_regex(r"[a-z0-9][a-z0-9-]{0,15}", fullmatch=True)
values = st.text(st.characters(blacklist_characters="\r\n\x00", blacklist_categories=["Cs"]), max_size=40)


@settings(deadline=None)
@given(
    st.sampled_from("EeKkLlMCx"), st.dictionaries(keys, values, max_size=MAX_LINES), st.binary(max_size=20)
)
def test_round_trip_any_valid_header(tag: str, fields: dict[str, str], payload: bytes) -> None:
    header, rest = parse(encode_header(tag, fields) + payload)
    assert header == TaggedHeader(tag, fields)
    assert rest == payload


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=6))
def test_fuzz_parser_yields_a_header_or_protocol_error(chunks: list[bytes]) -> None:
    parser = HeaderParser()
    try:
        for chunk in chunks:
            if parser.feed(chunk) is not None:
                break
    except ProtocolError as exc:
        assert str(exc)


async def test_read_header_over_a_mux_stream_leaves_the_payload() -> None:
    async with socket_mux_pair() as (client, server):
        stream = await client.open_stream()
        await write_header(stream, "E", {"route": "client", "dest": "[::1]:8080"})
        stream.write(b"GET / HTTP/1.1\r\n")
        stream.close()
        accepted = await server.accept_stream()
        header = await read_header(accepted)
        assert header == TaggedHeader("E", {"route": "client", "dest": "[::1]:8080"})
        assert await accepted.read() == b"GET / HTTP/1.1\r\n"


async def test_read_header_puts_back_a_payload_larger_than_the_window() -> None:
    # The header and the payload's start arrive together; what the parser read past the header goes
    # back into the stream without crediting the peer twice, so 4 MiB still flow exactly.
    payload = bytes(range(256)) * 16384
    async with socket_mux_pair() as (client, server):
        stream = await client.open_stream()
        await write_header(stream, "E", {"route": "client"})
        stream.write(payload)
        stream.close()
        accepted = await server.accept_stream()
        assert await read_header(accepted) == TaggedHeader("E", {"route": "client"})
        assert await accepted.read() == payload


async def test_read_header_errors_on_a_mux_stream() -> None:
    async with socket_mux_pair() as (client, server):
        stream = await client.open_stream()
        stream.write(b"Eroute: cl")
        stream.close()
        with pytest.raises(ProtocolError, match="ended inside its header"):
            await read_header(await server.accept_stream())

        stream = await client.open_stream()
        stream.write(b"E" + b"x" * (MAX_LINE + 10))
        with pytest.raises(ProtocolError, match="longer than 4096 bytes"):
            await read_header(await server.accept_stream())
