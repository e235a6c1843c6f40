"""What each tagged stream of a session is for, and the egress request every hop reads.

Caller -> server:      C control (spec as one JSON line, then events back as JSON lines)
Server -> caller:      e egress, L mount, k credential
Caretaker -> server:   E egress, M mount, K credential, T telemetry (JSON-line events)
Server -> caretaker:   P policy (the deployment's egress policy as one JSON line, after a live update)

Control actions from the caller, one JSON object per line: {"action": "down"} and
{"action": "policy", "egress": {default, rules, script}}.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cornus_core.policy import Destination

TAG_CONTROL = "C"
TAG_EGRESS = "E"
TAG_CALLER_EGRESS = "e"
TAG_MOUNT = "M"
TAG_CALLER_MOUNT = "L"
TAG_CREDENTIAL = "K"
TAG_CALLER_CREDENTIAL = "k"
TAG_TELEMETRY = "T"
TAG_POLICY = "P"


def mount_name(index: int) -> str:
    """The name of the spec's `index`-th client-local mount on M/L streams."""
    return f"m{index}"


class BadRequest(ValueError):
    """A stream header that does not describe a valid request; the message names the field."""


def split_authority(text: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` -> (host, port); raises BadRequest naming the problem."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise BadRequest(f"dest {text!r} is not host:port")
    if host.startswith("["):
        if not host.endswith("]"):
            raise BadRequest(f"dest {text!r} has an unterminated bracket")
        host = host[1:-1]
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadRequest(f"dest {text!r} has a bad port")
    return host, int(port_text)


def join_authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class EgressRequest:
    """One relayed connection as the hops describe it to each other.

    `route` is what the sending hop decided; a receiving hop re-evaluates its own policy and never
    trusts it. `t_ms` is the connection's time, stamped by the first hop, so time-dependent PAC
    scripts decide the same at every hop.
    """

    conn: str
    host: str  # the name when known, else the IP
    port: int
    ip: str | None = None
    url: str | None = None
    t_ms: int = 0
    route: str = ""
    version: str = ""

    @property
    def destination(self) -> Destination:
        name = None if self.ip == self.host else self.host
        return Destination(host=name, ip=self.ip, port=self.port, url=self.url)

    @property
    def authority(self) -> str:
        return join_authority(self.host, self.port)

    def to_fields(self) -> dict[str, str]:
        fields = {"conn": self.conn, "dest": self.authority, "t": str(self.t_ms)}
        for key, value in (("ip", self.ip), ("url", self.url), ("route", self.route), ("policy", self.version)):
            if value:
                fields[key] = value
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> EgressRequest:
        for required in ("conn", "dest"):
            if not fields.get(required):
                raise BadRequest(f"egress stream header lacks {required!r}")
        host, port = split_authority(fields["dest"])
        t_text = fields.get("t", "0")
        if not t_text.isdigit():
            raise BadRequest(f"egress stream header field 't' is not epoch milliseconds: {t_text!r}")
        return cls(
            conn=fields["conn"], host=host, port=port, ip=fields.get("ip") or None,
            url=fields.get("url") or None, t_ms=int(t_text), route=fields.get("route", ""),
            version=fields.get("policy", ""),
        )
