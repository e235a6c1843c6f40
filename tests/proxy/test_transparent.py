"""Original destination recovery and the transparent listener, with real nftables redirects."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cornus_core.proxy import NotRedirectedError, original_dst

SCRIPT = Path(__file__).with_name("netns_transparent.py")


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_a_direct_connection_is_not_redirected(family: socket.AddressFamily) -> None:
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        with socket.create_connection(server.getsockname()[:2]):
            accepted, _ = server.accept()
            with accepted, pytest.raises(NotRedirectedError, match=r"127\.0\.0\.1|::1"):
                original_dst(accepted)


def test_transparent_capture_in_a_network_namespace() -> None:
    if os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("unshare") is None:
        pytest.skip("needs root, nft and unshare to build a network namespace")
    done = subprocess.run(
        ["unshare", "--net", "--", sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["requests"] == [
        ["web.example", "127.0.0.77", 4242, "tcp://web.example:4242/", "transparent"],  # HTTP Host
        ["tls.example", "::1", 4242, "tcp://tls.example:4242/", "transparent"],  # TLS SNI
        [None, "127.0.0.77", 4242, "tcp://127.0.0.77:4242/", "transparent"],  # nothing to sniff in time
    ]
    # The echo destination answers in capitals: the bytes sniffed are passed on, then the rest.
    assert seen["replies"][0] == "GET / HTTP/1.1\r\nHOST: WEB.EXAMPLE\r\n\r\n"
    assert seen["replies"][1] > 500  # the whole ClientHello came back
    assert seen["replies"][2] == len(b"late bytes")
    assert seen["replies"][3] == 0  # a direct connection to the listener is refused
    assert seen["outcomes"] == [
        ["bad-request", f"the connection to 127.0.0.1:{15001} was not redirected"],
        ["ok", ""],
        ["ok", ""],
        ["ok", ""],
    ]
    assert seen["mapped"] == ["127.0.0.88", 4243]
