"""The caller-side dialer through real proxies: a small HTTP CONNECT proxy and the SOCKS5 listener."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cornus_core.proxy import DialError, ProxySettings, dial
from cornus_core.proxy.dialer import redact

from .conftest import Origin, Proxy, free_port


@dataclass
class ConnectProxy:
    """An HTTP CONNECT proxy that records each request head and answers ``status``."""

    port: int
    status: int = 200
    silent: bool = False  # accept, read the request, never answer
    heads: list[bytes] = field(default_factory=list)
    tasks: set[asyncio.Task[object]] = field(default_factory=set)

    async def stop(self, server: asyncio.Server) -> None:
        server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await server.wait_closed()

    def url(self, scheme: str = "http", userinfo: str = "") -> str:
        return f"{scheme}://{userinfo}127.0.0.1:{self.port}"


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _start_connect_proxy(tls: ssl.SSLContext | None = None) -> tuple[asyncio.Server, ConnectProxy]:
    box: list[ConnectProxy] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        proxy = box[0]
        task = asyncio.current_task()
        assert task is not None
        proxy.tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            proxy.heads.append(head)
            if proxy.silent:
                await reader.read()
                return
            if proxy.status != 200:
                writer.write(f"HTTP/1.1 {proxy.status} Nope\r\nContent-Length: 0\r\n\r\n".encode())
                return
            host, _, port = head.split(b" ")[1].decode().rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
            try:
                writer.write(b"HTTP/1.1 200 Connection established\r\nVia: test\r\n\r\n")
                await asyncio.gather(
                    _pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True
                )
            finally:
                up_writer.close()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    box.append(ConnectProxy(server.sockets[0].getsockname()[1]))
    return server, box[0]


@pytest.fixture
async def connect_proxy() -> AsyncIterator[ConnectProxy]:
    server, proxy = await _start_connect_proxy()
    yield proxy
    await proxy.stop(server)


async def _get(streams: tuple[asyncio.StreamReader, asyncio.StreamWriter], path: str) -> dict[str, object]:
    reader, writer = streams
    writer.write(f"GET {path} HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n".encode())
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    answer = json.loads(body)
    assert isinstance(answer, dict)
    return answer


async def test_direct(origin: Origin) -> None:
    answer = await _get(await dial("127.0.0.1", origin.port, ProxySettings(), timeout=5), "/direct")
    assert answer["path"] == "/direct"


async def test_http_connect_with_basic_auth(connect_proxy: ConnectProxy, origin: Origin) -> None:
    settings = ProxySettings(all_proxy=connect_proxy.url(userinfo="us%40er:p%3Ass@"))
    answer = await _get(await dial("127.0.0.1", origin.port, settings, timeout=5), "/via-connect")
    assert answer["path"] == "/via-connect"
    [head] = connect_proxy.heads
    lines = head.decode().split("\r\n")
    assert lines[0] == f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1"
    token = base64.b64encode(b"us@er:p:ss").decode()
    assert f"Proxy-Authorization: Basic {token}" in lines


async def test_http_connect_ipv6_destination(connect_proxy: ConnectProxy, origin6: Origin) -> None:
    settings = ProxySettings(all_proxy=connect_proxy.url())
    answer = await _get(await dial("::1", origin6.port, settings, timeout=5), "/v6")
    assert answer["path"] == "/v6"
    assert connect_proxy.heads[0].startswith(f"CONNECT [::1]:{origin6.port} HTTP/1.1\r\n".encode())
    assert b"Proxy-Authorization" not in connect_proxy.heads[0]


async def test_no_proxy_bypasses_the_proxy(connect_proxy: ConnectProxy, origin: Origin) -> None:
    settings = ProxySettings(all_proxy=connect_proxy.url(), no_proxy="localhost,127.0.0.0/8")
    answer = await _get(await dial("127.0.0.1", origin.port, settings, timeout=5), "/bypass")
    assert answer["path"] == "/bypass"
    assert connect_proxy.heads == []


@pytest.mark.parametrize(
    ("status", "kind"), [(407, "error"), (403, "refused"), (502, "refused"), (504, "timeout"), (500, "error")]
)
async def test_http_connect_failures(connect_proxy: ConnectProxy, status: int, kind: str) -> None:
    connect_proxy.status = status
    with pytest.raises(DialError) as caught:
        await dial("10.9.8.7", 443, ProxySettings(https_proxy=connect_proxy.url()), timeout=5)
    assert caught.value.kind == kind
    assert f"answered {status} Nope" in caught.value.reason
    assert "10.9.8.7:443 via http://127.0.0.1:" in caught.value.reason


async def test_http_connect_proxy_that_never_answers_times_out(connect_proxy: ConnectProxy) -> None:
    connect_proxy.silent = True
    with pytest.raises(DialError) as caught:
        await dial("a.example", 443, ProxySettings(https_proxy=connect_proxy.url()), timeout=0.3)
    assert caught.value.kind == "timeout"
    assert "within 0.3 s" in caught.value.reason


async def test_unreachable_proxy_and_refused_destination() -> None:
    port = free_port()
    with pytest.raises(DialError) as caught:
        await dial(
            "a.example", 443, ProxySettings(https_proxy=f"http://u:secret@127.0.0.1:{port}"), timeout=5
        )
    assert caught.value.kind == "error"
    assert "unreachable" in caught.value.reason and "secret" not in caught.value.reason
    with pytest.raises(DialError) as caught:
        await dial("a.example", 443, ProxySettings(https_proxy=f"socks5h://127.0.0.1:{port}"), timeout=5)
    assert caught.value.kind == "error" and "unreachable" in caught.value.reason
    with pytest.raises(DialError) as caught:
        await dial("127.0.0.1", port, ProxySettings(), timeout=5)
    assert caught.value.kind == "refused"
    with pytest.raises(DialError, match="is not an http, https, socks4"):
        await dial("a.example", 443, ProxySettings(https_proxy="ftp://127.0.0.1:21"), timeout=5)


@pytest.mark.parametrize(("scheme", "named"), [("socks5h", True), ("socks5", False)])
async def test_socks5_through_the_listener(proxy: Proxy, origin: Origin, scheme: str, named: bool) -> None:
    settings = ProxySettings(all_proxy=f"{scheme}://127.0.0.1:{proxy.port}")
    answer = await _get(await dial("localhost", origin.port, settings, timeout=5), "/via-socks")
    assert answer["path"] == "/via-socks"
    [request] = proxy.requests
    if named:  # socks5h: the proxy side resolves the name
        assert (request.host, request.ip) == ("localhost", None)
    else:  # socks5: resolved here, only the address travels
        assert request.host is None and request.ip in ("127.0.0.1", "::1")


@pytest.mark.parametrize(("host", "kind"), [("deny", "refused"), ("slow", "timeout"), ("fail", "error")])
async def test_socks5_refusals_map_to_dial_errors(proxy: Proxy, host: str, kind: str) -> None:
    settings = ProxySettings(all_proxy=f"socks5h://127.0.0.1:{proxy.port}")
    with pytest.raises(DialError) as caught:
        await dial(f"{host}.example.com", 8080, settings, timeout=5)
    assert caught.value.kind == kind
    assert f"{host}.example.com:8080 via socks5h://127.0.0.1:{proxy.port}" in caught.value.reason


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_proxy(tmp_path: Path, origin: Origin) -> None:
    cert, key = _self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    server, connect_proxy = await _start_connect_proxy(server_tls)
    try:
        settings = ProxySettings(all_proxy=f"https://localhost:{connect_proxy.port}")
        with pytest.raises(DialError, match="CERTIFICATE_VERIFY_FAILED"):  # not a CA the system trusts
            await dial("127.0.0.1", origin.port, settings, timeout=5)
        trusting = ssl.create_default_context(cafile=cert)
        streams = await dial("127.0.0.1", origin.port, settings, timeout=5, proxy_tls=trusting)
        answer = await _get(streams, "/over-tls")
        assert answer["path"] == "/over-tls"
        assert connect_proxy.heads[-1].startswith(f"CONNECT 127.0.0.1:{origin.port} ".encode())
    finally:
        await connect_proxy.stop(server)


def test_redact() -> None:
    assert redact("http://user:secret@proxy:3128") == "http://user:***@proxy:3128"
    assert redact("socks5h://proxy:1080") == "socks5h://proxy:1080"
