"""Transparent capture: the original destination of a redirected socket, and serving it.

An nftables ``redirect`` in the pod's network namespace sends every app TCP connection to one
local port; the kernel remembers where it was going (``SO_ORIGINAL_DST`` for IPv4,
``IP6T_SO_ORIGINAL_DST`` for IPv6). A connection that reached the port directly reports the local
address itself: serving it would loop back into the listener, so it is refused.

The capture rules themselves (one ``inet`` table, built as nft script text and loaded with
``nft -f -`` in whichever namespace a spawner runs it) and the socket mark that lets the
listener's own outbound connections through are at the end of this module.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import socket
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Protocol

from cornus_core.proxy.listener import ConnectionRequest, ProxyListener, Refused, peer_name, tcp_url
from cornus_core.proxy.sniff import NEED_MORE, sniff_hostname
from cornus_core.proxy.splice import CHUNK, ByteCount

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
IP6T_SO_ORIGINAL_DST = 80  # linux/netfilter_ipv6/ip6_tables.h


class NotRedirectedError(Exception):
    """The socket has no original destination other than the listener itself."""


def original_dst(sock: socket.socket) -> tuple[str, int]:
    """``(ip, port)`` the app dialed before the redirect."""
    local_ip, local_port = sock.getsockname()[:2]
    local = ipaddress.ip_address(local_ip)
    mapped = isinstance(local, ipaddress.IPv6Address) and local.ipv4_mapped is not None
    try:
        if sock.family == socket.AF_INET or mapped:
            raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)  # struct sockaddr_in
            port, ip = int.from_bytes(raw[2:4], "big"), str(ipaddress.IPv4Address(raw[4:8]))
        elif sock.family == socket.AF_INET6:
            raw = sock.getsockopt(socket.IPPROTO_IPV6, IP6T_SO_ORIGINAL_DST, 28)  # struct sockaddr_in6
            port, ip = int.from_bytes(raw[2:4], "big"), str(ipaddress.IPv6Address(raw[8:24]))
        else:
            raise NotRedirectedError(f"socket family {sock.family!r} has no original destination")
    except OSError as exc:
        raise NotRedirectedError(
            f"no original destination for the connection to {local_ip}:{local_port}: {exc.strerror}"
        ) from None
    if isinstance(local, ipaddress.IPv6Address) and local.ipv4_mapped is not None:
        local = local.ipv4_mapped
    if (ipaddress.ip_address(ip), port) == (local, local_port):
        raise NotRedirectedError(f"the connection to {ip}:{port} was not redirected")
    return ip, port


class TransparentListener:
    """``asyncio.start_server`` callback for redirected connections.

    The destination is the original address; the host name, when one can be had, comes from the
    client's first bytes (TLS SNI or HTTP Host), waiting at most ``sniff_timeout`` for them since
    server-speaks-first protocols send nothing. Requests and stats go through ``proxy``, so the
    handler and stats callback are shared with the proxy listener.
    """

    def __init__(self, proxy: ProxyListener, *, sniff_timeout: float = 1.0) -> None:
        self._proxy = proxy
        self.sniff_timeout = sniff_timeout

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        started = time.monotonic()
        peer = peer_name(writer)
        try:
            with self._proxy.serving():
                await self._serve(reader, writer, peer, started)
        except OSError:
            pass  # the app went away
        finally:
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str, started: float
    ) -> None:
        try:
            ip, port = original_dst(writer.get_extra_info("socket"))
        except NotRedirectedError as exc:
            self._proxy.report(None, peer, "bad-request", str(exc), ByteCount(), started)
            return
        first = await self._first_bytes(reader)
        sniffed = sniff_hostname(first)
        host = sniffed if isinstance(sniffed, str) and not _is_ip(sniffed) else None
        request = ConnectionRequest(host, ip, port, tcp_url(host or ip, port), "transparent")
        result = await self._proxy.connect(request)
        if isinstance(result, Refused):
            self._proxy.report(request, peer, result.kind, result.reason, ByteCount(), started)
            return
        await self._proxy.tunnel(request, peer, started, reader, writer, result, first)

    async def _first_bytes(self, reader: asyncio.StreamReader) -> bytes:
        data = b""
        try:
            async with asyncio.timeout(self.sniff_timeout):
                while sniff_hostname(data) is NEED_MORE:
                    chunk = await reader.read(CHUNK)
                    if not chunk:
                        break
                    data += chunk
        except TimeoutError:
            pass
        return data


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# --- Capture rules: the nftables table that sends app TCP to the listener --------------------------

CAPTURE_TABLE = "cornus_capture"
CAPTURE_PRIORITY = -100  # the nat output priority; this nft rejects the name "dstnat"
EXEMPT_DESTINATIONS = ("169.254.0.0/16", "fe80::/10")  # link-local: metadata services, neighbours
SOCKET_MARK_ENV = "CORNUS_SOCKET_MARK"  # tells a process which mark its own outbound sockets carry
NFT_TIMEOUT = 10.0

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class CaptureError(Exception):
    """The capture rules could not be built, loaded or removed; the message says which and why."""


class Spawner(Protocol):
    """Starts ``argv`` somewhere (here, or inside a pod's namespaces) with the given stdio."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        stdin: int | None = ...,
        stdout: int | None = ...,
        stderr: int | None = ...,
    ) -> Awaitable[asyncio.subprocess.Process]: ...


