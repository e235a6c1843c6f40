"""The isolated test network: a corporate host only the caller's side reaches, a cluster host only the
pod's side reaches, and a resolver that knows their names.

    caller (this host) --veth-- corp            pod --eth1 (veth)-- router --veth-- cluster
         \\__ pod's own veth (the local backend's) __/

The corp namespace is joined to the host by a veth; the host's IP forwarding stays off, so a pod (whose
default route points at the host) never reaches it. The cluster namespace hangs off a router namespace
with forwarding on (inside that namespace only); the pod joins the router through a second link that
``join`` adds (the local backend's ``pod_setup``), with routes to the cluster network only. IPv4 and
IPv6. Every host runs ``netserver.py``. The resolver (``Resolver``) listens on the host end of the corp
link, an address of this host the pod reaches through its own veth.

Names are under a prefix of the network's own; ``close`` removes the namespaces (which takes the veths
inside them along) and the host's end of the corp link, and kills the hosts' processes, whatever state
a failed test left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import signal
import string
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSRecord

from server.backends.local import Pod
from server.backends.local._commands import run

NETSERVER = Path(__file__).with_name("netserver.py")
HTTP_PORT, OTHER_HTTP_PORT, PLAIN_PORT, UDP_PORT = 8080, 8081, 7070, 9090


@dataclass
class Host:
    name: str  # the role: corp or cluster
    netns: str
    ip: str
    ip6: str
    process: asyncio.subprocess.Process | None = None


@dataclass
class IsolatedNetwork:
    prefix: str
    octet: int  # the network is 10.214.<octet>.0/24 and fd0c:7465:7374:<octet>N::/64
    corp: Host = field(init=False)
    cluster: Host = field(init=False)
    router: str = field(init=False)
    joined: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.router = f"{self.prefix}rtr"
        self.corp = Host("corp", f"{self.prefix}corp", self.v4(2), self.v6(0, 2))
        self.cluster = Host("cluster", f"{self.prefix}clus", self.v4(10), self.v6(2, 2))

    # 10.214.O.0/30 caller-corp, .4/30 pod-router, .8/30 router-cluster; IPv6 /64s 0, 1, 2 likewise.
    def v4(self, last: int) -> str:
        return f"10.214.{self.octet}.{last}"

    def v6(self, link: int, last: int) -> str:
        return f"fd0c:7465:7374:{self.octet:x}{link}::{last}"

    @property
    def caller_ip(self) -> str:
        """The host end of the corp link: the address the corp host sees the caller's side come from."""
        return self.v4(1)

    @property
    def caller_ip6(self) -> str:
        return self.v6(0, 1)

    @property
    def pod_ip(self) -> str:
        """The pod's address on its link to the router: what the cluster host sees."""
        return self.v4(5)

    @property
    def pod_ip6(self) -> str:
        return self.v6(1, 1)

    @property
    def host_link(self) -> str:
        return f"{self.prefix}c0"

    @property
    def cluster_cidrs(self) -> tuple[str, str]:
        return f"10.214.{self.octet}.8/30", f"fd0c:7465:7374:{self.octet:x}2::/64"

    async def build(self) -> None:
        corp, cluster, router = self.corp.netns, self.cluster.netns, self.router
        for ns in (corp, cluster, router):
            await run(["ip", "netns", "add", ns], what=f"test network: namespace {ns}")
        await self._batch(None, [
            f"link add {self.host_link} type veth peer name {self.prefix}c1",
            f"link set {self.prefix}c1 netns {corp} name eth0",
            f"addr add {self.caller_ip}/30 dev {self.host_link}",
            f"addr add {self.caller_ip6}/64 dev {self.host_link} nodad",
            f"link set {self.host_link} up",
            f"link add {self.prefix}r0 type veth peer name {self.prefix}r1",
            f"link set {self.prefix}r0 netns {router} name toclus",
            f"link set {self.prefix}r1 netns {cluster} name eth0",
        ])
        await self._batch(corp, [
            "link set lo up", f"addr add {self.corp.ip}/30 dev eth0", f"addr add {self.corp.ip6}/64 dev eth0 nodad",
            "link set eth0 up", f"route add default via {self.caller_ip}", f"route add ::/0 via {self.caller_ip6}",
        ])
        await self._batch(router, [
            "link set lo up", f"addr add {self.v4(9)}/30 dev toclus", f"addr add {self.v6(2, 1)}/64 dev toclus nodad",
            "link set toclus up",
        ])
        await self._batch(cluster, [
            "link set lo up", f"addr add {self.cluster.ip}/30 dev eth0",
            f"addr add {self.cluster.ip6}/64 dev eth0 nodad", "link set eth0 up",
            f"route add default via {self.v4(9)}", f"route add ::/0 via {self.v6(2, 1)}",
        ])
        # Forwarding in the router's namespace only; the host's stays as it is (off).
        await run(["ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1",
                   "net.ipv6.conf.all.forwarding=1"], what="test network: router forwarding")
        for host in (self.corp, self.cluster):
            host.process = await asyncio.create_subprocess_exec(
                "ip", "netns", "exec", host.netns, sys.executable, str(NETSERVER), host.name,
                stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
            )
            assert host.process.stdout is not None
            line = await asyncio.wait_for(host.process.stdout.readline(), 20)
            assert line == b"READY\n", f"the {host.name} host did not start: {line!r}"

    async def join(self, pod: Pod) -> None:
        """Give ``pod`` a link into the router and routes to the cluster network (the backend's ``pod_setup``).
        One pod at a time: the pod end of the link has one fixed address."""
        a, b = f"{self.prefix}p{len(self.joined)}", f"{self.prefix}q{len(self.joined)}"
        self.joined.append(pod.name)
        await self._batch(None, [
            f"link add {a} type veth peer name {b}",
            f"link set {a} netns {pod.name} name eth1",
            f"link set {b} netns {self.router} name topod",
        ])
        v4, v6 = self.cluster_cidrs
        await self._batch(pod.name, [
            f"addr add {self.pod_ip}/30 dev eth1", f"addr add {self.pod_ip6}/64 dev eth1 nodad", "link set eth1 up",
            f"route add {v4} via {self.v4(6)}", f"route add {v6} via {self.v6(1, 2)}",
        ])
        await self._batch(self.router, [
            f"addr add {self.v4(6)}/30 dev topod",
            f"addr add {self.v6(1, 2)}/64 dev topod nodad", "link set topod up",
        ])

    async def close(self) -> None:
        for host in (self.corp, self.cluster):
            if host.process is not None and host.process.returncode is None:
                host.process.kill()
                await host.process.wait()
        for ns in (self.corp.netns, self.cluster.netns, self.router):
            # Whatever else a failed test started in there goes too.
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        subprocess.run(["ip", "link", "delete", self.host_link], capture_output=True)

    async def _batch(self, netns: str | None, commands: list[str]) -> None:
        argv = ["ip", "-batch", "-"] if netns is None else ["ip", "-n", netns, "-batch", "-"]
        await run(argv, input="\n".join(commands) + "\n", what=f"test network {netns or 'host'}")


