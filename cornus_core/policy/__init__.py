"""The egress policy engine: routes, rule patterns, the PAC sandbox, and the compiled policy.

Every hop (caretaker, server, caller) compiles the same spec with :func:`compile_policy` and asks
:meth:`Policy.route` for each connection's :class:`Decision`, so they agree on the route and on the
policy ``version`` that chose it. Rules are ordered patterns (see :mod:`.patterns`); a PAC script
(see :mod:`.pac`), when present, supersedes them and runs in a sandbox with a deadline; every error
fails closed to ``deny``.
"""

from __future__ import annotations

from .errors import PacError, PolicyError
from .pac import Isolation, PacResult, PacScript, pac_return_to_route
from .patterns import Pattern, parse_pattern
from .policy import EgressPolicySource, Policy, Rule, RuleSource, compile_policy
from .routes import DEFAULT_ROUTE, Decision, Destination, Route

__all__ = [
    "DEFAULT_ROUTE",
    "Decision",
    "Destination",
    "EgressPolicySource",
    "Isolation",
    "PacError",
    "PacResult",
    "PacScript",
    "Pattern",
    "Policy",
    "PolicyError",
    "Route",
    "Rule",
    "RuleSource",
    "compile_policy",
    "pac_return_to_route",
    "parse_pattern",
]
