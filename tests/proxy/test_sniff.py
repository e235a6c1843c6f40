"""Hostname sniffing from real TLS ClientHello bytes and HTTP/1.x heads."""

from __future__ import annotations

import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.proxy.sniff import NEED_MORE, sniff_hostname


def client_hello(server_hostname: str | None, *, tls13_only: bool = False) -> bytes:
    """The first flight of Python's own TLS client, taken from a memory BIO (no network)."""
    context = ssl.create_default_context()
    if tls13_only:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    if server_hostname is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("tls13_only", [False, True])
def test_sni_from_a_real_client_hello(tls13_only: bool) -> None:
    hello = client_hello("API.Example.com", tls13_only=tls13_only)
    assert sniff_hostname(hello) == "api.example.com"
    assert sniff_hostname(hello + b"more records") == "api.example.com"


def test_every_prefix_of_a_client_hello_needs_more() -> None:
    hello = client_hello("a.example")
    assert all(sniff_hostname(hello[:n]) is NEED_MORE for n in range(len(hello)))


def test_client_hello_without_sni() -> None:
    assert sniff_hostname(client_hello(None)) is None
    # Python sends no SNI for an IP address either, as RFC 6066 wants.
    assert sniff_hostname(client_hello("127.0.0.1")) is None


def test_client_hello_split_over_two_records() -> None:
    hello = client_hello("split.example")
    payload = hello[5:]
    header = hello[:3]
    first, second = payload[:40], payload[40:]
    fragmented = (
        header + len(first).to_bytes(2, "big") + first + header + len(second).to_bytes(2, "big") + second
    )
    assert sniff_hostname(fragmented) == "split.example"
    assert sniff_hostname(fragmented[:60]) is NEED_MORE


def test_other_tls_records_are_none() -> None:
    alert = b"\x15\x03\x03\x00\x02\x02\x28"
    assert sniff_hostname(alert) is None
    server_hello_like = b"\x16\x03\x03\x00\x04\x02\x00\x00\x00"
    assert sniff_hostname(server_hello_like) is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"GET / HTTP/1.1\r\nUser-Agent: x\r\nHost: Www.Example.org:8080\r\n\r\n", "www.example.org"),
        (b"POST /x HTTP/1.0\nhost: [::1]:80\n\n", "::1"),
        (b"GET http://abs.example:81/p HTTP/1.1\r\nHost: other.example\r\n\r\n", "abs.example"),
        (b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\nHost: late.example\r\n", None),
        (b"GET / HTTP/1.1\r\nHost: bad host\r\n\r\n", None),
        (b"SSH-2.0-OpenSSH_9.2\r\n", None),
        (b"\x00\x01\x02", None),
        (b"GET / HTTP/1.1\r\nAccept: */*\r\n", NEED_MORE),
        (b"GET / HT", NEED_MORE),
        (b"OPTIO", NEED_MORE),
        (b"", NEED_MORE),
    ],
)
def test_http(data: bytes, expected: object) -> None:
    assert sniff_hostname(data) == expected


def test_limit_turns_need_more_into_none() -> None:
    endless = b"GET / HTTP/1.1\r\n" + b"X-Pad: " + b"p" * 20000
    assert sniff_hostname(endless[:1000]) is NEED_MORE
    assert sniff_hostname(endless) is None
    assert sniff_hostname(b"GET / HTTP/1.1\r\nX: y\r\n", limit=10) is None


@settings(deadline=None)
@given(st.binary(max_size=3000))
def test_fuzz_any_bytes(data: bytes) -> None:
    result = sniff_hostname(data)
    assert result is None or result is NEED_MORE or (isinstance(result, str) and result == result.lower())


_FUZZ_HELLO = client_hello("fuzz.example")


@settings(deadline=None)
@given(st.binary(min_size=1, max_size=600), st.integers(min_value=0, max_value=600))
def test_fuzz_mutated_client_hello(noise: bytes, at: int) -> None:
    hello = bytearray(_FUZZ_HELLO)
    at %= len(hello)
    hello[at : at + len(noise)] = noise
    result = sniff_hostname(bytes(hello))
    assert result is None or result is NEED_MORE or isinstance(result, str)