def leftovers(prefix: str) -> list[str]:
    """Namespaces and interfaces of this host whose name starts with ``prefix``."""
    found = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.split("\n")
    named = [line.split()[0] for line in found if line.startswith(prefix)]
    named += [line.split(":")[1].strip().split("@")[0] for line in links
              if len(line.split(":")) > 1 and line.split(":")[1].strip().startswith(prefix)]
    return named


def free_octet() -> int:
    """A third octet whose 10.214.<octet>.0/24 no interface of this host uses."""
    addresses = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True).stdout
    choices = [o for o in range(1, 255) if f"10.214.{o}." not in addresses]
    return random.choice(choices)


def new_prefix() -> str:
    return "tn" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(3))


class Resolver:
    """The upstream resolver of the tests: answers A/AAAA for the names it is given (TTL 60) and
    NXDOMAIN for the rest, over UDP; records every question."""

    def __init__(self, names: dict[str, tuple[str, str]]) -> None:
        self.names = {name.lower(): ips for name, ips in names.items()}
        self.asked: list[str] = []

    async def start(self, host: str) -> str:
        """Listen on ``host``; returns ``IP:PORT`` (IPv6 bracketed) for the backend's ``dns_upstream``."""
        loop = asyncio.get_running_loop()
        resolver = self

        class Server(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr: tuple[object, ...]) -> None:
                self.transport.sendto(resolver.answer(data), addr)  # type: ignore[attr-defined]

        self.transport, _ = await loop.create_datagram_endpoint(Server, local_addr=(host, 0))
        port = self.transport.get_extra_info("sockname")[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def answer(self, data: bytes) -> bytes:
        query = DNSRecord.parse(data)
        reply = query.reply()
        name = str(query.q.qname).rstrip(".").lower()
        self.asked.append(name)
        ips = self.names.get(name)
        if ips is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif query.q.qtype == QTYPE.A:
            reply.add_answer(RR(query.q.qname, QTYPE.A, rdata=A(ips[0]), ttl=60))
        elif query.q.qtype == QTYPE.AAAA:
            reply.add_answer(RR(query.q.qname, QTYPE.AAAA, rdata=AAAA(ips[1]), ttl=60))
        return bytes(reply.pack())

    def close(self) -> None:
        self.transport.close()


@pytest.fixture
async def network() -> AsyncIterator[IsolatedNetwork]:
    """A built test network, removed in a finally; the test fails if anything of it is left."""
    net = IsolatedNetwork(new_prefix(), free_octet())
    try:
        await net.build()
        yield net
    finally:
        await net.close()
    assert leftovers(net.prefix) == [], "the test network left namespaces or interfaces behind"
