"""``NO_PROXY`` matching with curl's semantics, plus ports and CIDRs.

Entries are separated by commas (and white space). ``*`` alone bypasses the proxy for every host.
A name matches itself and every subdomain; a leading ``.`` (or ``*.``) is ignored, so
``example.com`` and ``.example.com`` both match ``example.com`` and ``a.example.com``. IP
addresses and CIDRs (``10.0.0.0/8``, ``[::1]``, ``fd00::/8``) match IP-literal hosts only: no name
is resolved. Any entry may carry ``:PORT`` to match that port only.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class _Entry:
    name: str | None
    network: IPNetwork | None
    port: int | None

    def matches(
        self, name: str | None, ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None, port: int
    ) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return ip is not None and ip.version == self.network.version and ip in self.network
        assert self.name is not None
        return name is not None and (name == self.name or name.endswith("." + self.name))


@dataclass(frozen=True)
class NoProxy:
    entries: tuple[_Entry, ...] = ()
    everything: bool = False

    @classmethod
    def parse(cls, text: str | None) -> NoProxy:
        """Parse a ``NO_PROXY`` value; entries that cannot be understood are skipped, as curl does."""
        entries: list[_Entry] = []
        for token in re.split(r"[,\s]+", text or ""):
            if token == "*":
                return cls((), everything=True)
            entry = _parse_entry(token)
            if entry is not None:
                entries.append(entry)
        return cls(tuple(entries))

    def matches(self, host: str, port: int) -> bool:
        """True when ``host:port`` must be reached directly."""
        if self.everything:
            return True
        host = host.strip("[]").rstrip(".").lower()
        try:
            ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        name = None if ip is not None else host
        return any(entry.matches(name, ip, port) for entry in self.entries)


def _parse_entry(token: str) -> _Entry | None:
    token = token.strip().lower()
    if not token:
        return None
    host, port = token, None
    if token.startswith("["):  # [v6], [v6]:port, [v6/len]
        inner, _, rest = token[1:].partition("]")
        host = inner
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif token.count(":") == 1:
        before, _, after = token.partition(":")
        if after.isdigit():
            host, port = before, int(after)
    try:
        network = ipaddress.ip_network(host, strict=False)
    except ValueError:
        pass
    else:
        return _Entry(None, network, port)
    host = host.removeprefix("*").removeprefix(".").rstrip(".")
    return _Entry(host, None, port) if host else None
