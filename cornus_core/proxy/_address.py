"""Destination host and port syntax shared by the SOCKS5 and HTTP parsers.

Names are validated strictly because they travel on in wire header lines and into the policy:
only DNS characters pass, and a name whose last label is numeric (``127.1``, ``010.0.0.1``,
``0x7f.1``) is refused, since a resolver would read it as an IP literal that CIDR rules never saw.
"""

from __future__ import annotations

import ipaddress
import re

_LABEL = re.compile(r"[A-Za-z0-9_-]{1,63}")
_NUMERIC_LABEL = re.compile(r"(?:[0-9]+|0[xX][0-9A-Fa-f]*)")


def classify_host(text: str) -> tuple[str | None, str | None]:
    """Return ``(name, None)`` for a DNS name or ``(None, ip)`` for an IP literal.

    Raises ``ValueError`` saying what is wrong with the text.
    """
    if not text:
        raise ValueError("empty host")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
            raise ValueError(f"IPv6 scope id in {text!r} is not allowed")
        return None, str(ip)
    name = text[:-1] if text.endswith(".") else text
    if len(name) > 253:
        raise ValueError(f"host name of {len(name)} characters is longer than 253")
    labels = name.split(".")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise ValueError(f"host {text!r} has an invalid label {label!r}")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        raise ValueError(f"host {text!r} looks numeric but is not an IP address")
    return name.lower(), None


def parse_port(text: str) -> int:
    """A decimal port 1..65535; ``ValueError`` otherwise."""
    if not text.isascii() or not text.isdigit() or len(text) > 5 or not 0 < int(text) < 65536:
        raise ValueError(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def split_authority(text: str, default_port: int | None) -> tuple[str, int]:
    """Split ``host:port`` / ``[v6]:port`` / ``host`` (when a default port exists)."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"unterminated '[' in {text!r}")
        host, rest = text[1:end], text[end + 1 :]
        if ":" not in host:
            raise ValueError(f"brackets around a non-IPv6 host in {text!r}")
        if rest and not rest.startswith(":"):
            raise ValueError(f"unexpected {rest!r} after ']' in {text!r}")
        port_text = rest[1:] if rest else None
    else:
        host, sep, port_text_or_empty = text.rpartition(":")
        if not sep:
            host, port_text = text, None
        elif ":" in host:
            raise ValueError(f"IPv6 host in {text!r} must be in brackets")
        else:
            port_text = port_text_or_empty
    if port_text is None:
        if default_port is None:
            raise ValueError(f"missing port in {text!r}")
        return host, default_port
    return host, parse_port(port_text)


def host_for_url(host: str) -> str:
    """The host as it appears in a URL or authority: IPv6 literals in brackets."""
    return f"[{host}]" if ":" in host else host


def authority(host: str, port: int) -> str:
    return f"{host_for_url(host)}:{port}"
