"""The few Docker Engine API calls the dockerhost backend makes, over the engine's unix socket (httpx).

Log streams of containers without a TTY arrive multiplexed: each frame is an 8-byte header (stream
type, three zero bytes, big-endian payload length) and the payload; :class:`LogDemuxer` is the sans-IO
parser for that framing.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

DEFAULT_HOST = "unix:///var/run/docker.sock"
HEADER = 8
STREAMS = {0: "stdin", 1: "stdout", 2: "stderr"}
MAX_FRAME = 16 * 1024 * 1024
CALL_TIMEOUT = 30.0


class EngineError(Exception):
    """The engine refused a call or could not be reached; the message says which call and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def engine_host(env: dict[str, str] | None = None) -> str:
    """``DOCKER_HOST`` when it names a unix socket, else the default socket."""
    value = (env if env is not None else os.environ).get("DOCKER_HOST", "").strip()
    return value or DEFAULT_HOST


class Engine:
    """An async client of one engine at ``host`` (``unix:///path``)."""

    def __init__(self, host: str = DEFAULT_HOST) -> None:
        parts = urlsplit(host)
        if parts.scheme != "unix" or not parts.path:
            raise EngineError(f"Docker host {host!r}: only unix:///path sockets are supported")
        self.host = host
        self._client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=parts.path),
                                         base_url="http://docker")

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, *, what: str, ok: tuple[int, ...] = (200, 201, 204),
                    timeout: float | None = CALL_TIMEOUT, **kwargs: Any) -> Any:
        """``timeout`` None waits as long as it takes (a container's exit)."""
        try:
            response = await self._client.request(method, path, timeout=timeout, **kwargs)
        except httpx.HTTPError as exc:
            raise EngineError(f"{what}: cannot reach the Docker engine at {self.host}: {exc}") from None
        if response.status_code not in ok:
            raise EngineError(f"{what}: {_message(response)}", response.status_code)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    async def ping(self) -> None:
        await self._call("GET", "/_ping", what="ping")

    async def image(self, name: str) -> dict[str, Any] | None:
        """The image's inspect record, None when the engine does not have it."""
        try:
            found: dict[str, Any] = await self._call("GET", f"/images/{quote(name, safe='')}/json",
                                                     what=f"image {name}")
        except EngineError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def create(self, name: str, config: dict[str, Any]) -> str:
        created = await self._call("POST", "/containers/create", params={"name": name}, json=config,
                                   what=f"create container {name}")
        return str(created["Id"])

    async def start(self, cid: str) -> None:
        await self._call("POST", f"/containers/{cid}/start", what=f"start container {cid[:12]}", ok=(204, 304))

    async def inspect(self, cid: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._call("GET", f"/containers/{cid}/json",
                                                 what=f"inspect container {cid[:12]}")
        return found

    async def wait(self, cid: str) -> int:
        """The container's exit status, once it exits."""
        result = await self._call("POST", f"/containers/{cid}/wait", what=f"wait for container {cid[:12]}",
                                  timeout=None)
        return int(result["StatusCode"])

    async def stop(self, cid: str, grace: float) -> None:
        await self._call("POST", f"/containers/{cid}/stop", params={"t": max(0, round(grace))},
                         what=f"stop container {cid[:12]}", ok=(204, 304, 404), timeout=grace + 30)

    async def remove(self, cid: str) -> None:
        await self._call("DELETE", f"/containers/{cid}", params={"force": "1", "v": "1"},
                         what=f"remove container {cid[:12]}", ok=(204, 404))

    async def containers(self, label: str) -> list[dict[str, Any]]:
        """Every container (running or not) that carries ``label`` (``key`` or ``key=value``)."""
        found: list[dict[str, Any]] = await self._call(
            "GET", "/containers/json", params={"all": "1", "filters": json.dumps({"label": [label]})},
            what=f"list containers labelled {label}")
        return found

    async def logs(self, cid: str, *, follow: bool = True) -> AsyncIterator[tuple[str, bytes]]:
        """``(stream, chunk)`` pairs of the container's output from its start: until it exits when
        ``follow``, else what the engine has now."""
        demux = LogDemuxer()
        params = {"follow": "1" if follow else "0", "stdout": "1", "stderr": "1"}
        try:
            async with self._client.stream("GET", f"/containers/{cid}/logs", params=params,
                                           timeout=None) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise EngineError(f"logs of container {cid[:12]}: {_message(response)}", response.status_code)
                async for chunk in response.aiter_raw():
                    for frame in demux.feed(chunk):
                        yield frame
        except httpx.HTTPError as exc:
            raise EngineError(f"logs of container {cid[:12]}: {exc}") from None


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return f"{body['message']} (HTTP {response.status_code})"
    return f"HTTP {response.status_code}"


class LogError(ValueError):
    """A log stream that does not follow the multiplexed framing."""


@dataclass
class LogDemuxer:
    """Sans-IO: feed bytes of a multiplexed log stream, get ``(stream name, payload)`` frames back."""

    _buffer: bytearray = field(default_factory=bytearray)
    offset: int = 0  # bytes consumed so far, for error messages

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= HEADER:
            kind, size = self._buffer[0], int.from_bytes(self._buffer[4:8], "big")
            if kind not in STREAMS or any(self._buffer[1:4]):
                raise LogError(f"log frame at byte {self.offset}: bad header {bytes(self._buffer[:8]).hex()}")
            if size > MAX_FRAME:
                raise LogError(f"log frame at byte {self.offset}: {size} bytes is over {MAX_FRAME}")
            if len(self._buffer) < HEADER + size:
                break
            frames.append((STREAMS[kind], bytes(self._buffer[HEADER:HEADER + size])))
            del self._buffer[:HEADER + size]
            self.offset += HEADER + size
        return frames
