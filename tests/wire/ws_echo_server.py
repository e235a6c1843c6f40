"""A mux echo server over WebSocket in its own process, for tests that kill the peer.

Prints its port, then serves until killed. Requires ``Authorization: Bearer secret``.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from cornus_core.wire import MuxStream, accept_websocket, websocket_options

TOKEN = "secret"


async def echo(stream: MuxStream) -> None:
    while chunk := await stream.read_chunk():
        stream.write(chunk)
        await stream.drain()
    await stream.aclose()


async def handler(ws: ServerConnection) -> None:
    mux = await accept_websocket(ws)
    tasks = set()
    async for stream in mux:
        task = asyncio.create_task(echo(stream))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def check_token(connection: ServerConnection, request: Request) -> Response | None:
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        return connection.respond(HTTPStatus.UNAUTHORIZED, "bad token\n")
    return None


async def main() -> None:
    async with serve(handler, "127.0.0.1", 0, process_request=check_token, **websocket_options()) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
