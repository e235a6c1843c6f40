"""The dns role: the pod's resolver in transparent mode.

The capture rules send the app's DNS (UDP and TCP port 53, any address) here. Every query is forwarded to
an upstream resolver (the configured ones, else the nameservers of /etc/resolv.conf) on a socket the
capture rules let by; when no upstream answers in time the app gets SERVFAIL at once, rather than
waiting out its own resolver timeouts. The A and AAAA answers are remembered (address -> the name the
app asked for, for the answer's TTL plus a grace), so the egress role can give the policy a name for a
captured connection that carries none of its own (no TLS SNI, no HTTP Host: a plain TCP protocol).

The policy is consulted for one thing only: a name the cluster cannot resolve (NXDOMAIN, SERVFAIL, or no
address) that the policy relays (``client`` or ``gateway``, e.g. a host only the caller's VPN knows) gets a
stand-in address from 198.18.0.0/15 (reserved for benchmarks, never a real destination), stable for
that name. Its connections are captured like any other and named by the stand-in, so they reach the
relay, and the caller resolves the name on its side. AAAA questions for such names get an empty answer,
so the app uses the stand-in. Any other name resolves as the cluster says: a name routed ``deny`` still
resolves, and its connections are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import cast

from dnslib import QTYPE, RCODE, RR, A, DNSError, DNSRecord

from cornus_core.proxy.transparent import set_socket_mark

log = logging.getLogger(__name__)

DNS_PORT = 53
UPSTREAM_TIMEOUT = 2.0  # per upstream; the app's own resolver waits 5 s per try
MAX_MESSAGE = 65535
MAX_NAMES = 4096
NAME_GRACE = 30.0  # apps connect right after the answer, even one with TTL 0
LISTEN_HOSTS = ("127.0.0.1", "::1")  # where the capture redirect lands
BIND_ATTEMPTS = 5
RESOLV_CONFS = (Path("/etc/resolv.conf"), Path("/run/systemd/resolve/resolv.conf"))
STAND_INS = ipaddress.ip_network("198.18.0.0/15")
MAX_STAND_INS = 65536  # names with a stand-in at once; the least recently asked gives its address back
STAND_IN_TTL = 60

Upstream = tuple[str, int]


class UpstreamError(ValueError):
    """An upstream resolver address that cannot be used; the message names it."""


def parse_upstream(text: str) -> Upstream:
    """``IP``, ``IP:PORT``, ``[IPv6]`` or ``[IPv6]:PORT`` (port 53 when absent) -> ``(ip, port)``."""
    raw = text.strip()
    host, port_text = raw, ""
    if raw.startswith("["):
        host, close, rest = raw[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise UpstreamError(f"upstream resolver {text!r}: write [IPv6] or [IPv6]:PORT")
        port_text = rest[1:]
    elif raw.count(":") == 1:
        host, _, port_text = raw.partition(":")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise UpstreamError(f"upstream resolver {text!r}: {host!r} is not an IP address") from None
    if port_text and not (port_text.isascii() and port_text.isdigit() and 1 <= int(port_text) <= 65535):
        raise UpstreamError(f"upstream resolver {text!r}: port {port_text!r} is not within 1..65535")
    return str(ip), int(port_text) if port_text else DNS_PORT


def resolv_conf_upstreams(text: str) -> list[Upstream]:
    """The ``nameserver`` lines of a resolv.conf, leaving out loopback ones (the pod's loopback is its own,
    and its port 53 is this role's: forwarding there would loop) and any that do not parse."""
    found: list[Upstream] = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";", 1)[0].split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            address = fields[1].partition("%")[0]  # a zone index is meaningless in the pod
            try:
                ip = ipaddress.ip_address(address)
            except ValueError:
                continue
            if not ip.is_loopback:
                found.append((str(ip), DNS_PORT))
    return found


