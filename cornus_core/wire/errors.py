"""One exception hierarchy for the wire layer.

Session and stream failures also subclass the matching builtin ``ConnectionError`` so that relay code
which already handles socket errors handles mux errors the same way.
"""

from __future__ import annotations


class WireError(Exception):
    """Base class of every error raised by :mod:`cornus_core.wire`."""


class ProtocolError(WireError):
    """The peer sent bytes that break the wire protocol (frames, headers, hello, verdict)."""


class HelloError(ProtocolError):
    """The hello exchange failed: malformed hello or incompatible protocol version."""


class StreamReset(WireError, ConnectionResetError):
    """The stream was reset (RST) by the peer or locally; no more data flows either way."""


class WriteAfterClose(WireError, BrokenPipeError):
    """Data was written to a stream after its sending side was closed (FIN)."""


class SessionClosed(WireError, ConnectionError):
    """The session is gone: transport died, protocol error, keepalive timeout, go-away or local close."""


class DialError(WireError, ConnectionError):
    """Could not establish the connection; ``status`` is the HTTP status when the server refused it."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KeepaliveTimeout(SessionClosed):
    """The peer did not answer a keepalive ping in time."""
