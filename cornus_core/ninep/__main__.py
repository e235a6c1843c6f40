"""``python -m cornus_core.ninep DIR --listen HOST:PORT [--ro]``: serve a directory (or one file) over
9P2000.L on TCP until interrupted. Prints the bound address on its first line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence

from .. import aio
from .constants import DEFAULT_MAX_MSIZE
from .server import serve_tcp


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT``; port 0 picks a free one."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"--listen {value!r}: expected HOST:PORT with PORT in 0..65535")
    return host.strip("[]") or "127.0.0.1", int(port)


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m cornus_core.ninep") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("root", metavar="DIR", help="directory (or single file) to export")
    parser.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 5640), metavar="HOST:PORT",
                        help="address to listen on (default 127.0.0.1:5640; port 0 picks one)")  # fmt: skip
    parser.add_argument("--ro", action="store_true", help="refuse every change (EROFS)")
    parser.add_argument("--msize", type=int, default=DEFAULT_MAX_MSIZE, help="largest message size to accept")
    parser.add_argument("-v", "--verbose", action="store_true", help="log connection errors")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(message)s")
    try:
        aio.run(_serve(args.root, *args.listen, read_only=args.ro, max_msize=args.msize))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"cannot serve {args.root}: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(root: str, host: str, port: int, *, read_only: bool, max_msize: int) -> None:
    async with await serve_tcp(root, host, port, read_only=read_only, max_msize=max_msize) as server:
        bound_host, bound_port = server.address
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        mode = "ro" if read_only else "rw"
        print(f"listening on {shown}:{bound_port} exporting {server.export.root} ({mode})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        serving = asyncio.create_task(server.serve_forever())
        await stop.wait()
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


if __name__ == "__main__":
    sys.exit(main())
