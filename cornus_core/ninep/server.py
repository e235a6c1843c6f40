"""The asyncio layer of the 9P server: serve one :class:`ServerSession` over any byte stream, and a
standalone TCP listener.

:func:`serve_connection` takes StreamReader/StreamWriter-like objects, so the same code serves a TCP
socket here and a multiplexed stream elsewhere. Large reads and writes and fsyncs run on a small
thread pool so one client's big transfer does not stall the other clients of the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
from concurrent.futures import Executor, ThreadPoolExecutor
from types import TracebackType

from .codec import encode
from .constants import DEFAULT_MAX_MSIZE
from .errors import ProtocolError
from .export import Export
from .messages import Buffer, Rlerror
from .session import OFFLOAD_BYTES, Job, ServerSession
from .stats import ExportStats
from .streams import ByteReader, ByteWriter

log = logging.getLogger(__name__)

MAX_JOBS_PER_CONNECTION = 16  # stop reading requests while this many blocking jobs are in flight
IO_WORKERS = 4


async def serve_connection(
    export: Export,
    reader: ByteReader,
    writer: ByteWriter,
    *,
    executor: Executor | None = None,
    max_msize: int = DEFAULT_MAX_MSIZE,
    offload_bytes: int = OFFLOAD_BYTES,
) -> None:
    """Answer 9P requests from ``reader`` on ``writer`` until the peer closes; then close ``writer``."""
    loop = asyncio.get_running_loop()
    session = ServerSession(export, max_msize=max_msize, offload_bytes=offload_bytes)
    jobs: dict[int, asyncio.Future[Buffer]] = {}
    read_size = max_msize + 4096

    def job_done(tag: int, fut: asyncio.Future[Buffer]) -> None:
        jobs.pop(tag, None)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:  # only when the executor itself failed: Job.run never raises
            log.error("9P: I/O job for tag %d failed: %r", tag, exc)
            writer.write(encode(Rlerror(tag, errno.EIO)))
        else:
            writer.write(fut.result())

    def start(job: Job) -> None:
        fut = loop.run_in_executor(executor, job.run)
        jobs[job.tag] = fut
        fut.add_done_callback(lambda f: job_done(job.tag, f))

    export.stats.session_opened()
    try:
        while True:
            data = await reader.read(read_size)
            if not data:
                break
            try:
                outcomes = session.receive_data(data)
            except ProtocolError as exc:
                log.warning("9P: closing connection to %s: %s", export.root, exc)
                break
            for outcome in outcomes:
                if isinstance(outcome, Job):
                    start(outcome)
                elif outcome.after is not None and outcome.after in jobs:
                    # Rflush must follow the flushed request's reply; done-callbacks run in order
                    jobs[outcome.after].add_done_callback(
                        functools.partial(_write_after, writer, outcome.data)
                    )
                else:
                    writer.write(outcome.data)
            await writer.drain()
            while len(jobs) >= MAX_JOBS_PER_CONNECTION:
                await asyncio.wait(list(jobs.values()), return_when=asyncio.FIRST_COMPLETED)
    except (ConnectionError, OSError) as exc:
        log.debug("9P: connection to %s ended: %r", export.root, exc)
    finally:
        if jobs:
            await asyncio.wait(list(jobs.values()))
        session.close()
        export.stats.session_closed()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _write_after(writer: ByteWriter, data: Buffer, _done: asyncio.Future[Buffer]) -> None:
    writer.write(data)


class TCPServer:
    """A running standalone 9P listener over one export; close it (or use ``async with``) to stop."""

    def __init__(
        self, export: Export, executor: ThreadPoolExecutor, max_msize: int, offload_bytes: int = OFFLOAD_BYTES
    ) -> None:
        self.export = export
        self._executor = executor
        self._max_msize = max_msize
        self._offload_bytes = offload_bytes
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def _start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, limit=2 * self._max_msize + 65536)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            await serve_connection(
                self.export,
                reader,
                writer,
                executor=self._executor,
                max_msize=self._max_msize,
                offload_bytes=self._offload_bytes,
            )
        finally:
            self._connections.pop(task, None)

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port) of the first listening socket."""
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def stats(self) -> ExportStats:
        return self.export.stats

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    async def aclose(self) -> None:
        """Stop listening, end every connection, release the export."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for writer in self._connections.values():
            writer.transport.abort()  # the connection's reader sees EOF and the session winds down
        if self._connections:
            await asyncio.wait(list(self._connections))
        self._executor.shutdown(wait=True)
        self.export.close()

    async def __aenter__(self) -> TCPServer:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def serve_tcp(
    root: str | os.PathLike[str] | Export,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    read_only: bool = False,
    max_msize: int = DEFAULT_MAX_MSIZE,
    workers: int = IO_WORKERS,
    offload_bytes: int = OFFLOAD_BYTES,
) -> TCPServer:
    """Export ``root`` (a directory, or a single file) over 9P2000.L on ``host:port`` (0 picks a port).

    ``root`` may also be a ready :class:`Export`, which the server then owns (``read_only`` is its own).
    Reads and writes of at least ``offload_bytes`` run on a pool of ``workers`` threads.
    """
    export = root if isinstance(root, Export) else Export(root, read_only=read_only)
    executor = ThreadPoolExecutor(workers, thread_name_prefix="ninep-io")
    server = TCPServer(export, executor, max_msize, offload_bytes)
    try:
        await server._start(host, port)
    except BaseException:
        await server.aclose()
        raise
    return server
