"""Real peers for the proxy tests: a local HTTP origin server, curl, and a listener that dials directly."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cornus_core.proxy import (
    Connected,
    ConnectionRequest,
    ConnectionStats,
    ConnectResult,
    DialError,
    ProxySettings,
    Refused,
    dial,
    start_listener,
)
from cornus_core.proxy.listener import ProxyListener


class _Origin(BaseHTTPRequestHandler):
    """Answers every request with JSON describing what it received (method, path, headers, body)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer(self) -> None:
        body = self._body()
        payload = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "headers": [[k, v] for k, v in self.headers.items()],
                "body": body.decode("latin-1"),
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "keep-alive, X-Hop")
        self.send_header("X-Hop", "origin-only")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_HEAD = _answer


class _Origin6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


@dataclass
class Origin:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def _serve(server: ThreadingHTTPServer) -> Iterator[Origin]:
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Origin(str(server.server_address[0]), int(server.server_address[1]))
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def origin() -> Iterator[Origin]:
    yield from _serve(ThreadingHTTPServer(("127.0.0.1", 0), _Origin))


@pytest.fixture(scope="session")
def origin6() -> Iterator[Origin]:
    try:
        server = _Origin6(("::1", 0), _Origin)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback: {exc}")
    yield from _serve(server)


@pytest.fixture(scope="session")
def curl() -> str:
    path = shutil.which("curl")
    if path is None:
        pytest.skip("curl is not installed")
    return path


async def direct(request: ConnectionRequest) -> ConnectResult:
    """The handler a caller-side terminus would use: dial without a proxy."""
    try:
        reader, writer = await dial(
            request.host or request.ip or "", request.port, ProxySettings(), timeout=5
        )
    except DialError as exc:
        return Refused(exc.kind, exc.reason)
    return Connected(reader, writer)


@dataclass
class Proxy:
    port: int
    listener: ProxyListener
    stats: list[ConnectionStats] = field(default_factory=list)
    requests: list[ConnectionRequest] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    """A listener on a free loopback port whose handler records each request and dials directly.

    A request whose host starts with ``deny.`` / ``slow.`` / ``fail.`` is refused with kind deny /
    timeout / error instead; for ``boom.`` the handler raises.
    """
    box: list[Proxy] = []

    async def handler(request: ConnectionRequest) -> ConnectResult:
        box[0].requests.append(request)
        kind = (request.host or "").partition(".")[0]
        if kind == "deny":
            return Refused("deny", f"policy denies {request.destination}")
        if kind == "slow":
            return Refused("timeout", f"{request.destination} did not answer")
        if kind == "fail":
            return Refused("error", f"{request.destination} failed")
        if kind == "boom":
            raise RuntimeError("handler bug")
        return await direct(request)

    server, listener = await start_listener(handler, port=0, on_stats=lambda s: box[0].stats.append(s))
    box.append(Proxy(server.sockets[0].getsockname()[1], listener))
    try:
        yield box[0]
    finally:
        server.close()
        await listener.aclose()
        await server.wait_closed()


async def run(*argv: str, timeout: float = 30) -> tuple[int, bytes, bytes]:
    """Run a program without blocking the event loop the listener lives on."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, stdout, stderr


def free_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
