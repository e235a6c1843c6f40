"""Which addresses a relay terminus must not dial on a workload's behalf.

The caller's terminus (`client` route) never dials its own loopback, link-local or private LAN, and
the gateway never dials loopback, link-local or cloud metadata addresses — unless the policy names the
destination explicitly. Otherwise a pod could reach services that only listen on the developer's
machine or on the server itself.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressClass(StrEnum):
    LOOPBACK = "loopback"
    LINK_LOCAL = "link-local"  # includes 169.254.169.254, the cloud metadata address
    PRIVATE = "private"  # RFC 1918, unique-local IPv6, carrier-grade NAT
    UNSPECIFIED = "unspecified"
    MULTICAST = "multicast"
    PUBLIC = "public"


_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_PRIVATE_V4 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_ULA = ipaddress.ip_network("fc00::/7")

# Per terminus: the classes refused unless the policy names the destination explicitly.
CLIENT_REFUSED = frozenset(
    {AddressClass.LOOPBACK, AddressClass.LINK_LOCAL, AddressClass.PRIVATE, AddressClass.UNSPECIFIED,
     AddressClass.MULTICAST}
)
GATEWAY_REFUSED = frozenset(
    {AddressClass.LOOPBACK, AddressClass.LINK_LOCAL, AddressClass.UNSPECIFIED, AddressClass.MULTICAST}
)


def parse_ip(text: str | None) -> IPAddress | None:
    """The address in `text` (brackets and an IPv6 zone allowed), or None when it is not an IP literal."""
    if not text:
        return None
    text = text.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def classify(ip: IPAddress) -> AddressClass:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return AddressClass.LOOPBACK
    if ip.is_link_local:
        return AddressClass.LINK_LOCAL
    if ip.is_unspecified:
        return AddressClass.UNSPECIFIED
    if ip.is_multicast:
        return AddressClass.MULTICAST
    if isinstance(ip, ipaddress.IPv4Address):
        if ip in _CGNAT or any(ip in net for net in _PRIVATE_V4):
            return AddressClass.PRIVATE
    elif ip in _ULA:
        return AddressClass.PRIVATE
    return AddressClass.PUBLIC


def refusal(ip: IPAddress, refused: frozenset[AddressClass]) -> str | None:
    """Why dialing `ip` is refused at a terminus with the `refused` classes, or None when it is allowed."""
    cls = classify(ip)
    return f"{ip} is a {cls} address" if cls in refused else None


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address literal (no name is resolved)."""
    if host == "localhost":
        return True
    ip = parse_ip(host)
    return ip is not None and ip.is_loopback
