"""The sans-IO HTTP proxy: request classification, rewriting, framing, and fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.proxy.httpproxy import (
    Body,
    Closed,
    EndOfBody,
    ForwardRequest,
    HttpProxyError,
    HttpProxyServer,
    HttpUpstream,
    Pending,
    ResponseHead,
    TunnelRequest,
    connect_request,
    error_response,
    parse_connect_response,
)


def _events(conn: HttpProxyServer | HttpUpstream) -> list[object]:
    events: list[object] = []
    while (event := conn.next_event()) not in (Pending.NEED_DATA, Pending.PAUSED):
        events.append(event)
        if isinstance(event, Closed):  # repeats forever once the peer closed
            break
    return events


def _server(data: bytes) -> tuple[HttpProxyServer, list[object]]:
    conn = HttpProxyServer()
    conn.receive_data(data)
    return conn, _events(conn)


def test_connect_with_trailing_bytes() -> None:
    conn, events = _server(b"CONNECT Example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\x16\x03\x01")
    assert events[0] == TunnelRequest("example.com", None, 443)
    assert conn.trailing_data == b"\x16\x03\x01"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (b"[::1]:8443", TunnelRequest(None, "::1", 8443)),
        (b"10.1.2.3:22", TunnelRequest(None, "10.1.2.3", 22)),
    ],
)
def test_connect_ip_targets(target: bytes, expected: TunnelRequest) -> None:
    _, events = _server(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
    assert events[0] == expected


def test_absolute_form_is_rewritten() -> None:
    _, events = _server(
        b"POST http://user:pw@Api.Example.com:8080/v1/x?y=1#frag HTTP/1.1\r\n"
        b"Host: wrong.example\r\n"
        b"Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"
        b"Proxy-Connection: keep-alive\r\n"
        b"Connection: keep-alive, X-Secret, Content-Length\r\n"
        b"Keep-Alive: timeout=5\r\n"
        b"TE: trailers\r\n"
        b"Trailer: X-T\r\n"
        b"X-Secret: s\r\n"
        b"Upgrade: h2c\r\n"
        b"Accept: */*\r\n"
        b"Content-Length: 5\r\n\r\nhello"
    )
    request, body, end = events
    assert isinstance(request, ForwardRequest)
    assert (request.host, request.ip, request.port) == ("api.example.com", None, 8080)
    assert request.url == "http://api.example.com:8080/v1/x?y=1"
    assert request.target == b"/v1/x?y=1"
    assert not request.upgrade  # Upgrade without "upgrade" in Connection is just dropped
    assert request.headers == [
        (b"Host", b"api.example.com:8080"),
        (b"Accept", b"*/*"),
        (b"Content-Length", b"5"),  # framing survives even when Connection names it
        (b"Connection", b"close"),
    ]
    assert body == Body(b"hello")
    assert end == EndOfBody([])


def test_default_port_and_empty_path() -> None:
    _, events = _server(b"GET http://[::1]?q HTTP/1.1\r\nHost: [::1]\r\n\r\n")
    request = events[0]
    assert isinstance(request, ForwardRequest)
    assert (request.ip, request.port, request.target) == ("::1", 80, b"/?q")
    assert request.headers[0] == (b"Host", b"[::1]")
    assert request.url == "http://[::1]/?q"


def test_upgrade_is_kept_when_asked_for() -> None:
    _, events = _server(
        b"GET http://h.example/ws HTTP/1.1\r\nHost: h.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    )
    request = events[0]
    assert isinstance(request, ForwardRequest) and request.upgrade
    assert (b"Upgrade", b"websocket") in request.headers
    assert request.headers[-1] == (b"Connection", b"upgrade")


def test_chunked_body_and_keep_alive() -> None:
    conn, events = _server(
        b"POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        b"GET http://b.example:81/ HTTP/1.1\r\nHost: b.example:81\r\n\r\n"
    )
    request = events[0]
    assert isinstance(request, ForwardRequest)
    assert (b"Transfer-Encoding", b"chunked") in request.headers
    assert events[1:] == [Body(b"abc"), Body(b"de"), EndOfBody([])]
    assert not conn.start_next_request()  # not before the response went out
    conn.send_response(ResponseHead(200, b"OK", [(b"Content-Length", b"0")]))
    conn.send_end()
    assert conn.start_next_request()
    second = _events(conn)[0]
    assert isinstance(second, ForwardRequest) and second.host == "b.example" and second.port == 81
    conn.send_response(ResponseHead(204, b"No Content", []))
    conn.send_end()
    assert conn.start_next_request()
    conn.receive_data(b"")
    assert _events(conn) == [Closed()]


def test_response_relay_strips_hop_by_hop_and_reframes() -> None:
    conn, _ = _server(b"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n")
    head = conn.send_response(
        ResponseHead(
            200,
            b"OK",
            [
                (b"Connection", b"X-Hop"),
                (b"X-Hop", b"1"),
                (b"Keep-Alive", b"timeout=1"),
                (b"Transfer-Encoding", b"chunked"),
                (b"Proxy-Authenticate", b"Basic"),
                (b"Server", b"origin"),
            ],
        )
    )
    assert head == b"HTTP/1.1 200 OK\r\nServer: origin\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert conn.send_body(b"abc") == b"3\r\nabc\r\n"
    assert conn.send_end() == b"0\r\n\r\n"


def test_upstream_request_and_response() -> None:
    _, events = _server(b"HEAD http://a.example/x HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\n\r\n")
    request = events[0]
    assert isinstance(request, ForwardRequest)
    upstream = HttpUpstream(request)
    assert (
        upstream.request_head()
        == b"HEAD /x HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\nConnection: close\r\n\r\n"
    )
    assert upstream.send_end() == b""
    upstream.receive_data(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
    assert _events(upstream) == [
        ResponseHead(100, b"Continue", []),
        ResponseHead(200, b"OK", [(b"Content-Length", b"10")]),
        EndOfBody([]),  # a HEAD response has no body whatever its Content-Length says
    ]


def test_upstream_body_until_close_and_errors() -> None:
    _, events = _server(b"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n")
    request = events[0]
    assert isinstance(request, ForwardRequest)
    upstream = HttpUpstream(request)
    upstream.request_head()
    upstream.send_end()
    upstream.receive_data(b"HTTP/1.0 200 OK\r\n\r\nbody")
    assert _events(upstream) == [ResponseHead(200, b"OK", []), Body(b"body")]
    upstream.receive_data(b"")
    assert _events(upstream) == [EndOfBody([]), Closed()]

    broken = HttpUpstream(request)
    broken.request_head()
    broken.send_end()
    broken.receive_data(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(HttpProxyError, match=r"response from http://a\.example/") as caught:
        broken.next_event()
    assert caught.value.status == 502


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request 1 line: target '/' is not an absolute"),
        (b"GET https://x.example/ HTTP/1.1\r\nHost: x\r\n\r\n", 501, "scheme 'https' is not proxied"),
        (b"CONNECT x.example HTTP/1.1\r\nHost: x\r\n\r\n", 400, "missing port"),
        (b"CONNECT x.example:0 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "port '0'"),
        (b"CONNECT ::1:443 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "must be in brackets"),
        (b"CONNECT a_b%00.example:1 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid label"),
        (b"GET http://0x7f.1/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "looks numeric"),
        (b"GET http://x/ HTTP/1.1\r\n\r\n", 400, "request 1 on this connection: Missing mandatory Host"),
        (b"\x16\x03\x01\x00\x10junk\r\n\r\n", 400, "request 1 on this connection"),
        (b"GET http://x/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "more than 8192"),
    ],
)
def test_errors_carry_status_and_place(data: bytes, status: int, message: str) -> None:
    conn = HttpProxyServer()
    with pytest.raises(HttpProxyError) as caught:
        conn.receive_data(data)
        _events(conn)
    assert caught.value.status == status
    assert message in str(caught.value)


def test_head_larger_than_64k_is_refused() -> None:
    conn = HttpProxyServer()
    conn.receive_data(b"GET http://x/ HTTP/1.1\r\nHost: x\r\n")
    with pytest.raises(HttpProxyError) as caught:
        for _ in range(70):
            conn.receive_data(b"X-Filler: " + b"f" * 1000 + b"\r\n")
            _events(conn)
    assert caught.value.status == 431


def test_builders() -> None:
    response = error_response(403, "policy denies a.example:443")
    assert response == (
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 28\r\n"
        b"Connection: close\r\n\r\npolicy denies a.example:443\n"
    )
    assert connect_request("::1", 443, proxy_authorization="Basic eDp5") == (
        b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\nProxy-Authorization: Basic eDp5\r\n\r\n"
    )
    assert parse_connect_response(b"HTTP/1.1 200 Connection established\r\n\r\n") == (
        200,
        "Connection established",
    )
    assert parse_connect_response(b"HTTP/1.0 407\r\n\r\n") == (407, "")
    with pytest.raises(HttpProxyError, match="line 1 is not an HTTP status line"):
        parse_connect_response(b"SSH-2.0\r\n\r\n")


@settings(deadline=None)
@given(st.binary(max_size=2000), st.integers(min_value=1, max_value=200))
def test_fuzz_server_any_bytes(data: bytes, step: int) -> None:
    conn = HttpProxyServer()
    try:
        for i in range(0, len(data), step):
            conn.receive_data(data[i : i + step])
            for event in _events(conn):
                if isinstance(event, ForwardRequest):
                    assert event.target.startswith(b"/")
                    assert event.headers[0][0] == b"Host"
                    assert not any(n.lower() == b"proxy-authorization" for n, _ in event.headers)
        conn.receive_data(b"")
        _events(conn)
    except HttpProxyError as exc:
        assert 400 <= exc.status < 600 and str(exc)


_REQUEST_LINES = st.sampled_from(
    [
        b"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n",
        b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n",
        b"POST http://[::1]:8/x HTTP/1.1\r\nHost: [::1]:8\r\nTransfer-Encoding: chunked\r\n",
    ]
)


@settings(deadline=None)
@given(_REQUEST_LINES, st.binary(max_size=500))
def test_fuzz_server_valid_heads_with_any_tail(head: bytes, tail: bytes) -> None:
    conn = HttpProxyServer()
    try:
        conn.receive_data(head + tail)
        _events(conn)
    except HttpProxyError as exc:
        assert str(exc)


@settings(deadline=None)
@given(st.binary(max_size=2000))
def test_fuzz_upstream_any_response_bytes(data: bytes) -> None:
    _, events = _server(b"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n")
    request = events[0]
    assert isinstance(request, ForwardRequest)
    upstream = HttpUpstream(request)
    upstream.request_head()
    upstream.send_end()
    try:
        upstream.receive_data(data)
        _events(upstream)
        upstream.receive_data(b"")
        _events(upstream)
    except HttpProxyError as exc:
        assert exc.status == 502


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_connect_response(data: bytes) -> None:
    try:
        status, _ = parse_connect_response(data)
    except HttpProxyError as exc:
        assert "line 1" in str(exc)
    else:
        assert 100 <= status <= 999
