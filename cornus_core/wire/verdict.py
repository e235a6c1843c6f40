"""The verdict: the accepting side's one-line answer on a relayed stream, before any payload.

Format: ``KIND[ REASON]\\n`` where KIND is ``ok``, ``deny``, ``refused``, ``timeout`` or ``error`` and
REASON is UTF-8 text without CR/LF, e.g. ``deny rule 3 (*.internal -> deny)``. At most 1 KiB.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum

from .errors import ProtocolError
from .stream import MuxStream

MAX_VERDICT_LINE = 1024


class VerdictKind(StrEnum):
    OK = "ok"
    DENY = "deny"  # the policy refused the destination
    REFUSED = "refused"  # the dial was refused or failed
    TIMEOUT = "timeout"  # the dial timed out
    ERROR = "error"  # anything else went wrong


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.kind is VerdictKind.OK

    def __str__(self) -> str:
        return f"{self.kind} {self.reason}" if self.reason else str(self.kind)


OK = Verdict(VerdictKind.OK)


def encode_verdict(verdict: Verdict) -> bytes:
    """The verdict line; newlines in the reason become spaces and an overlong reason is cut."""
    reason = " ".join(verdict.reason.splitlines()).strip()
    line = f"{verdict.kind} {reason}".encode() if reason else verdict.kind.value.encode()
    if len(line) >= MAX_VERDICT_LINE:
        line = line[: MAX_VERDICT_LINE - 1].decode("utf-8", "ignore").encode()
    return line + b"\n"


def parse_verdict(line: bytes) -> Verdict:
    """Parse one verdict line (with or without ``\\n``); :class:`ProtocolError` if malformed."""
    text = line[:-1] if line.endswith(b"\n") else line
    if len(text) >= MAX_VERDICT_LINE:
        raise ProtocolError(f"verdict line is over {MAX_VERDICT_LINE} bytes")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"verdict line is not UTF-8: {bytes(text[:60])!r}") from None
    if "\n" in decoded or "\r" in decoded:
        raise ProtocolError(f"verdict line contains CR or LF: {decoded[:60]!r}")
    word, _, reason = decoded.partition(" ")
    try:
        kind = VerdictKind(word)
    except ValueError:
        kinds = ", ".join(k.value for k in VerdictKind)
        raise ProtocolError(f"unknown verdict {word[:40]!r} (expected one of {kinds})") from None
    return Verdict(kind, reason)


async def write_verdict(stream: MuxStream, verdict: Verdict) -> None:
    stream.write(encode_verdict(verdict))
    await stream.drain()


async def read_verdict(stream: MuxStream) -> Verdict:
    """Read the verdict line; the stream is left at the first payload byte."""
    try:
        line = await stream.readuntil(b"\n", limit=MAX_VERDICT_LINE)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(
            f"stream {stream.id} ended before its verdict ({len(exc.partial)} bytes)"
        ) from None
    except asyncio.LimitOverrunError:
        raise ProtocolError(f"stream {stream.id} verdict line is over {MAX_VERDICT_LINE} bytes") from None
    return parse_verdict(line)
