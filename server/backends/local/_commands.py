"""Running the iproute2, nft and util-linux tools the pods are built with, and starting processes in them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence

from cornus_core.proxy.transparent import SOCKET_MARK_ENV

COMMAND_TIMEOUT = 15.0


class PodError(Exception):
    """A pod could not be created, entered or removed; the message says which pod, what and why."""


async def run(argv: Sequence[str], *, input: str | None = None, what: str) -> str:
    """Run ``argv`` to completion and return its stdout; PodError says ``what`` failed and the tool's reason."""
    pipe = asyncio.subprocess.PIPE
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=pipe if input is not None else asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe
        )
    except OSError as exc:
        raise PodError(f"{what}: cannot run {argv[0]}: {exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(input.encode() if input is not None else None), COMMAND_TIMEOUT
        )
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise PodError(
            f"{what}: {' '.join(argv[:3])} did not finish within {COMMAND_TIMEOUT:.0f} s"
        ) from None
    if proc.returncode != 0:
        reason = err.decode(errors="replace").strip() or f"exit status {proc.returncode}"
        raise PodError(f"{what}: {reason}")
    return out.decode(errors="replace")


async def start_in_pod(
    pod: str,
    argv: Sequence[str],
    command: Sequence[str],
    env: Mapping[str, str] | None,
    *,
    cwd: str | None,
    mark: int | None,
    stdin: int | None,
    stdout: int | None,
    stderr: int | None,
) -> asyncio.subprocess.Process:
    """Start ``command`` (``argv`` wrapped to enter pod ``pod``) in a session of its own.

    ``env`` None inherits the server's environment. ``mark`` is handed to the process as
    ``CORNUS_SOCKET_MARK``: the kernel has no per-process socket mark, so the process marks its own
    outbound sockets with it (see ``set_socket_mark``) and capture rules exempting that mark let them by.
    """
    if mark is not None:
        env = {**(os.environ if env is None else env), SOCKET_MARK_ENV: str(mark)}
    try:
        return await asyncio.create_subprocess_exec(
            *command, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True
        )
    except OSError as exc:
        raise PodError(f"pod {pod}: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
