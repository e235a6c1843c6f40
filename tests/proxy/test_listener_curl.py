"""The listener with curl as the app and a real local HTTP server as the destination."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from pathlib import Path

import pytest

from cornus_core.proxy.listener import ConnectionStats

from .conftest import Origin, Proxy, free_port, run

# curl exit codes
PROXY_HANDSHAKE_FAILED = 97  # CURLE_PROXY: SOCKS reply or CONNECT answer was a failure
RECV_ERROR = 56  # CURLE_RECV_ERROR: curl 7.88 reports a non-200 answer to CONNECT this way


async def _curl(curl: str, *args: str) -> tuple[int, str, str]:
    code, out, err = await run(curl, "--silent", "--show-error", "--max-time", "20", *args)
    return code, out.decode(), err.decode()


def _headers(answer: dict[str, object]) -> dict[str, str]:
    pairs = answer["headers"]
    assert isinstance(pairs, list)
    return {str(k).lower(): str(v) for k, v in pairs}


async def _settled(proxy: Proxy, count: int) -> list[ConnectionStats]:
    """Stats are reported when the listener finishes a request, which may trail curl's exit a little."""
    async with asyncio.timeout(10):
        while len(proxy.stats) < count:
            await asyncio.sleep(0.01)
    return proxy.stats


async def test_absolute_form_get_rewritten_to_origin_form(curl: str, proxy: Proxy, origin: Origin) -> None:
    code, out, err = await _curl(
        curl,
        "-x",
        proxy.url,
        "-H",
        "Proxy-Authorization: Basic c2VjcmV0OnNlY3JldA==",
        "-H",
        "Connection: X-Private",
        "-H",
        "X-Private: hop",
        "-H",
        "X-Kept: yes",
        f"{origin.url}/path/x?q=1",
    )
    assert code == 0, err
    answer = json.loads(out)
    assert answer["method"] == "GET"
    assert answer["path"] == "/path/x?q=1"  # origin-form, not the absolute URL
    headers = _headers(answer)
    assert headers["host"] == f"127.0.0.1:{origin.port}"
    assert headers["x-kept"] == "yes"
    assert headers["connection"] == "close"
    for hop in ("proxy-authorization", "proxy-connection", "x-private"):
        assert hop not in headers
    [request] = proxy.requests
    assert (request.host, request.ip, request.port) == (None, "127.0.0.1", origin.port)
    assert request.url == f"http://127.0.0.1:{origin.port}/path/x?q=1"
    assert request.protocol == "http"
    [stats] = await _settled(proxy, 1)
    assert stats.outcome == "ok" and stats.bytes_up > 0 and stats.bytes_down > len(out)


async def test_response_hop_by_hop_headers_are_removed(curl: str, proxy: Proxy, origin: Origin) -> None:
    code, out, err = await _curl(curl, "-x", proxy.url, "--include", f"{origin.url}/")
    assert code == 0, err
    head = out.split("\r\n\r\n", 1)[0].lower()
    assert "x-hop:" not in head  # named by the origin's Connection header
    assert "content-length:" in head


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_request_body_is_relayed(
    curl: str, proxy: Proxy, origin: Origin, chunked: bool, tmp_path: Path
) -> None:
    body = "".join(f"line {i}\n" for i in range(20000))  # ~200 KB: several reads and writes
    (tmp_path / "body").write_text(body)
    extra = ["-H", "Transfer-Encoding: chunked"] if chunked else []
    code, out, err = await _curl(
        curl, "-x", proxy.url, *extra, "--data-binary", f"@{tmp_path / 'body'}", f"{origin.url}/upload"
    )
    assert code == 0, err
    answer = json.loads(out)
    assert answer["method"] == "POST"
    assert answer["body"] == body
    assert ("transfer-encoding" in _headers(answer)) is chunked


async def test_keep_alive_serves_different_destinations_on_one_connection(
    curl: str, proxy: Proxy, origin: Origin, origin6: Origin
) -> None:
    code, out, err = await _curl(
        curl, "-x", proxy.url, f"{origin.url}/one", f"{origin6.url}/two", f"{origin.url}/three"
    )
    assert code == 0, err
    paths = [json.loads(part)["path"] for part in out.replace("}{", "}\n{").splitlines()]
    assert paths == ["/one", "/two", "/three"]
    assert [r.ip for r in proxy.requests] == ["127.0.0.1", "::1", "127.0.0.1"]
    stats = await _settled(proxy, 3)
    assert len({s.peer for s in stats}) == 1  # the app kept one connection to the proxy


