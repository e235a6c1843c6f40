"""Transparent capture end to end, run inside a fresh network namespace by test_transparent.py.

nftables redirects app connections to 127.0.0.77:4242 and [::1]:4242 to the transparent listener
(and 127.0.0.88:4243 to a dual-stack socket); the listener recovers the original destination,
sniffs the host name and dials an echo server. Prints one JSON object with what was seen.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess

from cornus_core.proxy import (
    Connected,
    ConnectionRequest,
    ConnectionStats,
    ConnectResult,
    ProxyListener,
    TransparentListener,
    original_dst,
)

LISTEN_PORT = 15001
DUAL_STACK_PORT = 15003
RULES = f"""
table inet cornus_test {{
    chain output {{
        type nat hook output priority -100;
        ip daddr 127.0.0.77 tcp dport 4242 redirect to :{LISTEN_PORT}
        ip6 daddr ::1 tcp dport 4242 redirect to :{LISTEN_PORT}
        ip daddr 127.0.0.88 tcp dport 4243 redirect to :{DUAL_STACK_PORT}
    }}
}}
"""


def client_hello(name: str) -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=name)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data.upper())
        await writer.drain()
    writer.close()


async def exchange(host: str, port: int, first: bytes, later: bytes = b"", pause: float = 0) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(first)
    if pause:
        await asyncio.sleep(pause)  # a client that waits for the server to speak first
    writer.write(later)
    writer.write_eof()
    try:
        data = await asyncio.wait_for(reader.read(), 10)
    except ConnectionResetError:
        data = b""  # closed with our bytes unread: the kernel answers with a reset
    writer.close()
    return data


async def main() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["nft", "-f", "-"], input=RULES.encode(), check=True)
    origin = await asyncio.start_server(echo, "127.0.0.1", 0)
    origin_port = origin.sockets[0].getsockname()[1]
    requests: list[ConnectionRequest] = []
    stats: list[ConnectionStats] = []

    async def handler(request: ConnectionRequest) -> ConnectResult:
        requests.append(request)
        return Connected(*await asyncio.open_connection("127.0.0.1", origin_port))

    proxy = ProxyListener(handler, on_stats=stats.append)
    transparent = TransparentListener(proxy, sniff_timeout=0.3)
    server = await asyncio.start_server(transparent, ["127.0.0.1", "::1"], LISTEN_PORT)

    replies = [
        await exchange("127.0.0.77", 4242, b"GET / HTTP/1.1\r\nHost: web.example\r\n\r\n"),
        await exchange("::1", 4242, client_hello("tls.example")),
        await exchange("127.0.0.77", 4242, b"", b"late bytes", pause=0.6),
        await exchange("127.0.0.1", LISTEN_PORT, b"direct"),  # not redirected: refused
    ]

    # A dual-stack socket sees IPv4 clients as ::ffff:a.b.c.d; the IPv4 lookup still applies.
    dual = socket.socket(socket.AF_INET6)
    dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    dual.bind(("::", DUAL_STACK_PORT))
    dual.listen()
    client = socket.create_connection(("127.0.0.88", 4243))
    accepted, _ = dual.accept()
    mapped = original_dst(accepted)
    for sock in (client, accepted, dual):
        sock.close()

    server.close()
    await proxy.aclose()
    origin.close()
    print(
        json.dumps(
            {
                "requests": [[r.host, r.ip, r.port, r.url, r.protocol] for r in requests],
                "outcomes": sorted([s.outcome, s.reason] for s in stats),
                "replies": [r.decode("latin-1") for r in replies[:1]] + [len(r) for r in replies[1:]],
                "mapped": list(mapped),
            }
        )
    )


asyncio.run(main())
