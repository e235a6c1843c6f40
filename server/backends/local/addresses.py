"""Point-to-point address blocks for pods: one IPv4 /30 (and, when enabled, one IPv6 /126) per pod.

Block ``k`` of the range gives the host end ``.1`` and the pod ``.2`` of the k-th /30; the IPv6 block
``k`` mirrors it. A block is free when no pod of this run holds it and no host interface already has
an address inside it (another server run, or anything else on the machine).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_IPV4_RANGE = "10.213.0.0/16"
DEFAULT_IPV6_RANGE = "fd0c:6f72:6e75:213::/64"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressError(ValueError):
    """A range that cannot hold pods, or a range with no free block left."""


@dataclass(frozen=True)
class PodAddresses:
    block: int
    host_ip: str
    pod_ip: str
    host_ip6: str | None
    pod_ip6: str | None

    prefixlen = 30
    prefixlen6 = 126


class AddressPlan:
    def __init__(
        self, ipv4_range: str = DEFAULT_IPV4_RANGE, ipv6_range: str | None = DEFAULT_IPV6_RANGE
    ) -> None:
        self.ipv4 = _network(ipv4_range, 4, 30, "IPv4 pod range")
        self.ipv6 = _network(ipv6_range, 6, 126, "IPv6 pod range") if ipv6_range else None
        self.blocks = self.ipv4.num_addresses // 4
        if self.ipv6 is not None:
            self.blocks = min(self.blocks, self.ipv6.num_addresses // 4)
        self._held: set[int] = set()

    def allocate(self, in_use: Iterable[str]) -> PodAddresses:
        """The lowest free block, held until ``release``; ``in_use`` are the host's current addresses."""
        taken = set(self._held)
        for text in in_use:
            taken.update(self._blocks_of(ipaddress.ip_address(text)))
        for block in range(self.blocks):
            if block not in taken:
                self._held.add(block)
                return self.addresses(block)
        raise AddressError(f"no free /30 left in the pod range {self.ipv4} ({self.blocks} blocks in use)")

    def release(self, block: int) -> None:
        self._held.discard(block)

    def addresses(self, block: int) -> PodAddresses:
        base4 = self.ipv4.network_address + 4 * block
        host6 = pod6 = None
        if self.ipv6 is not None:
            base6 = self.ipv6.network_address + 4 * block
            host6, pod6 = str(base6 + 1), str(base6 + 2)
        return PodAddresses(block, str(base4 + 1), str(base4 + 2), host6, pod6)

    def _blocks_of(self, ip: IPAddress) -> list[int]:
        for net in (self.ipv4, self.ipv6):
            if net is not None and ip.version == net.version and ip in net:
                return [(int(ip) - int(net.network_address)) // 4]
        return []


def _network(
    text: str, version: int, smallest: int, what: str
) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise AddressError(f"{what} {text!r} is not a network: {exc}") from None
    if net.version != version:
        raise AddressError(f"{what} {text!r} is not an IPv{version} network")
    if net.prefixlen > smallest:
        raise AddressError(f"{what} {text!r} is smaller than one /{smallest}")
    return net
