"""The hello: the first line each side sends on a new connection, before any yamux frame.

Both sides send their hello at once and then read the peer's, so the exchange costs no round trip.
The hello is one JSON object on one ``\\n``-terminated line of at most 4 KiB::

    {"proto":"cornus-wire","version":1,"features":["telemetry"],"agent":"cornus-server/0.1.0"}

``version`` must be equal on both sides, otherwise both sides fail with :class:`HelloError` naming
both versions and close the connection. ``features`` are optional capabilities; a session uses the
ones both sides name. Unknown keys are ignored so later versions can add fields.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

from .errors import HelloError, SessionClosed
from .transport import Transport

PROTOCOL_NAME = "cornus-wire"
WIRE_VERSION = 1
MAX_HELLO_LINE = 4096
_FEATURE = re.compile(r"[a-z0-9][a-z0-9.-]{0,63}")


@dataclass(frozen=True, slots=True)
class Hello:
    version: int = WIRE_VERSION
    features: frozenset[str] = frozenset()
    agent: str = ""  # free text naming the program, for error messages and logs


def encode_hello(hello: Hello) -> bytes:
    for feature in hello.features:
        if not _FEATURE.fullmatch(feature):
            raise ValueError(f"hello feature {feature!r} is not a lowercase token")
    body = {"proto": PROTOCOL_NAME, "version": hello.version, "features": sorted(hello.features)}
    if hello.agent:
        body["agent"] = hello.agent
    line = json.dumps(body, separators=(",", ":")).encode() + b"\n"
    if len(line) > MAX_HELLO_LINE:
        raise ValueError(f"hello is {len(line)} bytes, over the {MAX_HELLO_LINE}-byte limit")
    return line


def parse_hello(line: bytes) -> Hello:
    """Parse one hello line (with or without its ``\\n``); :class:`HelloError` if malformed."""
    text = line[:-1] if line.endswith(b"\n") else line
    if len(text) >= MAX_HELLO_LINE:
        raise HelloError(f"hello from the peer is over the {MAX_HELLO_LINE}-byte limit")
    try:
        body = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HelloError(
            f"hello from the peer is not a JSON line: {exc} (got {bytes(text[:60])!r})"
        ) from None
    if not isinstance(body, dict) or body.get("proto") != PROTOCOL_NAME:
        raise HelloError(f"peer does not speak {PROTOCOL_NAME} (hello was {bytes(text[:60])!r})")
    version = body.get("version")
    if type(version) is not int or version < 0:
        raise HelloError(f"hello from the peer has an invalid version {version!r}")
    features = body.get("features", [])
    if not isinstance(features, list) or not all(
        isinstance(f, str) and _FEATURE.fullmatch(f) for f in features
    ):
        raise HelloError(f"hello from the peer has invalid features {features!r:.200}")
    agent = body.get("agent", "")
    if not isinstance(agent, str):
        raise HelloError(f"hello from the peer has an invalid agent {agent!r:.200}")
    return Hello(version=version, features=frozenset(features), agent=agent[:200])


def check_compatible(local: Hello, peer: Hello) -> frozenset[str]:
    """The features both sides offer; :class:`HelloError` when the versions differ."""
    if local.version != peer.version:
        who = f" ({peer.agent})" if peer.agent else ""
        raise HelloError(
            f"wire version mismatch: this side speaks {PROTOCOL_NAME} {local.version}, "
            f"the peer{who} speaks {peer.version}"
        )
    return local.features & peer.features


class HelloParser:
    """Sans-IO reader of the peer's hello: ``feed`` until it returns the hello; keep ``leftover``."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.leftover = b""

    def feed(self, data: bytes) -> Hello | None:
        self._buffer += data
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) >= MAX_HELLO_LINE:
                raise HelloError(f"hello from the peer has no newline within {MAX_HELLO_LINE} bytes")
            return None
        hello = parse_hello(bytes(self._buffer[: end + 1]))
        self.leftover = bytes(self._buffer[end + 1 :])
        self._buffer.clear()
        return hello


async def exchange_hello(transport: Transport, hello: Hello, *, timeout: float = 10.0) -> tuple[Hello, bytes]:
    """Send ``hello``, read the peer's; return it and the bytes that followed it.

    Raises :class:`HelloError` (after closing the transport) on a malformed or incompatible hello, on a
    timeout, or when the connection ends first.
    """
    parser = HelloParser()
    try:
        async with asyncio.timeout(timeout):
            await transport.send([encode_hello(hello)])
            peer = None
            while peer is None:
                data = await transport.receive()
                if not data:
                    raise HelloError("connection closed before the peer's hello arrived")
                peer = parser.feed(data)
        check_compatible(hello, peer)
    except HelloError:
        await transport.close()
        raise
    except TimeoutError:
        await transport.close()
        raise HelloError(f"no hello from the peer within {timeout:g} s") from None
    except Exception as exc:
        await transport.close()
        raise SessionClosed(f"transport failed during the hello: {type(exc).__name__}: {exc}") from exc
    return peer, parser.leftover