async def spawn_here(
    argv: Sequence[str], *, stdin: int | None = None, stdout: int | None = None, stderr: int | None = None
) -> asyncio.subprocess.Process:
    """The default spawner: the caller's own namespaces (e.g. a rootless user namespace)."""
    return await asyncio.create_subprocess_exec(*argv, stdin=stdin, stdout=stdout, stderr=stderr)


def capture_ruleset(
    port: int, *, exempt_uid: int | None = None, exempt_mark: int | None = None, table: str = CAPTURE_TABLE
) -> str:
    """nft script that (re)defines ``inet table``: all outbound TCP, IPv4 and IPv6, goes to ``port``.

    The redirect lands on 127.0.0.1 or ::1, so the listener binds both. Exempt, in order: loopback,
    the listener's own sockets (its uid, its socket mark, or both), link-local destinations. Loading
    the script replaces an older table of the same name in one transaction.
    """
    _check_table(table)
    if not 1 <= port <= 65535:
        raise CaptureError(f"capture port {port} is outside 1..65535")
    if exempt_uid is None and exempt_mark is None:
        raise CaptureError(
            f"capture table {table} needs an exempt uid or socket mark, or the listener's own connections loop"
        )
    if exempt_uid is not None and not 0 <= exempt_uid < 2**32 - 1:
        raise CaptureError(f"exempt uid {exempt_uid} is not a valid uid")
    if exempt_mark is not None and not 0 < exempt_mark < 2**32:
        raise CaptureError(f"exempt mark {exempt_mark} must be within 1..0xffffffff (0 marks every socket)")
    rules = ['oifname "lo" return']
    if exempt_uid is not None:
        rules.append(f"meta skuid {exempt_uid} return")
    if exempt_mark is not None:
        rules.append(f"meta mark {exempt_mark:#010x} return")
    v4, v6 = EXEMPT_DESTINATIONS
    rules += [f"ip daddr {v4} return", f"ip6 daddr {v6} return", f"meta l4proto tcp redirect to :{port}"]
    body = "".join(f"\t\t{rule}\n" for rule in rules)
    return (
        f"{_drop_table(table)}"
        f"table inet {table} {{\n"
        f"\tchain output {{\n"
        f"\t\ttype nat hook output priority {CAPTURE_PRIORITY}; policy accept;\n"
        f"{body}"
        f"\t}}\n"
        f"}}\n"
    )


def release_ruleset(table: str = CAPTURE_TABLE) -> str:
    """nft script that removes ``inet table``; loading it again (or without the table) is harmless."""
    _check_table(table)
    return _drop_table(table)


async def install_capture(
    port: int,
    *,
    exempt_uid: int | None = None,
    exempt_mark: int | None = None,
    table: str = CAPTURE_TABLE,
    spawn: Spawner = spawn_here,
) -> None:
    """Load the capture rules with ``nft -f -`` through ``spawn`` (e.g. a pod's)."""
    ruleset = capture_ruleset(port, exempt_uid=exempt_uid, exempt_mark=exempt_mark, table=table)
    await load_nft(ruleset, spawn, what=f"capture table {table}")


async def remove_capture(table: str = CAPTURE_TABLE, *, spawn: Spawner = spawn_here) -> None:
    await load_nft(release_ruleset(table), spawn, what=f"removal of capture table {table}")


async def load_nft(ruleset: str, spawn: Spawner = spawn_here, *, what: str = "nft ruleset") -> None:
    """Run ``nft -f -`` with ``ruleset`` on stdin; CaptureError carries nft's complaint."""
    pipe = asyncio.subprocess.PIPE
    try:
        proc = await spawn(["nft", "-f", "-"], stdin=pipe, stdout=pipe, stderr=pipe)
    except OSError as exc:
        raise CaptureError(f"cannot run nft for the {what}: {exc.strerror or exc}") from None
    try:
        _, err = await asyncio.wait_for(proc.communicate(ruleset.encode()), NFT_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise CaptureError(f"nft did not finish the {what} within {NFT_TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        reason = err.decode(errors="replace").strip() or f"exit status {proc.returncode}"
        raise CaptureError(f"nft refused the {what}: {reason}")


def set_socket_mark(sock: socket.socket, mark: int) -> None:
    """Mark ``sock`` (before it connects) so the capture rules let it through."""
    if not 0 < mark < 2**32:
        raise CaptureError(f"socket mark {mark} must be within 1..0xffffffff")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
    except OSError as exc:
        raise CaptureError(
            f"cannot set socket mark {mark:#x}: {exc.strerror} (SO_MARK needs CAP_NET_ADMIN in the namespace)"
        ) from None


def socket_mark_from_env(env: Mapping[str, str] | None = None) -> int | None:
    """The mark named by ``CORNUS_SOCKET_MARK`` (decimal or 0x-hex), or None when it is unset."""
    text = (os.environ if env is None else env).get(SOCKET_MARK_ENV, "").strip()
    if not text:
        return None
    try:
        mark = int(text, 0)
    except ValueError:
        raise CaptureError(f"{SOCKET_MARK_ENV}={text!r} is not a number") from None
    if not 0 < mark < 2**32:
        raise CaptureError(f"{SOCKET_MARK_ENV}={text!r} is outside 1..0xffffffff")
    return mark


def _check_table(table: str) -> None:
    if not _TABLE_NAME.fullmatch(table):
        raise CaptureError(f"nft table name {table!r} must be letters, digits and underscores (at most 64)")


def _drop_table(table: str) -> str:
    # Declaring the table first makes the delete succeed whether or not it existed.
    return f"table inet {table}\ndelete table inet {table}\n"
