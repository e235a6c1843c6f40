"""Outbound connections that transparent capture lets by: the socket carries the exempt mark before it
connects (the kernel has no per-process mark, so each socket is marked on its own)."""

from __future__ import annotations

import asyncio
import socket

from cornus_core.proxy.transparent import set_socket_mark


async def connect_marked(host: str, port: int, mark: int) -> socket.socket:
    """A connected non-blocking TCP socket to ``host:port`` carrying ``mark``, trying each address of
    ``host`` in turn; OSError says why the last one failed. Raises CaptureError when marking fails."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            set_socket_mark(sock, mark)
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise last or OSError(f"{host} has no address to connect to")


def check_mark(mark: int) -> None:
    """Raise CaptureError now, rather than at the first connection, when sockets cannot carry ``mark``."""
    with socket.socket() as sock:
        set_socket_mark(sock, mark)