class NameMap:
    """Address -> the name an answer gave it; bounded (least recently answered goes first), expiring."""

    def __init__(self, size: int = MAX_NAMES, grace: float = NAME_GRACE,
                 clock: Callable[[], float] = time.monotonic, max_stand_ins: int = MAX_STAND_INS) -> None:
        self._size, self._grace, self._clock = size, grace, clock
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._max_stand_ins = max_stand_ins
        self._stand_ins: OrderedDict[str, str] = OrderedDict()  # name -> stand-in, least recently asked first
        self._stand_in_names: dict[str, str] = {}

    def remember(self, ip: str, name: str, ttl: int) -> None:
        key = _normal_ip(ip)
        if key is None:
            return
        self._entries.pop(key, None)
        self._entries[key] = (name, self._clock() + max(ttl, 0) + self._grace)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def name_for(self, ip: str | None) -> str | None:
        key = _normal_ip(ip)
        if key in self._stand_in_names:
            return self._stand_in_names[key]
        entry = self._entries.get(key) if key is not None else None
        if entry is None:
            return None
        if entry[1] < self._clock():
            del self._entries[key]  # type: ignore[arg-type]
            return None
        return entry[0]

    def __len__(self) -> int:
        return len(self._entries)

    def stand_in(self, name: str) -> str:
        """The stand-in address of ``name`` (the same one every time while it is in use)."""
        name = name.rstrip(".").lower()
        ip = self._stand_ins.pop(name, None)
        if ip is None:
            if len(self._stand_ins) >= self._max_stand_ins:
                _, ip = self._stand_ins.popitem(last=False)
                del self._stand_in_names[ip]
            else:
                ip = str(STAND_INS[len(self._stand_ins) + 1])
            self._stand_in_names[ip] = name
        self._stand_ins[name] = ip
        return ip

    @staticmethod
    def is_stand_in(ip: str | None) -> bool:
        key = _normal_ip(ip)
        return key is not None and ipaddress.ip_address(key) in STAND_INS

    def remember_answer(self, response: bytes) -> list[tuple[str, str]]:
        """Record the A/AAAA answers of a DNS response under the name asked; returns what was recorded.
        Anything that is not a parsable successful response records nothing."""
        try:
            record = DNSRecord.parse(response)
        except (DNSError, ValueError, IndexError, UnicodeError):
            return []
        if record.header.qr != 1 or record.header.rcode != RCODE.NOERROR or not record.questions:
            return []
        asked = str(record.questions[0].qname).rstrip(".").lower()
        if not asked:
            return []
        recorded = []
        for rr in record.rr:
            if rr.rtype in (QTYPE.A, QTYPE.AAAA):
                ip = str(rr.rdata)
                self.remember(ip, asked, int(rr.ttl))
                recorded.append((ip, asked))
        return recorded


def stand_in_reply(query: bytes, answer: bytes | None, names: NameMap,
                   relayed: Callable[[str], bool]) -> bytes | None:
    """The reply with a stand-in address, when ``answer`` (the upstream's, or SERVFAIL) left an A or AAAA
    question for a relayed name without an address; None when the upstream's answer stands."""
    try:
        record = DNSRecord.parse(query)
        result = DNSRecord.parse(answer) if answer is not None else None
    except (DNSError, ValueError, IndexError, UnicodeError):
        return None
    if record.header.qr != 0 or len(record.questions) != 1:
        return None
    question = record.questions[0]
    if question.qtype not in (QTYPE.A, QTYPE.AAAA):
        return None
    if result is not None and result.header.rcode == RCODE.NOERROR and any(
            rr.rtype in (QTYPE.A, QTYPE.AAAA) for rr in result.rr):
        return None  # the cluster resolves it
    name = str(question.qname).rstrip(".").lower()
    if not name or not relayed(name):
        return None
    reply = record.reply()
    if question.qtype == QTYPE.A:
        reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(names.stand_in(name)), ttl=STAND_IN_TTL))
    try:
        return bytes(reply.pack())
    except (DNSError, ValueError, IndexError, UnicodeError):
        return None


def _errno(exc: OSError) -> int | None:
    """The error number, also where uvloop's datagram endpoints keep it only on the cause."""
    cause = exc.__cause__
    return exc.errno or (cause.errno if isinstance(cause, OSError) else None)


def servfail_for(query: bytes) -> bytes | None:
    """A SERVFAIL reply to ``query``, or None when it is not a DNS query one could answer."""
    try:
        record = DNSRecord.parse(query)
    except (DNSError, ValueError, IndexError, UnicodeError):
        return None
    if record.header.qr != 0:
        return None
    reply = record.reply()
    reply.header.rcode = RCODE.SERVFAIL
    reply.rr, reply.auth, reply.ar = [], [], []
    try:
        return bytes(reply.pack())
    except (DNSError, ValueError, IndexError, UnicodeError):
        return None


def _normal_ip(ip: str | None) -> str | None:
    if not ip:
        return None
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


