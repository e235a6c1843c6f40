"""The caretaker's one connection to the server, redialed with backoff whenever it drops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from cornus_core.wire import DialError, HelloError, Mux, MuxStream, WireError, dial_websocket

from .net import connect_marked
from .supervisor import Supervisor

log = logging.getLogger(__name__)

BACKOFF_START = 0.2
BACKOFF_MAX = 10.0
CONNECT_TIMEOUT = 10.0
UNIX_SCHEME = "ws+unix"  # ws+unix://<socket path, percent-encoded>/<request path>


class LinkDown(Exception):
    """No server connection right now (the caretaker keeps redialing)."""


class ServerLink:
    """Keeps a Mux to the server alive. `on_connect(mux)` runs after every (re)connect.

    With a socket `mark`, every connection to the server carries it, so that transparent capture in the
    pod lets it by. A ``ws+unix://`` URL names a unix socket instead (a pod with no network path to the
    server); capture never sees those, so they need no mark.
    """

    def __init__(self, url: str, token: str, *, on_connect: Callable[[Mux], Awaitable[None]] | None = None,
                 mark: int | None = None, supervisor: Supervisor | None = None) -> None:
        self.url = url
        self._supervisor = supervisor or Supervisor()
        self._token = token
        self._mark = mark
        self._on_connect = on_connect
        self._mux: Mux | None = None
        self._up = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connects = 0

    def start(self) -> None:
        # Failures the redial loop expects never leave it; anything else (a bug, an on_connect that
        # raises) ends it, and the supervisor starts it over.
        self._task = self._supervisor.start("server link", self._run)

    async def wait_up(self, timeout: float | None = None) -> Mux:
        if not self._up.is_set():  # wait_for costs a task: only pay it while redialing
            await asyncio.wait_for(self._up.wait(), timeout)
        assert self._mux is not None
        return self._mux

    async def open_stream(self, timeout: float = 5.0) -> MuxStream:
        """A new stream on the current connection; waits briefly for a redial in progress."""
        try:
            mux = await self.wait_up(timeout)
            return await mux.open_stream()
        except (TimeoutError, WireError) as exc:
            raise LinkDown(f"no connection to the server: {exc or 'redialing'}") from None

    async def _run(self) -> None:
        delay = BACKOFF_START
        try:
            while True:
                try:
                    mux = await self._dial()
                except (DialError, HelloError, OSError, TimeoutError) as exc:
                    if isinstance(exc, DialError) and exc.status in (401, 403):
                        log.error("the server refused this caretaker (HTTP %s); retrying", exc.status)
                    log.warning("server connection failed: %s; retrying in %.1f s", exc, delay)
                    await asyncio.sleep(delay * (0.5 + random.random()))
                    delay = min(delay * 2, BACKOFF_MAX)
                    continue
                delay = BACKOFF_START
                self._mux = mux
                self.connects += 1
                if self._on_connect is not None:
                    await self._on_connect(mux)
                self._up.set()
                await mux.wait_closed()
                self._up.clear()
                log.warning("server connection lost: %s; redialing", mux.close_reason)
        finally:
            self._up.clear()
            if self._mux is not None and not self._mux.is_closed:
                await self._mux.aclose(timeout=1)  # a restarted loop dials afresh

    async def _dial(self) -> Mux:
        extra: dict[str, Any] = {}
        parts = urlsplit(self.url)
        if parts.scheme == UNIX_SCHEME:
            path = unquote(parts.netloc)
            return await dial_websocket(f"ws://localhost{parts.path or '/'}", token=self._token, proxy=None,
                                        unix_path=path)
        if self._mark is not None:
            port = parts.port or (443 if parts.scheme == "wss" else 80)
            async with asyncio.timeout(CONNECT_TIMEOUT):
                extra["sock"] = await connect_marked(parts.hostname or "", port, self._mark)
        # proxy=None: the pod's proxy variables point at this caretaker itself.
        return await dial_websocket(self.url, token=self._token, proxy=None, **extra)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._mux is not None:
            await self._mux.aclose(timeout=1)
