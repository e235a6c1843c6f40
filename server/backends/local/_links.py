"""Host-side interfaces over netlink (pyroute2): in-process, with exact errors.

The calls run in a worker thread on pyroute2's synchronous API: its asyncio API needs the standard event
loop (netlink sockets are not among the socket families uvloop serves), and these calls are rare.
Namespace creation and the pod-side setup use iproute2 instead: pyroute2 does both by forking the
server (its netns helpers fork a child to enter the namespace), which is unsafe in a process with threads.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ._commands import PodError

IFA_F_NODAD = 0x02  # usable at once: no duplicate-address detection on a point-to-point link


async def host_addresses() -> list[str]:
    """Every IPv4 and IPv6 address on the host's interfaces."""
    return await asyncio.to_thread(_host_addresses)


async def link_names() -> list[str]:
    return await asyncio.to_thread(_link_names)


async def add_veth(name: str, netns: str, addresses: list[tuple[str, int]]) -> None:
    """A veth pair: ``name`` on the host with ``addresses``, its peer ``eth0`` inside ``netns``."""
    await asyncio.to_thread(_add_veth, name, netns, addresses)


async def delete_link(name: str) -> None:
    """Remove interface ``name`` (and so its veth peer); absent already is fine."""
    await asyncio.to_thread(_delete_link, name)


async def default_route_device() -> str | None:
    """The interface of the host's IPv4 default route, if it has one."""
    return await asyncio.to_thread(_default_route_device)


def _host_addresses() -> list[str]:
    with IPRoute() as ipr:
        return [msg.get("IFA_ADDRESS") for msg in ipr.addr("dump")]


def _link_names() -> list[str]:
    with IPRoute() as ipr:
        return [msg.get("IFLA_IFNAME") for msg in ipr.link("dump")]


def _add_veth(name: str, netns: str, addresses: list[tuple[str, int]]) -> None:
    with IPRoute() as ipr:
        try:
            ipr.link("add", ifname=name, kind="veth", peer={"ifname": "eth0", "net_ns_fd": netns})
            index = _index(ipr, name)
            for address, prefixlen in addresses:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                extra: dict[str, Any] = {"flags": IFA_F_NODAD} if family == socket.AF_INET6 else {}
                ipr.addr("add", index=index, address=address, prefixlen=prefixlen, family=family, **extra)
            ipr.link("set", index=index, state="up")
        except NetlinkError as exc:
            raise PodError(f"pod {name}: host veth: {os.strerror(exc.code)}") from None


def _delete_link(name: str) -> None:
    with IPRoute() as ipr:
        try:
            ipr.link("del", index=_index(ipr, name))
        except LookupError:
            return
        except NetlinkError as exc:
            if exc.code != errno.ENODEV:
                raise PodError(f"cannot remove interface {name}: {os.strerror(exc.code)}") from None


def _default_route_device() -> str | None:
    with IPRoute() as ipr:
        try:
            routes = list(ipr.route("get", dst="198.51.100.1"))  # any non-local address
        except NetlinkError:
            return None  # no route: the host has no uplink
        for route in routes:
            index = route.get("RTA_OIF")
            if index is not None:
                return str(next(iter(ipr.link("get", index=index))).get("IFLA_IFNAME"))
    return None


def _index(ipr: IPRoute, name: str) -> int:
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise LookupError(name)
    return int(found[0])
