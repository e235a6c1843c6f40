"""cornus_core.wire: the connection between caretaker, server and caller.

Layers, bottom up (each sans-IO core has a thin asyncio layer on top):

- ``frames``/``session``/``flight``: yamux v0 framing, the session state machine with per-stream
  windows and fair scheduling, and the session-wide limit on data in flight (sans-IO);
- ``mux``/``stream``: the asyncio :class:`Mux` over any :class:`Transport`, streams with an
  asyncio-streams feel, and :func:`splice` for relays;
- ``websocket``: the mux over a WebSocket (binary messages, no compression);
- ``hello``: the versioned first line on every connection;
- ``tagged``/``verdict``: what a stream is for (tag + header lines), and the accepting side's
  one-line answer before any payload.
"""

from __future__ import annotations

from .errors import (
    DialError,
    HelloError,
    KeepaliveTimeout,
    ProtocolError,
    SessionClosed,
    StreamReset,
    WireError,
    WriteAfterClose,
)
from .frames import Flag, Frame, FrameDecoder, FrameType, GoAwayCode, encode_frame
from .hello import WIRE_VERSION, Hello, HelloParser, encode_hello, exchange_hello, parse_hello
from .mux import Mux, MuxConfig, open_mux
from .session import INITIAL_WINDOW, MAX_WINDOW, Session, SessionConfig
from .splice import SpliceResult, splice
from .stream import MuxStream
from .tagged import HeaderParser, TaggedHeader, encode_header, read_header, write_header
from .transport import StreamTransport, Transport
from .verdict import OK, Verdict, VerdictKind, encode_verdict, parse_verdict, read_verdict, write_verdict
from .websocket import WebSocketTransport, accept_websocket, dial_websocket, websocket_options

__all__ = [
    "INITIAL_WINDOW",
    "MAX_WINDOW",
    "OK",
    "WIRE_VERSION",
    "DialError",
    "Flag",
    "Frame",
    "FrameDecoder",
    "FrameType",
    "GoAwayCode",
    "HeaderParser",
    "Hello",
    "HelloError",
    "HelloParser",
    "KeepaliveTimeout",
    "Mux",
    "MuxConfig",
    "MuxStream",
    "ProtocolError",
    "Session",
    "SessionClosed",
    "SessionConfig",
    "SpliceResult",
    "StreamReset",
    "StreamTransport",
    "TaggedHeader",
    "Transport",
    "Verdict",
    "VerdictKind",
    "WebSocketTransport",
    "WireError",
    "WriteAfterClose",
    "accept_websocket",
    "dial_websocket",
    "encode_frame",
    "encode_header",
    "encode_hello",
    "encode_verdict",
    "exchange_hello",
    "open_mux",
    "parse_hello",
    "parse_verdict",
    "read_header",
    "read_verdict",
    "splice",
    "websocket_options",
    "write_header",
    "write_verdict",
]
