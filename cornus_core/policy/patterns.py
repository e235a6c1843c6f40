"""The egress rule pattern grammar, in one place.

::

    pattern  = "[" ADDRESS "]" [":" PORT]     an IP or CIDR in brackets (how IPv6 takes a port)
             | V6                             two or more colons: an IPv6 address or CIDR, no port
             | [HOST] ":" PORT                ":443" and "*:443" mean any host on port 443
             | HOST
    HOST     = CIDR | IP | GLOB
    PORT     = 1..65535

A CIDR or IP matches the destination IP or a host that is an IP literal; names are never resolved.
A GLOB matches the host name case-insensitively (the address text when only the address is known):
``*`` any run of characters (dots too), ``?`` one character, ``[a-z]``/``[!0-9]`` one character of
a class; one trailing dot of the host is ignored. Matching is linear in the host length: the standard
library's glob translation commits each ``*`` atomically, so app-chosen names cannot make it backtrack.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple

from .errors import PolicyError

if TYPE_CHECKING:
    from .routes import Destination

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
HostKind = Literal["any", "glob", "net"]

_GLOB_CHARS = re.compile(r"[A-Za-z0-9._\-*?\[\]!]")


class Target(NamedTuple):
    """A destination normalised once for matching against many patterns."""

    host: str  # lower case, no brackets, no trailing dot; the address text when no name is known
    ip: IPAddress | None  # the destination IP
    host_ip: IPAddress | None  # the host itself when it is an IP literal
    port: int

    @classmethod
    def of(cls, dest: Destination) -> Target:
        host = normalise_host(dest.host or dest.ip)
        return cls(host, parse_ip(dest.ip), parse_ip(host), dest.port)


@dataclass(frozen=True, slots=True)
class Pattern:
    """One parsed rule pattern; ``text`` is what was written."""

    text: str
    kind: HostKind
    port: int | None = None
    glob: str | None = None  # kind "glob": the normalised glob
    network: IPNetwork | None = None  # kind "net": a CIDR, or an IP as a /32 or /128
    _regex: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def matches(self, dest: Destination) -> bool:
        """Whether the destination matches this pattern (port and host part)."""
        return self.matches_target(Target.of(dest))

    def matches_target(self, target: Target) -> bool:
        """The same test on a destination normalised once (see :class:`Target`)."""
        if self.port is not None and target.port != self.port:
            return False
        if self.kind == "any":
            return True
        if self._regex is not None:
            return self._regex.match(target.host) is not None
        network = self.network
        assert network is not None
        return (target.ip is not None and target.ip in network) or (
            target.host_ip is not None and target.host_ip in network
        )

    def __str__(self) -> str:
        return self.text


def parse_pattern(text: str) -> Pattern:
    """Parse one rule pattern; anything that is not a pattern raises :class:`PolicyError`."""
    if not isinstance(text, str):
        raise PolicyError(f"a pattern must be a string, not {type(text).__name__}", source="pattern")
    stripped = text.strip()
    if not stripped:
        raise _error(text, "empty pattern (write '*' to match every destination)")
    if stripped.startswith("["):
        inside, close, rest = stripped[1:].partition("]")
        if any(c in inside for c in ":./") or not close:
            if not close and ":" in inside:
                raise _error(text, "unterminated '[' (write [IPv6] or [IPv6]:PORT)")
            if close:
                return _parse_bracketed(text, inside, rest)
    if stripped.count(":") >= 2:
        return Pattern(text, "net", None, network=_parse_address(text, stripped))
    host, colon, port_text = stripped.rpartition(":")
    if not colon:
        return _parse_host(text, stripped, None)
    return _parse_host(text, host, _parse_port(text, port_text))


def normalise_host(host: str | None) -> str:
    """A host as globs see it: lower case, without brackets and without one trailing dot."""
    if not host:
        return ""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.endswith("."):
        host = host[:-1]
    return host.lower()


def parse_ip(text: str | None) -> IPAddress | None:
    """An IP address from text (brackets allowed; IPv4-mapped IPv6 as IPv4), or None."""
    if not text or len(text) > 64 or not (text[0].isdigit() or text[0] in ":[abcdefABCDEF"):
        return None
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _error(text: str, message: str) -> PolicyError:
    return PolicyError(f"{text!r}: {message}", source="pattern", pattern=text)


def _parse_bracketed(text: str, inside: str, rest: str) -> Pattern:
    port: int | None = None
    if rest:
        if not rest.startswith(":"):
            raise _error(text, f"unexpected {rest!r} after ']' (write [IPv6]:PORT)")
        port = _parse_port(text, rest[1:])
    return Pattern(text, "net", port, network=_parse_address(text, inside))


def _parse_host(text: str, host: str, port: int | None) -> Pattern:
    if host in ("", "*"):
        return Pattern(text, "any", port)
    if "/" in host or all(c.isdigit() or c == "." for c in host):
        return Pattern(text, "net", port, network=_parse_address(text, host))
    return _parse_glob(text, host, port)


def _parse_address(text: str, address: str) -> IPNetwork:
    if "/" in address:
        _, _, prefix = address.partition("/")
        if not (prefix.isascii() and prefix.isdigit()):
            raise _error(text, f"bad CIDR {address!r}: the prefix length must be a number")
        try:
            network = ipaddress.ip_network(address, strict=False)
        except ValueError as exc:
            raise _error(text, f"bad CIDR {address!r}: {exc}") from None
    else:
        ip = parse_ip(address) if address.isascii() else None
        if ip is None or "[" in address:
            kind = "IPv6 address" if ":" in address else "IP address"
            raise _error(text, f"{address!r} is not a valid {kind} or CIDR")
        network = ipaddress.ip_network(ip)
    if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96:
        mapped = network.network_address.ipv4_mapped
        if mapped is not None:  # ::ffff:a.b.c.d/N: destinations are compared as IPv4
            return ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}", strict=False)
    return network


def _parse_port(text: str, port_text: str) -> int:
    if not port_text:
        raise _error(text, "missing port after ':'")
    if not (port_text.isascii() and port_text.isdigit()):
        raise _error(text, f"bad port {port_text!r}: must be a number 1..65535")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise _error(text, f"bad port {port_text!r}: must be 1..65535")
    return port


def _parse_glob(text: str, host: str, port: int | None) -> Pattern:
    for position, char in enumerate(host, 1):
        if not _GLOB_CHARS.fullmatch(char):
            raise _error(
                text, f"bad glob: character {char!r} at position {position} is not allowed in a host"
            )
    if host.startswith("."):
        raise _error(text, f"bad glob: a leading dot never matches a host name (did you mean '*{host}'?)")
    _check_classes(text, host)
    glob = normalise_host(host)
    if glob.strip("*") == "":
        return Pattern(text, "any", port)
    regex = re.compile(fnmatch.translate(glob), re.IGNORECASE)
    return Pattern(text, "glob", port, glob=glob, _regex=regex)


def _check_classes(text: str, glob: str) -> None:
    """Reject what fnmatch would quietly take literally: an unterminated class, '!' or ']' outside one."""
    i = 0
    while i < len(glob):
        char = glob[i]
        if char in "!]":
            raise _error(text, f"bad glob: {char!r} at position {i + 1} is only allowed inside [...]")
        if char != "[":
            i += 1
            continue
        start = i + 2 if glob[i + 1 : i + 2] == "!" else i + 1
        close = glob.find("]", start + 1)  # a ']' first in a class is a member
        if close < 0:
            raise _error(text, f"bad glob: unterminated '[' at position {i + 1}")
        members = glob[start:close]
        for k in range(1, len(members) - 1):
            if members[k] == "-" and members[k - 1] > members[k + 1]:
                raise _error(
                    text, f"bad glob: reversed range {members[k - 1 : k + 2]!r} in {glob[i : close + 1]!r}"
                )
        i = close + 1
