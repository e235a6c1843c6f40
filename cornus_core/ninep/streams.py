"""The byte-stream interface the server and client run over: what asyncio's StreamReader and
StreamWriter offer, and what a multiplexed stream can offer just as well."""

from __future__ import annotations

from typing import Protocol

from .messages import Buffer


class ByteReader(Protocol):
    async def read(self, n: int = -1, /) -> bytes: ...


class ByteWriter(Protocol):
    def write(self, data: Buffer, /) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...
