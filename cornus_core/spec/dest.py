"""Destinations written on the command line, for previewing how a policy routes them.

Grammar (the port defaults to 443, the port most egress is about):

* ``host`` or ``host:port`` — a name; its IP is unknown, so CIDR rules cannot match it;
* ``IP`` or ``IP:port`` — an IPv4 literal;
* ``[v6]`` or ``[v6]:port`` — an IPv6 literal; a bare IPv6 literal (two or more colons) has no port;
* ``host:port@ip`` or ``host@ip`` — a name whose IP is known (as after the app resolved it).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass

from cornus_core.policy import Destination

from .errors import SpecError

DEFAULT_PORT = 443

# Letters, digits, '-', '_' and dots between labels; one trailing dot allowed.
_HOSTNAME = re.compile(r"(?=.{1,254}\Z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_-]{1,63})*\.?")


@dataclass(frozen=True)
class DestArg:
    """A parsed destination argument; ``text`` is what was written.

    ``host`` is the name (None for an IP literal: only the address is known), ``ip`` the address
    when known.
    """

    text: str
    host: str | None
    ip: str | None
    port: int

    def destination(self) -> Destination:
        return Destination(self.host, self.ip, self.port)


def parse_dest(text: str, *, default_port: int = DEFAULT_PORT) -> DestArg:
    """Parse one destination argument; a bad one raises SpecError naming it."""
    source = f"destination {shlex.quote(text)}"
    target, at, ip_text = text.rpartition("@") if "@" in text else (text, "", "")
    known_ip = _ip(ip_text.removeprefix("[").removesuffix("]"), source) if at else None
    host, port_text = _split_host_port(target, source)
    if not host:
        raise SpecError(source, "the host is empty")
    port = _port(port_text, source) if port_text is not None else default_port
    literal = _literal(host)
    if literal is not None:
        if known_ip is not None and known_ip != literal:
            raise SpecError(source, f"the IP literal {literal} and @{known_ip} disagree")
        return DestArg(text, None, literal, port)
    if host.startswith("[") or ":" in host:
        raise SpecError(source, f"{host!r} is not an IP address")
    if not _HOSTNAME.fullmatch(host):
        raise SpecError(source, f"{host!r} is not a host name (letters, digits, '-', '_' and dots)")
    return DestArg(text, host, known_ip, port)


def _split_host_port(target: str, source: str) -> tuple[str, str | None]:
    if not target:
        raise SpecError(source, "the host is empty")
    if target.startswith("["):
        inside, close, rest = target[1:].partition("]")
        if not close:
            raise SpecError(source, "unterminated '[' (write [IPv6]:PORT)")
        if rest and not rest.startswith(":"):
            raise SpecError(source, f"unexpected {rest!r} after ']' (write [IPv6]:PORT)")
        if _literal(inside) is None or ":" not in inside:
            raise SpecError(source, f"{inside!r} in brackets is not an IPv6 address")
        return inside, rest[1:] if rest else None
    if target.count(":") >= 2:
        return target, None  # a bare IPv6 literal, as in the rule grammar
    host, colon, port = target.partition(":")
    return host, port if colon else None


def _port(text: str, source: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 65535:
        raise SpecError(source, f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def _literal(text: str) -> str | None:
    """The canonical spelling of an IP literal, or None when ``text`` is not one."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _ip(text: str, source: str) -> str:
    literal = _literal(text)
    if literal is None:
        raise SpecError(source, f"{text!r} after '@' is not an IP address")
    return literal