async def test_connect_tunnel_with_proxytunnel(curl: str, proxy: Proxy, origin: Origin) -> None:
    code, out, err = await _curl(curl, "-x", proxy.url, "--proxytunnel", f"{origin.url}/tunnelled")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["path"] == "/tunnelled"
    assert "connection" not in _headers(answer)  # inside a tunnel nothing is rewritten
    [request] = proxy.requests
    assert request.protocol == "http-connect"
    assert request.url == f"tcp://127.0.0.1:{origin.port}/"
    [stats] = await _settled(proxy, 1)
    assert stats.outcome == "ok" and stats.bytes_down > len(out)


async def test_connect_to_443_gets_an_https_url(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"CONNECT deny.example.com:443 HTTP/1.1\r\nHost: deny.example.com:443\r\n\r\n")
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"policy denies deny.example.com:443" in answer
    [request] = proxy.requests
    assert (request.host, request.url) == ("deny.example.com", "https://deny.example.com/")


@pytest.mark.parametrize("flag", ["--socks5-hostname", "--socks5"])
async def test_socks5(curl: str, proxy: Proxy, origin: Origin, flag: str) -> None:
    url = f"http://localhost:{origin.port}/via-socks"
    code, out, err = await _curl(curl, flag, f"127.0.0.1:{proxy.port}", url)
    assert code == 0, err
    assert json.loads(out)["path"] == "/via-socks"
    [request] = proxy.requests
    if flag == "--socks5-hostname":  # socks5h: the name travels, the proxy side resolves it
        assert (request.host, request.ip) == ("localhost", None)
    else:
        assert request.host is None and request.ip in ("127.0.0.1", "::1")
    assert request.protocol == "socks5"
    assert request.url.startswith("tcp://")
    [stats] = await _settled(proxy, 1)
    assert stats.outcome == "ok" and stats.bytes_up > 0


async def test_ipv6_destination(curl: str, proxy: Proxy, origin6: Origin) -> None:
    for args in (
        ["-x", proxy.url],
        ["-x", proxy.url, "--proxytunnel"],
        ["--socks5", f"127.0.0.1:{proxy.port}"],
    ):
        code, out, err = await _curl(curl, *args, f"{origin6.url}/v6")
        assert code == 0, (args, err)
        assert json.loads(out)["path"] == "/v6"
    assert [r.ip for r in proxy.requests] == ["::1"] * 3
    assert proxy.requests[1].url == f"tcp://[::1]:{origin6.port}/"


@pytest.mark.parametrize(
    ("host", "status"), [("deny", 403), ("slow", 504), ("fail", 502)], ids=["deny", "timeout", "error"]
)
async def test_refusals_over_http(curl: str, proxy: Proxy, host: str, status: int) -> None:
    url = f"http://{host}.example.com/"
    code, out, _ = await _curl(curl, "-x", proxy.url, "--write-out", "%{http_code}", "-o", "/dev/null", url)
    assert (code, out) == (0, str(status))
    code, out, err = await _curl(
        curl, "-x", proxy.url, "--proxytunnel", "--write-out", "%{http_connect}", "-o", "/dev/null", url
    )
    assert code == RECV_ERROR, err
    assert out == str(status)
    stats = await _settled(proxy, 2)
    assert [s.outcome for s in stats] == [{"deny": "deny", "slow": "timeout", "fail": "error"}[host]] * 2


async def test_a_failing_handler_gives_502(curl: str, proxy: Proxy, caplog: pytest.LogCaptureFixture) -> None:
    code, out, _ = await _curl(
        curl, "-x", proxy.url, "--write-out", "%{http_code}", "-o", "/dev/null", "http://boom.example/"
    )
    assert (code, out) == (0, "502")
    [stats] = await _settled(proxy, 1)
    assert stats.outcome == "error" and "RuntimeError('handler bug')" in stats.reason
    assert "proxy handler failed for boom.example:80" in caplog.text


async def test_refused_destination_gives_502(curl: str, proxy: Proxy) -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    code, out, _ = await _curl(curl, "-x", proxy.url, "--write-out", "%{http_code}", "-o", "/dev/null", url)
    assert (code, out) == (0, "502")
    [stats] = await _settled(proxy, 1)
    assert stats.outcome == "refused" and "refused" in stats.reason


@pytest.mark.parametrize(
    ("host", "reply"), [("deny", 2), ("slow", 6), ("fail", 4)], ids=["deny", "timeout", "error"]
)
async def test_refusals_over_socks5(curl: str, proxy: Proxy, host: str, reply: int) -> None:
    code, _, err = await _curl(
        curl, "--socks5-hostname", f"127.0.0.1:{proxy.port}", f"http://{host}.example.com/"
    )
    assert code == PROXY_HANDSHAKE_FAILED, err
    assert f"({reply})" in err


async def test_socks5_refused_destination(curl: str, proxy: Proxy) -> None:
    code, _, err = await _curl(
        curl, "--socks5", f"127.0.0.1:{proxy.port}", f"http://127.0.0.1:{free_port()}/"
    )
    assert code == PROXY_HANDSHAKE_FAILED, err
    assert "(5)" in err


