"""Transparent capture in a real pod: the nftables rules redirect the app's TCP to a stand-in
caretaker that recovers the original destination, while its own connections, loopback and
link-local destinations pass untouched."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast

import pytest

from cornus_core.proxy.transparent import (
    CAPTURE_TABLE,
    CaptureError,
    install_capture,
    load_nft,
    remove_capture,
)
from server.backends.local import Pod

from .conftest import needs_root, run_in

pytestmark = needs_root()

LISTENER = Path(__file__).with_name("capture_listener.py")
LISTEN_PORT = 15002
MARK = 0x2A
CARETAKER_UID = 65534


class _Origin(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"origin {cast(ThreadingHTTPServer, self.server).server_port}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def origin(pod: Pod) -> Iterator[tuple[str, int]]:
    """An HTTP server on the host end of the pod's veth, answering ``origin <port>``."""
    server = ThreadingHTTPServer((pod.host_ip, 0), _Origin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield pod.host_ip, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


async def start_listener(pod: Pod, exemption: str) -> None:
    proc = await pod.spawn(
        [sys.executable, str(LISTENER), str(LISTEN_PORT), exemption], stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 20) == b"READY\n"


@dataclass
class Answer:
    status: int  # curl's exit status
    body: dict[str, object] | None  # the listener's JSON, when it answered


async def curl(pod: Pod, url: str, *extra: str) -> Answer:
    status, out = await run_in(pod, ["curl", "-sS", "-g", "--max-time", "10", *extra, url])
    if status != 0 or not out.startswith("{"):
        return Answer(status, None if status else {"text": out})
    return Answer(status, json.loads(out))


@pytest.fixture(params=["mark", "uid"])
async def captured(request: pytest.FixtureRequest, pod: Pod) -> AsyncIterator[Pod]:
    """The pod with a stand-in caretaker exempted by socket mark or by uid, and capture rules on."""
    if request.param == "mark":
        await start_listener(pod, f"mark:{MARK}")
        await install_capture(LISTEN_PORT, exempt_mark=MARK, spawn=pod.spawn)
    else:
        await start_listener(pod, f"uid:{CARETAKER_UID}")
        await install_capture(LISTEN_PORT, exempt_uid=CARETAKER_UID, spawn=pod.spawn)
    yield pod


async def test_app_tcp_is_captured_and_the_caretaker_is_not(captured: Pod, origin: tuple[str, int]) -> None:
    pod = captured
    origin_ip, origin_port = origin
    v4, v6, relay, direct4, direct6, loop4, loop6, meta = await asyncio.gather(
        curl(pod, "http://10.99.0.1:8080/"),
        curl(pod, "http://[fd99::1]:8080/"),
        curl(pod, f"http://{origin_ip}:{origin_port}/relay"),
        curl(pod, f"http://127.0.0.1:{LISTEN_PORT}/"),
        curl(pod, f"http://[::1]:{LISTEN_PORT}/"),
        curl(pod, "http://127.0.0.1:9/"),
        curl(pod, "http://[::1]:9/"),
        curl(pod, "http://169.254.169.254/", "--connect-timeout", "2"),
    )
    # App connections arrive at the listener, which knows where they were going (IPv4 and IPv6).
    assert v4.body == {"redirected": True, "dst": ["10.99.0.1", 8080]}
    assert v6.body == {"redirected": True, "dst": ["fd99::1", 8080]}
    # The listener's own connection to that destination goes out for real instead of looping back.
    assert relay.body == {
        "redirected": True,
        "dst": [origin_ip, origin_port],
        "relayed": f"origin {origin_port}",
    }
    # A connection made straight to the listener is recognised as not redirected.
    for direct in (direct4, direct6):
        assert direct.body is not None and direct.body["redirected"] is False
        assert "was not redirected" in str(direct.body["error"])
    # Loopback is never captured: nothing listens on port 9, so the connection is refused.
    assert (loop4.status, loop6.status) == (7, 7)
    # Link-local destinations (metadata services) are not captured either. (IPv6 link-local is exempt
    # too, but a scoped fe80:: connection could not be redirected to ::1 anyway, so it proves nothing.)
    assert meta.body is None and meta.status != 0


async def test_capture_rules_replace_and_remove_cleanly(pod: Pod, origin: tuple[str, int]) -> None:
    origin_ip, origin_port = origin
    await start_listener(pod, f"mark:{MARK}")
    await install_capture(LISTEN_PORT + 1, exempt_mark=MARK, spawn=pod.spawn)
    await install_capture(LISTEN_PORT, exempt_mark=MARK, spawn=pod.spawn)  # replaces, in one transaction
    status, tables = await run_in(pod, ["nft", "list", "tables"])
    assert (status, tables) == (0, f"table inet {CAPTURE_TABLE}\n")
    captured = await curl(pod, f"http://{origin_ip}:{origin_port}/")
    assert captured.body == {"redirected": True, "dst": [origin_ip, origin_port]}

    await remove_capture(spawn=pod.spawn)
    await remove_capture(spawn=pod.spawn)  # removing what is gone is fine
    assert await run_in(pod, ["nft", "list", "tables"]) == (0, "")
    passed = await curl(pod, f"http://{origin_ip}:{origin_port}/")
    assert passed.body == {"text": f"origin {origin_port}"}

    with pytest.raises(CaptureError, match=r"nft refused the bad rules: .*syntax error"):
        await load_nft("table inet x { nonsense }\n", pod.spawn, what="bad rules")
