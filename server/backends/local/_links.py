"""Host-side interfaces over netlink (pyroute2): in-process and non-blocking, with exact errors.

Namespace creation and the pod-side setup use iproute2 instead: pyroute2 does both by forking the
server (its netns helpers fork a child to enter the namespace), which blocks the event loop and is
unsafe in a process with threads.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ._commands import PodError

IFA_F_NODAD = 0x02  # usable at once: no duplicate-address detection on a point-to-point link


async def host_addresses() -> list[str]:
    """Every IPv4 and IPv6 address on the host's interfaces."""
    async with AsyncIPRoute() as ipr:
        return [msg.get("IFA_ADDRESS") async for msg in await ipr.addr("dump")]


async def link_names() -> list[str]:
    async with AsyncIPRoute() as ipr:
        return [msg.get("IFLA_IFNAME") async for msg in await ipr.link("dump")]


async def add_veth(name: str, netns: str, addresses: list[tuple[str, int]]) -> None:
    """A veth pair: ``name`` on the host with ``addresses``, its peer ``eth0`` inside ``netns``."""
    what = f"pod {name}: host veth"
    async with AsyncIPRoute() as ipr:
        try:
            await ipr.link("add", ifname=name, kind="veth", peer={"ifname": "eth0", "net_ns_fd": netns})
            index = await _index(ipr, name)
            for address, prefixlen in addresses:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                extra: dict[str, Any] = {"flags": IFA_F_NODAD} if family == socket.AF_INET6 else {}
                await ipr.addr(
                    "add", index=index, address=address, prefixlen=prefixlen, family=family, **extra
                )
            await ipr.link("set", index=index, state="up")
        except NetlinkError as exc:
            raise PodError(f"{what}: {os.strerror(exc.code)}") from None


async def delete_link(name: str) -> None:
    """Remove interface ``name`` (and so its veth peer); absent already is fine."""
    async with AsyncIPRoute() as ipr:
        try:
            await ipr.link("del", index=await _index(ipr, name))
        except LookupError:
            return
        except NetlinkError as exc:
            if exc.code != errno.ENODEV:
                raise PodError(f"cannot remove interface {name}: {os.strerror(exc.code)}") from None


async def default_route_device() -> str | None:
    """The interface of the host's IPv4 default route, if it has one."""
    async with AsyncIPRoute() as ipr:
        try:
            routes = await _collect(await ipr.route("get", dst="198.51.100.1"))  # any non-local address
        except NetlinkError:
            return None  # no route: the host has no uplink
        for route in routes:
            index = route.get("RTA_OIF")
            if index is not None:
                links = await _collect(await ipr.link("get", index=index))
                return str(links[0].get("IFLA_IFNAME"))
    return None


async def _collect(reply: Any) -> list[Any]:
    """pyroute2 answers some requests with a list and dumps with an async iterator."""
    if isinstance(reply, list | tuple):
        return list(reply)
    return [msg async for msg in reply]


async def _index(ipr: AsyncIPRoute, name: str) -> int:
    found = await ipr.link_lookup(ifname=name)
    if not found:
        raise LookupError(name)
    return int(found[0])
