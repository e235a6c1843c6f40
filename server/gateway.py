"""The gateway route: the server itself dials, only with the operator's opt-in and within the
operator's ceiling policy."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from cornus_core.netguard import GATEWAY_REFUSED, parse_ip, refusal
from cornus_core.policy import Destination, Policy, PolicyError, Route, compile_policy
from cornus_core.spec import EgressSpec
from cornus_core.wire import Verdict, VerdictKind

DIAL_TIMEOUT = 10.0


class GatewayConfigError(Exception):
    """The operator's gateway settings are unusable; the server refuses to start."""


@dataclass(frozen=True)
class Gateway:
    enabled: bool
    ceiling: Policy | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Gateway:
        env = os.environ if env is None else env
        enabled = env.get("CORNUS_EGRESS_GATEWAY", "").strip().lower() in ("1", "true", "yes", "on")
        raw = env.get("CORNUS_EGRESS_POLICY", "").strip()
        if not raw:
            return cls(enabled)
        try:
            spec = EgressSpec.model_validate(json.loads(raw))
            return cls(enabled, compile_policy(spec))
        except (ValueError, PolicyError) as exc:
            raise GatewayConfigError(f"CORNUS_EGRESS_POLICY is not a valid egress policy: {exc}") from None

    def check(self, dest: Destination, t_ms: int) -> tuple[Verdict | None, bool]:
        """(a refusal or None, whether the ceiling names `dest` explicitly by a rule)."""
        if not self.enabled:
            return Verdict(VerdictKind.DENY, "gateway route not enabled by the operator (CORNUS_EGRESS_GATEWAY)"), False
        explicit = False
        if self.ceiling is not None:
            decision = self.ceiling.route(dest, now_ms=t_ms)
            if decision.route is Route.DENY:
                return Verdict(VerdictKind.DENY, f"operator ceiling: {decision.reason}"), False
            explicit = decision.reason.startswith("rule ")
        return None, explicit

    async def dial(
        self, dest: Destination, *, allow_internal: bool
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | Verdict:
        """Dial `dest`, refusing loopback, link-local and metadata addresses unless allowed."""
        name = dest.host or dest.ip
        assert name is not None
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(name, dest.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            return Verdict(VerdictKind.REFUSED, f"cannot resolve {name}: {exc.strerror or exc}")
        target = str(infos[0][4][0])
        ip = parse_ip(target)
        if ip is not None and not allow_internal and (why := refusal(ip, GATEWAY_REFUSED)):
            return Verdict(VerdictKind.DENY, f"gateway does not dial {why}")
        try:
            return await asyncio.wait_for(asyncio.open_connection(target, dest.port), DIAL_TIMEOUT)
        except TimeoutError:
            return Verdict(VerdictKind.TIMEOUT, f"connect to {name}:{dest.port} timed out")
        except OSError as exc:
            return Verdict(VerdictKind.REFUSED, f"connect to {name}:{dest.port}: {exc.strerror or exc}")
