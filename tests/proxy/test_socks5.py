"""The sans-IO SOCKS5 server side."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.proxy.socks5 import (
    Command,
    Greeting,
    Pending,
    Reply,
    Request,
    Socks5Error,
    Socks5Server,
    build_reply,
)


def _handshake(request: bytes) -> tuple[Socks5Server, Request]:
    conn = Socks5Server()
    conn.receive_data(b"\x05\x02\x02\x00")
    greeting = conn.next_event()
    assert greeting == Greeting(b"\x02\x00")
    assert conn.select_method(greeting) == b"\x05\x00"
    conn.receive_data(request)
    event = conn.next_event()
    assert isinstance(event, Request)
    return conn, event


def test_ipv4_connect_and_trailing_data() -> None:
    conn, request = _handshake(b"\x05\x01\x00\x01\x0a\x00\x00\x01\x01\xbb" + b"\x16\x03\x01")
    assert request == Request(Command.CONNECT, None, "10.0.0.1", 443)
    assert conn.next_event() is Pending.PAUSED
    assert conn.reply(Reply.SUCCEEDED) == b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    assert conn.trailing_data == b"\x16\x03\x01"


def test_ipv6_connect() -> None:
    _, request = _handshake(b"\x05\x01\x00\x04" + bytes(15) + b"\x01" + b"\x00\x50")
    assert (request.host, request.ip, request.port) == (None, "::1", 80)


def test_domain_connect_is_lowercased_and_ip_literal_names_become_ips() -> None:
    _, request = _handshake(b"\x05\x01\x00\x03\x0bExample.COM\x00\x50")
    assert (request.host, request.ip) == ("example.com", None)
    _, request = _handshake(b"\x05\x01\x00\x03\x09127.0.0.1\x00\x50")
    assert (request.host, request.ip) == (None, "127.0.0.1")


def test_byte_at_a_time() -> None:
    conn = Socks5Server()
    events = []
    for byte in b"\x05\x01\x00":
        conn.receive_data(bytes([byte]))
        events.append(conn.next_event())
    assert events[:2] == [Pending.NEED_DATA, Pending.NEED_DATA]
    assert isinstance(events[2], Greeting)
    conn.select_method(events[2])
    request = b"\x05\x01\x00\x03\x04a.bc\x01\x00"
    for i, byte in enumerate(request):
        conn.receive_data(bytes([byte]))
        event = conn.next_event()
        assert (event is Pending.NEED_DATA) is (i < len(request) - 1)
    assert event == Request(Command.CONNECT, "a.bc", None, 256)


def test_no_acceptable_method_closes() -> None:
    conn = Socks5Server()
    conn.receive_data(b"\x05\x01\x02")
    greeting = conn.next_event()
    assert isinstance(greeting, Greeting) and not greeting.acceptable
    assert conn.select_method(greeting) == b"\x05\xff"
    assert conn.state == "closed"


def test_bind_and_udp_parse_so_the_listener_can_answer_0x07() -> None:
    _, request = _handshake(b"\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50")
    assert request.command is Command.BIND
    _, request = _handshake(b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x01")
    assert request.command is Command.UDP_ASSOCIATE


@pytest.mark.parametrize(
    ("data", "where", "reply"),
    [
        (b"\x05\x09\x00\x01", "byte 1: unknown command 0x09", Reply.COMMAND_NOT_SUPPORTED),
        (b"\x05\x01\x00\x05", "byte 3: address type 0x05", Reply.ADDRESS_TYPE_NOT_SUPPORTED),
        (b"\x05\x01\x01\x01", "byte 2: reserved byte is 0x01", Reply.GENERAL_FAILURE),
        (b"\x04\x01\x00\x01", "byte 0: version 0x04", Reply.GENERAL_FAILURE),
        (b"\x05\x01\x00\x03\x03a b\x00\x50", "bytes 5..7: bad domain name", Reply.GENERAL_FAILURE),
        (b"\x05\x01\x00\x03\x05127.1\x00\x50", "looks numeric", Reply.GENERAL_FAILURE),
        (b"\x05\x01\x00\x01\x01\x02\x03\x04\x00\x00", "bytes 8..9: port 0", Reply.GENERAL_FAILURE),
    ],
)
def test_request_errors_name_the_byte_and_the_reply(data: bytes, where: str, reply: Reply) -> None:
    conn = Socks5Server()
    conn.receive_data(b"\x05\x01\x00")
    greeting = conn.next_event()
    assert isinstance(greeting, Greeting)
    conn.select_method(greeting)
    conn.receive_data(data)
    with pytest.raises(Socks5Error, match=where) as caught:
        conn.next_event()
    assert caught.value.reply is reply


@pytest.mark.parametrize(
    ("data", "where"), [(b"\x04\x01", "greeting byte 0: version 0x04"), (b"\x05\x00", "greeting byte 1")]
)
def test_greeting_errors(data: bytes, where: str) -> None:
    conn = Socks5Server()
    conn.receive_data(data)
    with pytest.raises(Socks5Error, match=where):
        conn.next_event()


def test_unbounded_data_before_the_handshake_ends_is_an_error() -> None:
    conn = Socks5Server()
    with pytest.raises(Socks5Error, match="before the SOCKS5 handshake finished"):
        conn.receive_data(b"\x05\x01\x00" + bytes(70_000))


def test_reply_builder_codes_and_addresses() -> None:
    assert build_reply(Reply.NOT_ALLOWED) == b"\x05\x02\x00\x01" + bytes(6)
    assert build_reply(Reply.SUCCEEDED, ("::1", 8080)) == b"\x05\x00\x00\x04" + bytes(15) + b"\x01\x1f\x90"
    assert [int(r) for r in Reply] == list(range(9))


@settings(deadline=None)
@given(st.binary(max_size=600), st.integers(min_value=1, max_value=64))
def test_fuzz_any_bytes_give_events_or_socks5_error(data: bytes, step: int) -> None:
    conn = Socks5Server()
    try:
        for i in range(0, len(data), step):
            conn.receive_data(data[i : i + step])
            while True:
                event = conn.next_event()
                if isinstance(event, Greeting):
                    conn.select_method(event)
                elif isinstance(event, Request):
                    assert (event.host is None) != (event.ip is None)
                    assert 0 < event.port < 65536
                    conn.reply(Reply.SUCCEEDED)
                else:
                    break
    except Socks5Error as exc:
        assert str(exc)


@settings(deadline=None)
@given(st.from_regex(r"[a-z0-9-]{1,20}(\.[a-z]{1,10}){0,3}", fullmatch=True), st.integers(1, 65535))
def test_fuzz_domain_round_trip(name: str, port: int) -> None:
    conn = Socks5Server()
    conn.receive_data(b"\x05\x01\x00")
    greeting = conn.next_event()
    assert isinstance(greeting, Greeting)
    conn.select_method(greeting)
    conn.receive_data(b"\x05\x01\x00\x03" + bytes([len(name)]) + name.encode() + port.to_bytes(2, "big"))
    try:
        event = conn.next_event()
    except Socks5Error as exc:
        assert "looks numeric" in str(exc)
        assert name.rpartition(".")[2].isdigit() or name.startswith("0x")
        return
    assert event == Request(Command.CONNECT, name, None, port)
