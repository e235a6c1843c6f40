"""Egress end to end on the isolated test network (see ``network.py``): real clients in a real pod, the
caller's session in this process. ``client`` leaves from the caller's side (the corp host sees the
caller's address), ``cluster`` from the pod's (it reaches the cluster host and never the corp host),
``deny`` answers in band; transparent mode catches clients that ignore proxy variables, names their
connections by SNI/Host or by the caretaker's own DNS answers, and drops UDP the policy does not route
``cluster``."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cornus_core.caller import CallerSession
from cornus_core.events import Error, Event, HopDecision, Log, PolicyApplied
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec, EgressSpec
from server.app import CornusServer
from server.backends.local.backend import LocalBackend

from .backend_support import TOKEN, Deploy, NameProxy
from .conftest import needs_root
from .network import HTTP_PORT, OTHER_HTTP_PORT, PLAIN_PORT, UDP_PORT, IsolatedNetwork, Resolver, network

pytestmark = needs_root()
__all__ = ["network"]

PY = shlex.quote(sys.executable)


def curl(label: str, url: str, *extra: str, max_time: int = 10) -> str:
    return (f'{{ curl -sS -g --max-time {max_time} -w "status=%{{http_code}}\\n" {" ".join(extra)} {url} 2>&1; '
            f'echo "exit=$?"; }} | sed "s/^/{label} /"')


def python(label: str, code: str) -> str:
    return f'{PY} -c {shlex.quote(code)} 2>&1 | sed "s/^/{label} /"'


PLAIN_CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], {port}), timeout=10)
s.sendall(b"ping\\n")
print(s.recv(200).decode().strip() or "closed")
"""

UDP_CLIENT = """
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.sendto(b"x", (sys.argv[1], int(sys.argv[2])))
    print(s.recv(200).decode().strip())
except TimeoutError:
    print("no-answer")
except OSError as exc:
    print("send failed", exc.errno)
"""


STUB_RESOLVER_CLIENT = """
import socket
from dnslib import DNSRecord
query = DNSRecord.question("corp.test")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(query.pack(), ("127.0.0.53", 53))  # a systemd-resolved stub address: nothing listens in the pod
print(" ".join(str(rr.rdata) for rr in DNSRecord.parse(s.recv(4096)).rr) or "empty")
"""


