"""The hello: format, fuzzing, and version negotiation between two real endpoints."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.wire import (
    WIRE_VERSION,
    Hello,
    HelloError,
    HelloParser,
    MuxConfig,
    WireError,
    encode_hello,
    open_mux,
    parse_hello,
)
from cornus_core.wire.hello import MAX_HELLO_LINE

from .pairs import socket_transports


def test_line_format() -> None:
    line = encode_hello(Hello(features=frozenset({"telemetry", "policy-update"}), agent="cornus-server/0.1"))
    assert line == (
        b'{"proto":"cornus-wire","version":1,"features":["policy-update","telemetry"],'
        b'"agent":"cornus-server/0.1"}\n'
    )
    assert parse_hello(line) == Hello(1, frozenset({"telemetry", "policy-update"}), "cornus-server/0.1")


def test_unknown_keys_are_ignored() -> None:
    assert parse_hello(b'{"proto":"cornus-wire","version":1,"later":[1,2]}') == Hello()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"GET / HTTP/1.1\r\n", "not a JSON line"),
        (b'{"proto":"other","version":1}', "does not speak cornus-wire"),
        (b"[1]", "does not speak cornus-wire"),
        (b'{"proto":"cornus-wire"}', "invalid version None"),
        (b'{"proto":"cornus-wire","version":true}', "invalid version True"),
        (b'{"proto":"cornus-wire","version":1,"features":"x"}', "invalid features"),
        (b'{"proto":"cornus-wire","version":1,"features":["Bad Feature"]}', "invalid features"),
        (b'{"proto":"cornus-wire","version":1,"agent":5}', "invalid agent"),
    ],
)
def test_malformed(raw: bytes, message: str) -> None:
    with pytest.raises(HelloError, match=message):
        parse_hello(raw)


def test_parser_keeps_what_follows_and_bounds_the_line() -> None:
    parser = HelloParser()
    line = encode_hello(Hello())
    assert parser.feed(line[:5]) is None
    assert parser.feed(line[5:] + b"\x00frames") == Hello()
    assert parser.leftover == b"\x00frames"
    with pytest.raises(HelloError, match=f"no newline within {MAX_HELLO_LINE} bytes"):
        HelloParser().feed(b"{" * MAX_HELLO_LINE)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=100), max_size=5))
def test_fuzz_parser_yields_a_hello_or_hello_error(chunks: list[bytes]) -> None:
    parser = HelloParser()
    try:
        for chunk in chunks:
            if parser.feed(chunk) is not None:
                break
    except HelloError as exc:
        assert str(exc)


async def test_version_mismatch_fails_clearly_on_both_sides() -> None:
    left, right = await socket_transports()
    results = await asyncio.gather(
        open_mux(left, client=True, hello=Hello(agent="old-caretaker")),
        open_mux(right, client=False, hello=Hello(version=WIRE_VERSION + 1, agent="new-server")),
        return_exceptions=True,
    )
    assert all(isinstance(r, HelloError) for r in results), results
    assert str(results[0]) == (
        f"wire version mismatch: this side speaks cornus-wire {WIRE_VERSION}, "
        f"the peer (new-server) speaks {WIRE_VERSION + 1}"
    )
    assert str(results[1]) == (
        f"wire version mismatch: this side speaks cornus-wire {WIRE_VERSION + 1}, "
        f"the peer (old-caretaker) speaks {WIRE_VERSION}"
    )
    assert left.writer.is_closing() and right.writer.is_closing()


async def test_features_are_negotiated() -> None:
    left, right = await socket_transports()
    config = MuxConfig(keepalive_interval=None)
    a, b = await asyncio.gather(
        open_mux(left, client=True, config=config, hello=Hello(features=frozenset({"telemetry", "x"}))),
        open_mux(right, client=False, config=config, hello=Hello(features=frozenset({"telemetry", "y"}))),
    )
    assert a.features == b.features == frozenset({"telemetry"})
    assert b.peer_hello == Hello(features=frozenset({"telemetry", "x"}))
    await asyncio.gather(a.aclose(), b.aclose())


async def test_peer_that_is_not_a_cornus_peer() -> None:
    left, right = await socket_transports()
    right.writer.write(b"SSH-2.0-OpenSSH_9.2\r\n")
    with pytest.raises(HelloError, match="not a JSON line"):
        await open_mux(left, client=True)
    await right.close()


async def test_peer_that_closes_before_its_hello() -> None:
    left, right = await socket_transports()
    await right.close()
    with pytest.raises(WireError, match="hello"):  # HelloError, or SessionClosed if the send failed first
        await open_mux(left, client=True)
