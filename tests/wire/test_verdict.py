"""Verdict lines: format, fuzzing, and the exchange on a real mux stream."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.wire import (
    OK,
    ProtocolError,
    Verdict,
    VerdictKind,
    encode_verdict,
    parse_verdict,
    read_verdict,
    write_verdict,
)
from cornus_core.wire.verdict import MAX_VERDICT_LINE

from .pairs import socket_mux_pair


def test_lines() -> None:
    assert encode_verdict(OK) == b"ok\n"
    assert encode_verdict(Verdict(VerdictKind.DENY, "rule 3 (*.internal)")) == b"deny rule 3 (*.internal)\n"
    assert encode_verdict(Verdict(VerdictKind.ERROR, "line one\nline two")) == b"error line one line two\n"
    assert parse_verdict(b"timeout dial took 10 s\n") == Verdict(VerdictKind.TIMEOUT, "dial took 10 s")
    assert parse_verdict(b"ok").ok
    assert not parse_verdict(b"refused connection refused").ok
    assert str(Verdict(VerdictKind.REFUSED, "x")) == "refused x"


def test_overlong_reason_is_cut_on_a_character_boundary() -> None:
    line = encode_verdict(Verdict(VerdictKind.ERROR, "é" * 2000))
    assert len(line) <= MAX_VERDICT_LINE
    assert parse_verdict(line).reason.startswith("éé")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"maybe\n", "unknown verdict 'maybe'"),
        (b"OK\n", "unknown verdict 'OK'"),
        (b"\n", "unknown verdict ''"),
        (b"deny \xff\n", "not UTF-8"),
        (b"deny a\rb\n", "contains CR or LF"),
        (b"error " + b"x" * MAX_VERDICT_LINE, "over 1024 bytes"),
    ],
)
def test_malformed(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_verdict(raw)


@settings(deadline=None)
@given(st.sampled_from(list(VerdictKind)), st.text(max_size=300))
def test_round_trip(kind: VerdictKind, reason: str) -> None:
    verdict = parse_verdict(encode_verdict(Verdict(kind, reason)))
    assert verdict.kind is kind
    assert verdict.reason == " ".join(reason.splitlines()).strip()[: len(verdict.reason)]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=1100))
def test_fuzz_parser_yields_a_verdict_or_protocol_error(raw: bytes) -> None:
    try:
        assert isinstance(parse_verdict(raw), Verdict)
    except ProtocolError as exc:
        assert str(exc)


async def test_verdict_precedes_the_payload_on_a_mux_stream() -> None:
    async with socket_mux_pair() as (client, server):
        stream = await client.open_stream()
        stream.write(b"request")
        accepted = await server.accept_stream()
        await write_verdict(accepted, Verdict(VerdictKind.DENY, "policy says no"))
        accepted.write(b"ignored by a careful client")
        await accepted.aclose()
        assert await read_verdict(stream) == Verdict(VerdictKind.DENY, "policy says no")
        assert await stream.read() == b"ignored by a careful client"

        stream = await client.open_stream()
        stream.close()
        (await server.accept_stream()).close()
        with pytest.raises(ProtocolError, match="ended before its verdict"):
            await read_verdict(stream)