class UdpEcho:
    """A UDP echo on an address of this host that the pod can reach straight, to prove a drop is a drop."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    async def start(self, host: str) -> int:
        echo = self

        class Protocol(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr: tuple[object, ...]) -> None:
                echo.seen.append(data)
                self.transport.sendto(b"udp from the host", addr)  # type: ignore[attr-defined]

        loop = asyncio.get_running_loop()
        self.transport, _ = await loop.create_datagram_endpoint(Protocol, local_addr=(host, 0))
        return int(self.transport.get_extra_info("sockname")[1])


@pytest.fixture
async def wired(local_backend: LocalBackend, network: IsolatedNetwork) -> AsyncIterator[tuple[IsolatedNetwork, Resolver, ProxySettings]]:
    """Pods join the test network; their DNS goes to a resolver that knows the test names; the caller's
    own proxy resolves the corp names (nothing else on this host does)."""
    net = network
    resolver = Resolver({
        "corp.test": (net.corp.ip, net.corp.ip6),
        "denied.test": (net.corp.ip, net.corp.ip6),
        "cluster.test": (net.cluster.ip, net.cluster.ip6),
    })
    local_backend.pod_setup = net.join
    local_backend.dns_upstream = [await resolver.start(net.caller_ip)]
    # vpn-only.test: only the caller's side knows it; the pods' resolver answers NXDOMAIN.
    proxy = NameProxy({"corp.test": net.corp.ip, "denied.test": net.corp.ip, "vpn-only.test": net.corp.ip})
    proxies = ProxySettings(all_proxy=await proxy.start())
    try:
        yield net, resolver, proxies
    finally:
        resolver.close()
        await proxy.close()


def routes_of(events: list[Event], host: str) -> set[tuple[str, str]]:
    """(hop, route) of every decision on a connection to ``host``."""
    return {(e.hop, str(e.route)) for e in events if isinstance(e, HopDecision) and e.host == host}


def lines_of(lines: list[str], label: str) -> list[str]:
    return [line[len(label) + 1:] for line in lines if line.startswith(label + " ")]


async def test_proxy_mode_on_the_test_network(deploy: Deploy, wired: tuple[IsolatedNetwork, Resolver, ProxySettings]) -> None:
    net, _, proxies = wired
    corp, cluster = net.corp.ip, net.cluster.ip
    proxy = '-x "$HTTP_PROXY" --noproxy ""'
    commands = [
        curl("corp", f"http://corp.test:{HTTP_PORT}/", proxy),
        curl("cluster", f"http://{cluster}:{HTTP_PORT}/", proxy),
        curl("cluster6", f"http://[{net.cluster.ip6}]:{HTTP_PORT}/", proxy),
        # The host drops what the pod sends it for others: the caretaker's dial times out (504).
        curl("corp-by-cluster", f"http://{corp}:{OTHER_HTTP_PORT}/", proxy, max_time=30),
        curl("denied", f"http://denied.test:{HTTP_PORT}/", proxy),
        curl("denied-socks", f"http://denied.test:{HTTP_PORT}/", '--socks5-hostname "127.0.0.1:15002"'),
    ]
    rules = [
        {"pattern": "corp.test", "route": "client"},
        {"pattern": "denied.test", "route": "deny"},
        {"pattern": f"{corp}:{OTHER_HTTP_PORT}", "route": "cluster"},
    ]
    spec = {"command": "; ".join(commands), "egress": {"mode": "proxy", "default": "cluster", "rules": rules}}
    run = await deploy(spec, proxies=proxies)
    lines = run.app_lines
    assert run.outcome is not None and run.outcome.exit_code == 0, lines
    # client: leaves from the caller's side, which the corp host sees as the source.
    assert lines_of(lines, "corp")[:2] == [f"hello from corp peer={net.caller_ip}", "status=200"], lines
    # cluster: leaves from the pod, reaching the cluster host (IPv4 and IPv6) and never the corp host.
    assert lines_of(lines, "cluster")[:2] == [f"hello from cluster peer={net.pod_ip}", "status=200"], lines
    assert lines_of(lines, "cluster6")[:2] == [f"hello from cluster peer={net.pod_ip6}", "status=200"], lines
    assert {"status=502", "status=504"} & set(lines_of(lines, "corp-by-cluster")), lines
    assert not any("hello" in line for line in lines_of(lines, "corp-by-cluster"))
    # deny: the in-band verdict, 403 over HTTP and SOCKS reply 2 ("not allowed by ruleset").
    assert "status=403" in lines_of(lines, "denied"), lines
    denied_socks = lines_of(lines, "denied-socks")
    assert "exit=0" not in denied_socks and any("(2)" in line for line in denied_socks), lines
    assert routes_of(run.events, "denied.test") == {("caretaker", "deny")}


async def test_transparent_mode_on_the_test_network(
    deploy: Deploy, wired: tuple[IsolatedNetwork, Resolver, ProxySettings]
) -> None:
    """Clients ignore proxy variables (there are none); names come from Host and from DNS answers."""
    net, resolver, proxies = wired
    echo = UdpEcho()
    echo_port = await echo.start(net.caller_ip)  # a host address the pod reaches straight
    v4, v6 = net.cluster_cidrs
    commands = [
        "env | grep -i _proxy || echo no-proxy-variables",
        curl("corp", f"http://corp.test:{HTTP_PORT}/"),  # DNS via the caretaker, then Host
        curl("cluster", f"http://cluster.test:{HTTP_PORT}/", "-4"),
        curl("cluster6", f"http://[{net.cluster.ip6}]:{HTTP_PORT}/"),
        curl("corp-direct", f"http://{net.corp.ip}:{OTHER_HTTP_PORT}/", max_time=4),  # routed cluster: unreachable
        curl("denied", f"http://denied.test:{HTTP_PORT}/"),
        python("plain", PLAIN_CLIENT.format(port=PLAIN_PORT)) .replace("2>&1", "corp.test 2>&1", 1),
        python("udp-cluster", UDP_CLIENT) .replace("2>&1", f"{net.cluster.ip} {UDP_PORT} 2>&1", 1),
        python("udp-cluster6", UDP_CLIENT) .replace("2>&1", f"{net.cluster.ip6} {UDP_PORT} 2>&1", 1),
        python("udp-host", UDP_CLIENT) .replace("2>&1", f"{net.caller_ip} {echo_port} 2>&1", 1),
        python("nxdomain", "import socket\ntry:\n socket.getaddrinfo('nowhere.test', 80)\nexcept OSError as e:"
                           "\n print('failed', e.errno)"),
        python("stub", STUB_RESOLVER_CLIENT),
    ]
    rules = [
        {"pattern": v4, "route": "cluster"},
        {"pattern": f"[{v6}]", "route": "cluster"},
        {"pattern": f"{net.corp.ip}:{OTHER_HTTP_PORT}", "route": "cluster"},
        {"pattern": "denied.test", "route": "deny"},
        {"pattern": "corp.test", "route": "client"},
    ]
    spec = {"command": "; ".join(commands), "egress": {"mode": "transparent", "default": "deny", "rules": rules}}
    try:
        run = await deploy(spec, proxies=proxies)
    finally:
        echo.transport.close()
    lines = run.app_lines
    assert run.outcome is not None and run.outcome.exit_code is not None, run.events
    assert "no-proxy-variables" in lines, [e for e in run.events if getattr(e, "source", "") == "caretaker"]
    assert {"corp.test", "cluster.test", "denied.test"} <= set(resolver.asked), [getattr(e, "line", e) for e in run.events if getattr(e, "source", "") == "caretaker" or "DNS" in str(e)]
    assert lines_of(lines, "corp")[:2] == [f"hello from corp peer={net.caller_ip}", "status=200"], lines
    assert lines_of(lines, "cluster")[:2] == [f"hello from cluster peer={net.pod_ip}", "status=200"], lines
    assert lines_of(lines, "cluster6")[:2] == [f"hello from cluster peer={net.pod_ip6}", "status=200"], lines
    assert not any("hello" in line for line in lines_of(lines, "corp-direct")), lines
    # deny: the connection is reset, nothing answers.
    denied = lines_of(lines, "denied")
    assert "exit=0" not in denied and not any("hello" in line for line in denied), lines
    assert routes_of(run.events, "denied.test") == {("caretaker", "deny")}
    # A plain TCP client (no SNI, no Host): named by the caretaker's DNS answer, routed client by name.
    assert lines_of(lines, "plain") == [f"pong from corp peer={net.caller_ip}"], lines
    plain = [e for e in run.events if isinstance(e, HopDecision) and e.port == PLAIN_PORT]
    assert {(e.hop, str(e.route), e.host) for e in plain} == {
        (hop, "client", "corp.test") for hop in ("caretaker", "server", "client")}, run.events
    assert {e.ip for e in plain if e.hop == "caretaker"} <= {net.corp.ip, net.corp.ip6}
    # UDP: passes to the cluster-routed addresses, dropped elsewhere (the host's echo was reachable).
    assert lines_of(lines, "udp-cluster") == [f"udp from cluster peer={net.pod_ip}"], lines
    assert lines_of(lines, "udp-cluster6") == [f"udp from cluster peer={net.pod_ip6}"], lines
    assert lines_of(lines, "udp-host") == [f"send failed {errno.EPERM}"], lines  # an output-hook drop
    assert echo.seen == []
    # DNS to a resolver address on loopback is captured too (a host's systemd-resolved stub means nothing here).
    assert lines_of(lines, "stub") == [net.corp.ip], lines
    # An unknown name fails fast with the upstream's NXDOMAIN, passed through.
    assert lines_of(lines, "nxdomain") and lines_of(lines, "nxdomain")[0].startswith("failed"), lines


async def test_a_live_policy_update_reloads_the_udp_rules(
    local_server: CornusServer, wired: tuple[IsolatedNetwork, Resolver, ProxySettings], tmp_path: Path
) -> None:
    """UDP routing lives in the pod's nft rules: a live update that takes the cluster's address off the
    `cluster` route drops its datagrams from then on."""
    net, _, proxies = wired
    go = tmp_path / "go"
    udp = python("udp", UDP_CLIENT).replace("2>&1", f"{net.cluster.ip} {UDP_PORT} 2>&1", 1)
    command = f"{udp}; echo first-done; while [ ! -e {go} ]; do sleep 0.05; done; {udp}"
    v4, _ = net.cluster_cidrs
    spec = {"command": command, "egress": {"mode": "transparent", "default": "deny",
                                           "rules": [{"pattern": v4, "route": "cluster"}]}}
    events: list[Event] = []
    session = CallerSession(local_server.url, TOKEN, DeploySpec.model_validate(spec), on_event=events.append,
                            proxies=proxies)
    task = asyncio.create_task(session.run())
    try:
        async with asyncio.timeout(60):
            while "first-done" not in [e.line for e in events if isinstance(e, Log)]:
                assert not task.done(), events
                await asyncio.sleep(0.05)
        version = await session.apply_policy(EgressSpec.model_validate(
            {"default": "deny", "rules": [{"pattern": v4, "route": "deny"}]}))
        async with asyncio.timeout(30):
            while {e.hop for e in events if isinstance(e, PolicyApplied) and e.version == version} != {
                    "client", "server", "caretaker"}:
                await asyncio.sleep(0.05)
        go.write_text("")
        outcome = await asyncio.wait_for(task, 60)
    finally:
        if not task.done():
            await session.down()
            await asyncio.wait_for(task, 30)
    lines = [e.line for e in events if isinstance(e, Log) and e.source == "app"]
    assert outcome.exit_code == 0, events
    assert not [e for e in events if isinstance(e, Error)], events
    assert lines_of(lines, "udp") == [f"udp from cluster peer={net.pod_ip}", f"send failed {errno.EPERM}"], lines


async def test_a_relayed_name_the_cluster_cannot_resolve_gets_a_stand_in(
    deploy: Deploy, wired: tuple[IsolatedNetwork, Resolver, ProxySettings]
) -> None:
    """The pod's DNS says NXDOMAIN for a host only the caller's VPN knows; the policy relays it, so the
    caretaker's resolver answers a stand-in address and the connection goes on by name."""
    net, resolver, proxies = wired
    lookup = "import socket\nprint(socket.gethostbyname('vpn-only.test'))"
    commands = [
        python("address", lookup),
        curl("http", f"http://vpn-only.test:{HTTP_PORT}/"),
        python("plain", PLAIN_CLIENT.format(port=PLAIN_PORT)).replace("2>&1", "vpn-only.test 2>&1", 1),
        python("unrelayed", "import socket\ntry:\n socket.gethostbyname('nowhere.test')\nexcept OSError as e:"
                            "\n print('failed')"),
    ]
    rules = [{"pattern": "vpn-only.test", "route": "client"}]
    spec = {"command": "; ".join(commands), "egress": {"mode": "transparent", "default": "deny", "rules": rules}}
    run = await deploy(spec, proxies=proxies)
    lines = run.app_lines
    assert run.outcome is not None and run.outcome.exit_code == 0, run.events
    assert "vpn-only.test" in resolver.asked  # the cluster was asked first
    [address] = lines_of(lines, "address")
    assert ipaddress.ip_address(address) in ipaddress.ip_network("198.18.0.0/15"), lines
    assert lines_of(lines, "http")[:2] == [f"hello from corp peer={net.caller_ip}", "status=200"], lines
    assert lines_of(lines, "plain") == [f"pong from corp peer={net.caller_ip}"], lines  # named by its stand-in
    assert lines_of(lines, "unrelayed") == ["failed"], lines  # not relayed: the cluster's NXDOMAIN stands
    first = [e for e in run.events if isinstance(e, HopDecision) and e.hop == "caretaker"]
    assert {(e.host, e.ip, str(e.route)) for e in first} == {("vpn-only.test", None, "client")}, first
