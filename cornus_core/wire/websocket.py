"""The mux over WebSocket (the ``websockets`` package, asyncio API).

Binary messages carry one byte stream; every flushed batch of yamux frames is one message.
Compression is off (tunnel data does not compress, and deflate costs ~20x throughput), WebSocket-level
pings are off (the mux keeps the session alive itself), and the receive queue is short so that the
peer's data waits in the kernel, not in our memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from websockets.asyncio.client import ClientConnection, connect, unix_connect
from websockets.asyncio.connection import Connection
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosedOK, InvalidHandshake, InvalidStatus, InvalidURI

from .errors import DialError
from .frames import Payload
from .hello import Hello
from .mux import Mux, MuxConfig, open_mux
from .transport import tune_socket


def websocket_options(config: MuxConfig | None = None) -> dict[str, Any]:
    """Keyword arguments for ``websockets.asyncio.client.connect`` and ``.server.serve`` on both ends."""
    config = config or MuxConfig()
    return {
        "compression": None,
        "max_size": max(4 * 1024 * 1024, 2 * config.batch_size),
        "max_queue": (4, 1),
        "write_limit": (config.batch_size, config.batch_size // 4),
        "ping_interval": None,
    }


class WebSocketTransport:
    """A :class:`~cornus_core.wire.transport.Transport` over a websockets asyncio connection."""

    def __init__(self, ws: Connection) -> None:
        self.ws = ws
        tune_socket(ws.transport.get_extra_info("socket"))

    async def receive(self) -> bytes:
        try:
            return await self.ws.recv(decode=False)
        except ConnectionClosedOK:
            return b""

    async def send(self, pieces: Sequence[Payload]) -> None:
        await self.ws.send(pieces[0] if len(pieces) == 1 else b"".join(pieces))

    async def close(self) -> None:
        await self.ws.close()


async def dial_websocket(
    url: str,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    hello: Hello | None = None,
    config: MuxConfig | None = None,
    open_timeout: float = 10.0,
    unix_path: str | None = None,
    **connect_kwargs: Any,
) -> Mux:
    """Connect to ``url``, exchange hellos and return the client-side :class:`Mux`.

    ``token`` is sent as ``Authorization: Bearer``. Extra ``connect_kwargs`` go to
    ``websockets.asyncio.client.connect`` (``ssl``, ``proxy``, ...). Failing to connect raises
    :class:`DialError` (with the HTTP status when the server refused the upgrade); an incompatible
    peer raises :class:`HelloError`. With ``unix_path`` the connection goes to that unix socket instead
    of ``url``'s host and port (``url`` still gives the request path).
    """
    extra = dict(headers or {})
    if token:
        extra["Authorization"] = f"Bearer {token}"
    options = websocket_options(config) | {"open_timeout": open_timeout} | connect_kwargs
    try:
        if unix_path is not None:
            ws: ClientConnection = await unix_connect(unix_path, url, additional_headers=extra, **options)
        else:
            ws = await connect(url, additional_headers=extra, **options)
    except InvalidStatus as exc:
        status = exc.response.status_code
        raise DialError(f"{url}: server refused the WebSocket upgrade with HTTP {status}", status) from exc
    except (InvalidHandshake, InvalidURI, OSError, TimeoutError) as exc:
        where = f"{url} via unix socket {unix_path}" if unix_path is not None else url
        raise DialError(f"{where}: could not connect: {type(exc).__name__}: {exc}") from exc
    try:
        return await open_mux(WebSocketTransport(ws), client=True, hello=hello, config=config)
    except BaseException:
        await ws.close()
        raise


async def accept_websocket(
    ws: ServerConnection, *, hello: Hello | None = None, config: MuxConfig | None = None
) -> Mux:
    """Exchange hellos on an accepted server connection and return the server-side :class:`Mux`.

    Serve with ``**websocket_options()``; keep the handler running until ``await mux.wait_closed()``.
    """
    return await open_mux(WebSocketTransport(ws), client=False, hello=hello, config=config)
