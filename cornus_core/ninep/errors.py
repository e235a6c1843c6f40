"""One exception hierarchy for the 9P layer.

Malformed input always surfaces as :class:`ProtocolError`; an ``Rlerror`` received by the client
surfaces as :class:`RemoteError`, which is also an ``OSError`` carrying the server's errno so callers
(a FUSE adapter, tests) can treat it like any failed system call.
"""

from __future__ import annotations

import os


class NinePError(Exception):
    """Base class of every error raised by :mod:`cornus_core.ninep`."""


class ProtocolError(NinePError):
    """Bytes that break 9P2000.L framing or a message layout.

    ``tag`` is the tag of the offending message when its header could be read, so a server can answer
    that one request with an error and carry on. ``fatal`` means the byte stream itself is broken
    (bad frame size) and the connection cannot continue. ``unsupported`` marks a well-formed frame of
    a message type 9P2000.L does not define.
    """

    def __init__(
        self, message: str, *, tag: int | None = None, fatal: bool = False, unsupported: bool = False
    ) -> None:
        super().__init__(message)
        self.tag = tag
        self.fatal = fatal
        self.unsupported = unsupported


class RemoteError(NinePError, OSError):
    """The server answered a request with ``Rlerror``."""

    def __init__(self, errno: int, request: str) -> None:
        OSError.__init__(self, errno, f"{os.strerror(errno)} (9P {request})")
        self.request = request
