"""A host of the isolated test network, run inside its namespace: ``netserver.py NAME``.

Every answer names the host and the address the request came from. TCP 8080 and 8081: HTTP
(``hello from NAME peer=ADDR``); TCP 7070: a plain line protocol (``ping`` -> ``pong from NAME
peer=ADDR``); UDP 9090: each datagram answered with ``udp from NAME peer=ADDR``. IPv4 and IPv6.
Prints READY once listening; runs until killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

HTTP_PORTS = (8080, 8081)
PLAIN_PORT = 7070
UDP_PORT = 9090


def peer_of(address: tuple[object, ...]) -> str:
    host = str(address[0])
    return host.removeprefix("::ffff:")


async def main(name: str) -> None:
    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            body = f"hello from {name} peer={peer_of(writer.get_extra_info('peername'))}\n".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()

    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            if (await reader.readline()).strip() == b"ping":
                writer.write(f"pong from {name} peer={peer_of(writer.get_extra_info('peername'))}\n".encode())
                await writer.drain()
        writer.close()

    class Echo(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def datagram_received(self, data: bytes, addr: tuple[object, ...]) -> None:
            self.transport.sendto(f"udp from {name} peer={peer_of(addr)}\n".encode(), addr)  # type: ignore[attr-defined]

    servers = [await asyncio.start_server(http, None, port) for port in HTTP_PORTS]
    servers.append(await asyncio.start_server(plain, None, PLAIN_PORT))
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(Echo, local_addr=("::", UDP_PORT))
    print("READY", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