async def test_socks5_bind_is_not_supported(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"\x05\x01\x00")
    assert await reader.readexactly(2) == b"\x05\x00"
    writer.write(b"\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50")
    reply = await reader.read()
    writer.close()
    assert reply[:2] == b"\x05\x07"
    assert proxy.requests == []
    [stats] = await _settled(proxy, 1)
    assert stats.outcome == "bad-request" and "BIND" in stats.reason


async def test_socks5_without_no_auth_method_gets_0xff(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"\x05\x01\x02")  # username/password only
    assert await reader.read() == b"\x05\xff"
    writer.close()
    [stats] = await _settled(proxy, 1)
    assert stats.reason == "SOCKS5 greeting: methods 0x02 lack 0x00 (no authentication)"


async def test_malformed_http_request_gets_400(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"GET /not-a-proxy-request HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"not an absolute http:// URL" in answer


async def test_oversized_request_line_gets_414(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"GET http://a.example/" + b"x" * 9000 + b" HTTP/1.1\r\nHost: a.example\r\n\r\n")
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 414 ")
    assert proxy.requests == []


async def test_handshake_timeout_closes_a_silent_client(proxy: Proxy) -> None:
    proxy.listener.handshake_timeout = 0.2
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"\x05\x01")  # a greeting that never completes
    async with asyncio.timeout(10):
        assert await reader.read() == b""
    writer.close()
    [stats] = await _settled(proxy, 1)
    assert stats.outcome == "bad-request" and "within 0.2 s" in stats.reason


async def test_socks_tunnel_half_close(proxy: Proxy) -> None:
    """The app's EOF reaches the destination, whose reply still reaches the app afterwards."""

    async def shouter(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # until the app's half-close arrives
        writer.write(data.upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(shouter, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"\x05\x01\x00")
        assert await reader.readexactly(2) == b"\x05\x00"
        writer.write(b"\x05\x01\x00\x01\x7f\x00\x00\x01" + port.to_bytes(2, "big") + b"early data")
        assert (await reader.readexactly(10))[:2] == b"\x05\x00"
        writer.write(b" and more")
        writer.write_eof()
        async with asyncio.timeout(10):
            assert await reader.read() == b"EARLY DATA AND MORE"
        writer.close()
        [stats] = await _settled(proxy, 1)
        assert (stats.bytes_up, stats.bytes_down) == (19, 19)
    finally:
        server.close()
        await server.wait_closed()


async def test_a_destination_reset_ends_an_idle_app_connection(proxy: Proxy) -> None:
    """The destination aborts (RST) while the app sends nothing: the app's connection still ends."""

    async def resetter(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(5)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    server = await asyncio.start_server(resetter, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(b"hello")  # then silence: only the destination's reset can end this
        async with asyncio.timeout(10):
            with contextlib.suppress(ConnectionError):
                assert await reader.read() == b""
        writer.close()
        [stats] = await _settled(proxy, 1)
        assert stats.bytes_up == 5
    finally:
        server.close()
        await server.wait_closed()


async def test_upgrade_switches_to_a_tunnel(proxy: Proxy) -> None:
    async def upgrader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"upgrade: echo" in head.lower()
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhi ")
        while data := await reader.read(1024):
            writer.write(data)
        writer.close()

    server = await asyncio.start_server(upgrader, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(
            f"GET http://127.0.0.1:{port}/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 ")
        assert await reader.readexactly(3) == b"hi "
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_early_response_ends_the_app_connection(proxy: Proxy) -> None:
    """A destination that answers before the body is complete: the answer is relayed, then the app
    connection closes, because the unfinished request leaves no place to start the next one."""

    async def impatient(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nnope")
        await writer.drain()
        while await reader.read(65536):  # drain politely so nothing is reset
            pass
        writer.close()

    server = await asyncio.start_server(impatient, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(
            f"POST http://127.0.0.1:{port}/big HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n".encode()
            + b"partial body"
        )
        async with asyncio.timeout(10):
            answer = await reader.read()  # to EOF: the proxy closes the app connection
        writer.close()
        assert answer.startswith(b"HTTP/1.1 413 Payload Too Large\r\n")
        assert answer.endswith(b"\r\n\r\nnope")
        [stats] = await _settled(proxy, 1)
        assert stats.outcome == "ok"
    finally:
        server.close()
        await server.wait_closed()


async def test_idle_keep_alive_connection_is_closed_quietly(curl: str, proxy: Proxy, origin: Origin) -> None:
    proxy.listener.idle_timeout = 0.2
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(f"GET {origin.url}/first HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    await reader.readexactly(length)
    async with asyncio.timeout(10):
        assert await reader.read() == b""  # no 408 for an idle keep-alive connection
    writer.close()
    assert [s.outcome for s in await _settled(proxy, 1)] == ["ok"]
