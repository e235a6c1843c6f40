"""Routes, destinations and decisions: the values the policy engine takes and gives."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Route(StrEnum):
    """Where one egress connection leaves from."""

    CLIENT = "client"  # relayed to the caller's network (needs a live session)
    GATEWAY = "gateway"  # relayed to the server, the durable egress node
    CLUSTER = "cluster"  # directly from the pod's own network
    DENY = "deny"  # refused

    @classmethod
    def parse(cls, text: str) -> Route:
        """A route from its name, case-insensitively; ValueError names the bad value."""
        try:
            return cls(text.strip().lower())
        except (ValueError, AttributeError):
            names = ", ".join(route.value for route in cls)
            raise ValueError(f"unknown route {text!r} (expected one of {names})") from None


DEFAULT_ROUTE = Route.CLUSTER


@dataclass(frozen=True, slots=True)
class Destination:
    """One connection's destination as a hop knows it.

    ``host`` is the name the app asked for (None when only the address is known), ``ip`` the
    address (None when not known yet; names are never resolved for policy). ``url`` is a better
    PAC ``url`` argument when one is known (an absolute-form HTTP request, ``https://HOST/`` for a
    CONNECT to 443); otherwise the PAC sees ``tcp://HOST:PORT/``.
    """

    host: str | None
    ip: str | None
    port: int
    proto: str = "tcp"
    url: str | None = None

    def pac_host(self) -> str:
        """The PAC ``host`` argument: the name, or the address when only that is known."""
        return self.host or self.ip or ""

    def pac_url(self) -> str:
        """The PAC ``url`` argument: ``url`` when known, else ``tcp://HOST:PORT/`` (IPv6 in brackets)."""
        if self.url:
            return self.url
        host = self.pac_host()
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{self.proto or 'tcp'}://{host}:{self.port}/"


@dataclass(frozen=True, slots=True)
class Decision:
    """The route for one destination, why (``rule 2 '*.corp.example'``, ``pac "PROXY client"``,
    ``default``, ``pac error: timeout``) and the version of the policy that decided it.

    ``alerts`` are the strings a PAC script passed to ``alert()`` while deciding.
    """

    route: Route
    reason: str
    version: str
    alerts: tuple[str, ...] = ()
