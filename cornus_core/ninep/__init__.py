"""9P2000.L: a sans-IO codec, a confined export server with a thin asyncio layer, and an asyncio client.

- :mod:`.codec` / :mod:`.messages` — ``encode(msg)``, ``decode(frame)``, a streaming :class:`Decoder`;
- :class:`Export` — the local directory or single file served, every path resolved beneath its root;
- :class:`ServerSession` — sans-IO server: bytes in, replies (or blocking I/O jobs) out;
- :func:`serve_connection` / :func:`serve_tcp` — the asyncio server over any stream, or standalone TCP;
- :class:`Client` — asyncio client for tests, probes and a userspace mount.

``python -m cornus_core.ninep DIR --listen 127.0.0.1:PORT [--ro]`` serves a directory from the shell.
"""

from __future__ import annotations

from .client import Client
from .codec import Decoder, decode, decode_dirents, encode, encode_dirents
from .errors import NinePError, ProtocolError, RemoteError
from .export import Export
from .messages import DirEntry, Message, Qid
from .server import TCPServer, serve_connection, serve_tcp
from .session import Job, Reply, ServerSession
from .stats import ExportStats, StatsSnapshot

__all__ = [
    "Client",
    "Decoder",
    "DirEntry",
    "Export",
    "ExportStats",
    "Job",
    "Message",
    "NinePError",
    "ProtocolError",
    "Qid",
    "RemoteError",
    "Reply",
    "ServerSession",
    "StatsSnapshot",
    "TCPServer",
    "decode",
    "decode_dirents",
    "encode",
    "encode_dirents",
    "serve_connection",
    "serve_tcp",
]