class DnsRole:
    """The resolver on 127.0.0.1 and ::1 (UDP and TCP, one port) that the capture rules send DNS to."""

    def __init__(self, upstreams: Sequence[Upstream], *, port: int = 0, mark: int | None = None,
                 timeout: float = UPSTREAM_TIMEOUT, names: NameMap | None = None,
                 relayed: Callable[[str], bool] | None = None) -> None:
        self.upstreams = list(upstreams)
        self.names = names or NameMap()
        self.relayed = relayed  # whether the policy relays a name: it gets a stand-in when unresolvable
        self._port = port
        self._mark = mark
        self._timeout = timeout
        self._transports: list[asyncio.DatagramTransport] = []
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return int(self._transports[0].get_extra_info("sockname")[1])

    async def start(self) -> int:
        """Listen; returns the port (the same on every address and on both protocols)."""
        for _ in range(BIND_ATTEMPTS):
            try:
                await self._listen(self._port)
            except OSError as exc:
                await self._close_listeners()
                if self._port or _errno(exc) != errno.EADDRINUSE:
                    raise
                continue
            return self.port
        raise OSError(errno.EADDRINUSE, f"no port free for the resolver on {' and '.join(LISTEN_HOSTS)}")

    async def _listen(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        for host in LISTEN_HOSTS:
            try:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: _UdpServer(self), local_addr=(host, port))
            except OSError as exc:
                if host != LISTEN_HOSTS[0] and _errno(exc) in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    continue  # no IPv6 here: nothing is redirected to ::1 either
                raise
            self._transports.append(transport)
            port = port or int(transport.get_extra_info("sockname")[1])
            self._servers.append(await asyncio.start_server(self._serve_tcp, host, port))

    async def _close_listeners(self) -> None:
        for transport in self._transports:
            transport.close()
        for server in self._servers:
            server.close()
        self._transports, self._servers = [], []

    async def aclose(self) -> None:
        await self._close_listeners()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    def spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def resolve(self, query: bytes, *, tcp: bool = False) -> bytes | None:
        """The upstream's answer to ``query`` (remembered in ``names``), SERVFAIL when none answers, or
        None for something that is not a query at all; a stand-in for a relayed name the cluster cannot
        resolve."""
        answer = await self._forward(query, tcp)
        if self.relayed is not None and (stand_in := stand_in_reply(query, answer, self.names, self.relayed)):
            return stand_in
        return answer

    async def _forward(self, query: bytes, tcp: bool) -> bytes | None:
        for upstream in self.upstreams:
            try:
                async with asyncio.timeout(self._timeout):
                    if tcp:
                        answer = await self._ask_tcp(upstream, query)
                    else:
                        answer = await self._ask_udp(upstream, query)
            except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                log.info("dns: upstream %s:%d did not answer: %s", *upstream, exc or "timeout")
                continue
            self.names.remember_answer(answer)
            return answer
        return servfail_for(query)

    def _socket(self, ip: str, kind: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        sock = socket.socket(family, kind)
        try:
            if self._mark is not None:
                set_socket_mark(sock, self._mark)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    async def _ask_udp(self, upstream: Upstream, query: bytes) -> bytes:
        loop = asyncio.get_running_loop()
        with self._socket(upstream[0], socket.SOCK_DGRAM) as sock:
            await loop.sock_connect(sock, upstream)
            await loop.sock_sendall(sock, query)
            while True:  # a connected socket only hears from the upstream; skip replies to other ids
                answer = await loop.sock_recv(sock, MAX_MESSAGE)
                if answer[:2] == query[:2]:
                    return answer

    async def _ask_tcp(self, upstream: Upstream, query: bytes) -> bytes:
        loop = asyncio.get_running_loop()
        sock = self._socket(upstream[0], socket.SOCK_STREAM)
        try:
            await loop.sock_connect(sock, upstream)
        except BaseException:
            sock.close()
            raise
        reader, writer = await asyncio.open_connection(sock=sock)
        try:
            writer.write(len(query).to_bytes(2, "big") + query)
            size = int.from_bytes(await reader.readexactly(2), "big")
            return await reader.readexactly(size)
        finally:
            writer.close()

    async def answer_udp(self, query: bytes, reply: Callable[[bytes], None]) -> None:
        answer = await self.resolve(query)
        if answer is not None:
            reply(answer)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(2), "big")
                answer = await self.resolve(await reader.readexactly(size), tcp=True)
                if answer is None:
                    break
                writer.write(len(answer).to_bytes(2, "big") + answer)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass  # the app hung up
        finally:
            writer.close()


class _UdpServer(asyncio.DatagramProtocol):
    def __init__(self, role: DnsRole) -> None:
        self.role = role
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        transport = self.transport
        if transport is None:
            return

        def reply(answer: bytes) -> None:
            if not transport.is_closing():
                transport.sendto(answer, addr)

        self.role.spawn(self.role.answer_udp(data, reply))


def upstreams_from(configured: Iterable[str], resolv_confs: Sequence[Path] = RESOLV_CONFS) -> list[Upstream]:
    """The configured upstreams, else the nameservers of the first of ``resolv_confs`` that names any
    beyond loopback (a host with systemd-resolved lists only its 127.0.0.53 stub in /etc/resolv.conf, and
    the real ones in /run/systemd/resolve/resolv.conf); UpstreamError for a bad configured one."""
    chosen = [parse_upstream(text) for text in configured]
    if chosen:
        return chosen
    for path in resolv_confs:
        try:
            found = resolv_conf_upstreams(path.read_text())
        except OSError:
            continue
        if found:
            return found
    log.warning("dns: no usable nameserver in %s; every query the cluster should answer gets SERVFAIL",
                " or ".join(map(str, resolv_confs)))
    return []
