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

from cornus_core.policy.patterns import IPNetwork, parse_pattern
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
UDP_FILTER_PRIORITY = 0  # the filter output priority: after the nat chain's redirects
DNS_PORT = 53
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
    port: int,
    *,
    exempt_uid: int | None = None,
    exempt_mark: int | None = None,
    dns_port: int | None = None,
    udp: Sequence[str] | None = None,
    table: str = CAPTURE_TABLE,
) -> str:
    """nft script that (re)defines ``inet table``: all outbound TCP, IPv4 and IPv6, goes to ``port``.

    The redirect lands on 127.0.0.1 or ::1, so the listener binds both. Exempt: the listener's own
    sockets (its uid, its socket mark, or both), loopback and link-local destinations. With ``dns_port``,
    DNS (UDP and TCP port 53, any address, loopback too) goes there instead. With ``udp`` (the lines of
    :func:`udp_policy`), a filter chain judges every other outbound UDP datagram by them, with the same
    exemptions. Loading the script replaces an older table of the same name in one transaction.
    """
    _check_table(table)
    for what, value in (("capture", port), ("dns", dns_port)):
        if value is not None and not 1 <= value <= 65535:
            raise CaptureError(f"{what} port {value} is outside 1..65535")
    if exempt_uid is None and exempt_mark is None:
        raise CaptureError(
            f"capture table {table} needs an exempt uid or socket mark, or the listener's own connections loop"
        )
    if exempt_uid is not None and not 0 <= exempt_uid < 2**32 - 1:
        raise CaptureError(f"exempt uid {exempt_uid} is not a valid uid")
    if exempt_mark is not None and not 0 < exempt_mark < 2**32:
        raise CaptureError(f"exempt mark {exempt_mark} must be within 1..0xffffffff (0 marks every socket)")
    listener = []  # the listener's own sockets
    if exempt_uid is not None:
        listener.append(f"meta skuid {exempt_uid} return")
    if exempt_mark is not None:
        listener.append(f"meta mark {exempt_mark:#010x} return")
    v4, v6 = EXEMPT_DESTINATIONS
    local = ['oifname "lo" return', f"ip daddr {v4} return", f"ip6 daddr {v6} return"]
    exempt = [local[0], *listener, *local[1:]]
    nat = list(listener)
    if dns_port is not None:
        # Before the loopback exemption: a resolver on loopback (127.0.0.53, Docker's 127.0.0.11) is
        # another namespace's, or nobody's, in the pod.
        nat += [f"udp dport {DNS_PORT} redirect to :{dns_port}", f"tcp dport {DNS_PORT} redirect to :{dns_port}"]
    nat += [*local, f"meta l4proto tcp redirect to :{port}"]
    chains = _chain("output", f"type nat hook output priority {CAPTURE_PRIORITY}; policy accept;", nat)
    if udp is not None:
        filtering = ["meta l4proto != udp return", *exempt]
        if dns_port is not None:
            # After the nat chain, redirected DNS goes to loopback, but oifname still names the first route.
            filtering += [f"ip daddr 127.0.0.1 udp dport {dns_port} return",
                          f"ip6 daddr ::1 udp dport {dns_port} return"]
        filtering += udp
        chains += _chain("udp_output", f"type filter hook output priority {UDP_FILTER_PRIORITY}; policy accept;",
                         filtering)
    return f"{_drop_table(table)}table inet {table} {{\n{chains}}}\n"


def _chain(name: str, header: str, rules: Sequence[str]) -> str:
    body = "".join(f"\t\t{rule}\n" for rule in rules)
    return f"\tchain {name} {{\n\t\t{header}\n{body}\t}}\n"


class UdpRuleSource(Protocol):
    @property
    def pattern(self) -> str: ...

    @property
    def route(self) -> str: ...


def udp_policy(rules: Sequence[UdpRuleSource], default: str | None, script: str | None) -> list[str]:
    """nft rules for captured UDP (DNS aside): accepted where the policy routes its destination
    ``cluster``, dropped everywhere else (no UDP is relayed).

    UDP carries no name, so only what nft can say is compiled: the rules in order, as long as their
    pattern is an address, a CIDR or any host (each with or without a port); consecutive port-less
    address rules of one verdict share one anonymous set. The first rule with a name pattern ends the
    compilation and every UDP datagram not yet accepted is dropped (the name might have matched); a PAC
    script drops all of it. Past the last rule, the default route decides (``cluster`` unless set).
    """
    if script:
        return ["drop"]
    lines: list[str] = []
    pending: tuple[str, str, list[IPNetwork]] | None = None  # (family, verdict, networks) of a run

    def flush() -> None:
        nonlocal pending
        if pending is not None:
            family, verdict, networks = pending
            lines.append(f"{family} daddr {{ {', '.join(map(_nft_net, networks))} }} {verdict}")
            pending = None

    for rule in rules:
        pattern = parse_pattern(rule.pattern)
        verdict = "accept" if rule.route.strip().lower() == "cluster" else "drop"
        port = f" udp dport {pattern.port}" if pattern.port is not None else ""
        if pattern.kind == "glob":
            flush()
            return [*lines, "drop"]
        if pattern.kind == "any":
            flush()
            lines.append(f"udp dport {pattern.port} {verdict}" if pattern.port is not None else verdict)
            continue
        network = pattern.network
        assert network is not None
        family = "ip" if network.version == 4 else "ip6"
        if port:
            flush()
            lines.append(f"{family} daddr {_nft_net(network)}{port} {verdict}")
        elif pending is not None and pending[:2] == (family, verdict):
            pending[2].append(network)
        else:
            flush()
            pending = (family, verdict, [network])
    flush()
    lines.append("accept" if (default or "cluster").strip().lower() == "cluster" else "drop")
    return lines


def _nft_net(network: IPNetwork) -> str:
    return str(network.network_address) if network.prefixlen == network.max_prefixlen else str(network)


def release_ruleset(table: str = CAPTURE_TABLE) -> str:
    """nft script that removes ``inet table``; loading it again (or without the table) is harmless."""
    _check_table(table)
    return _drop_table(table)


async def install_capture(
    port: int,
    *,
    exempt_uid: int | None = None,
    exempt_mark: int | None = None,
    dns_port: int | None = None,
    udp: Sequence[str] | None = None,
    table: str = CAPTURE_TABLE,
    spawn: Spawner = spawn_here,
) -> None:
    """Load the capture rules with ``nft -f -`` through ``spawn`` (e.g. a pod's)."""
    ruleset = capture_ruleset(port, exempt_uid=exempt_uid, exempt_mark=exempt_mark, dns_port=dns_port,
                              udp=udp, table=table)
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
