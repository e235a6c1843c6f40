"""Running the iproute2, nft and util-linux tools the pods are built with."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

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
