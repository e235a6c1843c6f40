"""Compile an egress policy (default, ordered rules, optional PAC script) and route destinations with it.

One function compiles and one method decides, so the three hops agree: :func:`compile_policy` turns
the spec's egress block into a :class:`Policy` whose ``version`` names the spec it came from, and
:meth:`Policy.route` gives a :class:`Decision` for a destination. A script, when present, supersedes
the rules (which are still checked). Decisions are cached per destination in a bounded LRU owned by
the policy, so a new version never sees an old entry; a decision that read the clock is reused only
for the same pinned time.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import PacError, PolicyError
from .pac import MAX_HOST_LENGTH, MAX_URL_LENGTH, Isolation, PacScript, pac_return_to_route
from .patterns import Pattern, Target, parse_ip, parse_pattern
from .routes import DEFAULT_ROUTE, Decision, Destination, Route

DEFAULT_CACHE_SIZE = 4096
# Failures that say more about the machine's load than about the destination: never cached.
_TRANSIENT_PAC_ERRORS = frozenset({"timeout", "worker", "internal"})
_ANY_TIME = object()
_SPACE_OR_CONTROL = re.compile(r"[\x00-\x20\x7f]")


class RuleSource(Protocol):
    """One rule as the spec holds it."""

    @property
    def pattern(self) -> str: ...

    @property
    def route(self) -> str: ...


class EgressPolicySource(Protocol):
    """What :func:`compile_policy` reads: the spec's egress block, or anything shaped like it."""

    @property
    def default(self) -> str | None: ...

    @property
    def rules(self) -> Sequence[RuleSource]: ...

    @property
    def script(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Rule:
    """A compiled rule; ``index`` is its position in the spec's list (0-based, as in ``rules[2]``)."""

    index: int
    pattern: Pattern
    route: Route

    @property
    def reason(self) -> str:
        return f"rule {self.index} {self.pattern.text.strip()!r}"


class Policy:
    """A compiled egress policy. Thread-safe; :meth:`route` is the one place that decides."""

    def __init__(
        self,
        *,
        version: str,
        default: Route,
        rules: tuple[Rule, ...],
        script: PacScript | None,
        now_ms: int | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self.version = version
        self.default = default
        self.rules = rules
        self.script = script
        self.now_ms = now_ms
        self._cache = _LRU(cache_size)

    def route(self, dest: Destination, *, now_ms: int | None = None) -> Decision:
        """The route for one destination. ``now_ms`` is the connection's stamped time (the first hop's
        clock, carried to the others), for time-dependent scripts; it defaults to the policy's."""
        now = now_ms if now_ms is not None else self.now_ms
        # Rules see only host, address and port; a script also sees the url (so the proto).
        key = (
            (dest.host, dest.ip, dest.port)
            if self.script is None
            else (dest.host, dest.ip, dest.port, dest.proto, dest.url)
        )
        cached = self._cache.get(key)
        if cached is not None and (cached[1] is _ANY_TIME or (now is not None and cached[1] == now)):
            return cached[0]
        decision, time_dependent, cacheable = self._decide(dest, now)
        if cacheable and not (time_dependent and now is None):
            self._cache.put(key, (decision, now if time_dependent else _ANY_TIME))
        return decision

    def could_route_to_client(self) -> bool:
        """Whether anything could go to ``client`` (a detached deployment must not allow that)."""
        return (
            self.default is Route.CLIENT
            or self.script is not None
            or any(rule.route is Route.CLIENT for rule in self.rules)
        )

    def relays_name(self, name: str) -> bool:
        """Whether a connection to ``name``, its address unknown, is relayed (``client`` or ``gateway``)
        on some port: 80, 443 or a port a rule names. The pod's resolver answers for such a name when the
        cluster cannot resolve it, so that the connection reaches the relay at all."""
        ports = {80, 443} | {rule.pattern.port for rule in self.rules if rule.pattern.port is not None}
        for port in sorted(ports):
            url = {80: f"http://{name}/", 443: f"https://{name}/"}.get(port)
            decision = self.route(Destination(host=name, ip=None, port=port, url=url))
            if decision.route in (Route.CLIENT, Route.GATEWAY):
                return True
        return False

    def cache_clear(self) -> None:
        self._cache.clear()

    def __repr__(self) -> str:
        body = "script" if self.script is not None else f"{len(self.rules)} rules"
        return f"<Policy {self.version} default={self.default.value} {body}>"

    def _decide(self, dest: Destination, now: int | None) -> tuple[Decision, bool, bool]:
        problem = _invalid(dest)
        if problem is not None:
            return self._decision(Route.DENY, f"invalid destination: {problem}"), False, True
        if self.script is None:
            target = Target.of(dest)
            for rule in self.rules:
                if rule.pattern.matches_target(target):
                    return self._decision(rule.route, rule.reason), False, True
            return self._decision(self.default, "default"), False, True
        try:
            result = self.script.evaluate(_pac_url(dest), dest.pac_host(), dest.ip, now_ms=now)
        except PacError as exc:
            decision = self._decision(Route.DENY, f"pac error: {exc.kind}", exc.alerts)
            return decision, False, exc.kind not in _TRANSIENT_PAC_ERRORS
        route = pac_return_to_route(result.value, self.default)
        if result.value is None:
            reason = "pac null"
        else:
            shown = result.value if len(result.value) <= 120 else result.value[:117] + "..."
            reason = f"pac {json.dumps(shown, ensure_ascii=False)}"
        return self._decision(route, reason, result.alerts), result.clock_read, True

    def _decision(self, route: Route, reason: str, alerts: tuple[str, ...] = ()) -> Decision:
        return Decision(route, reason, self.version, alerts)


def compile_policy(
    spec: EgressPolicySource | Mapping[str, Any],
    *,
    pac_deadline_ms: float = 50,
    now_ms: int | None = None,
    pac_isolation: Isolation = "auto",
    cache_size: int = DEFAULT_CACHE_SIZE,
) -> Policy:
    """Compile the spec's egress block; any error raises :class:`PolicyError` naming the rule or script line.

    ``now_ms`` pins the clock a script's date/time builtins read (unless ``route`` is given one);
    ``pac_isolation="process"`` evaluates every script in a killable worker process (for scripts
    written by someone else; see :mod:`cornus_core.policy.pac`).
    """
    default_text = _field(spec, "default")
    rules_value = _field(spec, "rules")
    script = _field(spec, "script")
    default = _parse_route(default_text, "default") if default_text not in (None, "") else DEFAULT_ROUTE
    if rules_value is None:
        rules_value = ()
    if isinstance(rules_value, (str, bytes)) or not isinstance(rules_value, Sequence):
        raise PolicyError(f"rules must be a list, not {type(rules_value).__name__}", source="rules")
    rules = tuple(_compile_rule(index, item) for index, item in enumerate(rules_value))
    if script is not None and not isinstance(script, str):
        raise PolicyError(f"the script must be text, not {type(script).__name__}", source="script")
    if script is not None and not script.strip():
        script = None
    version = _version(default, rules, script)
    compiled = None
    if script is not None:
        try:
            compiled = PacScript(script, now_ms=now_ms, deadline_ms=pac_deadline_ms, isolation=pac_isolation)
        except PacError as exc:
            raise PolicyError(exc.message, source="script", line=exc.line, column=exc.column) from exc
    return Policy(
        version=version, default=default, rules=rules, script=compiled, now_ms=now_ms, cache_size=cache_size
    )


def _field(spec: object, name: str) -> Any:
    if isinstance(spec, Mapping):
        return spec.get(name)
    return getattr(spec, name, None)


def _parse_route(value: object, source: str, **context: Any) -> Route:
    if not isinstance(value, str):
        raise PolicyError(f"a route must be text, not {type(value).__name__}", source=source, **context)
    try:
        return Route.parse(value)
    except ValueError as exc:
        raise PolicyError(str(exc), source=source, **context) from None


def _compile_rule(index: int, item: object) -> Rule:
    source = f"rules[{index}]"
    pattern_text = _field(item, "pattern")
    route_text = _field(item, "route")
    if not isinstance(pattern_text, str):
        raise PolicyError("a rule needs a pattern (text)", source=source, rule_index=index)
    try:
        pattern = parse_pattern(pattern_text)
    except PolicyError as exc:
        raise PolicyError(
            f"pattern {exc.message}", source=source, rule_index=index, pattern=pattern_text
        ) from None
    route = _parse_route(route_text, source, rule_index=index, pattern=pattern_text)
    return Rule(index, pattern, route)


def _version(default: Route, rules: tuple[Rule, ...], script: str | None) -> str:
    normalised = {
        "default": default.value,
        "rules": [[rule.pattern.text.strip(), rule.route.value] for rule in rules],
        "script": script,
    }
    text = json.dumps(normalised, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _invalid(dest: Destination) -> str | None:
    """Why this destination cannot be routed (a bug upstream; it fails closed), or None."""
    if isinstance(dest.port, bool) or not isinstance(dest.port, int) or not 0 < dest.port < 65536:
        return f"port {dest.port!r} is not 1..65535"
    if dest.ip is not None and parse_ip(dest.ip) is None:
        return f"ip {dest.ip!r} is not an IP address"
    if dest.host is not None and (not isinstance(dest.host, str) or len(dest.host) > MAX_HOST_LENGTH):
        return "host is not a host name"
    if dest.host is not None and _SPACE_OR_CONTROL.search(dest.host):
        return f"host {dest.host!r} contains a space or control character"
    return None


def _pac_url(dest: Destination) -> str:
    """The PAC url; one too long for the sandbox is cut to its origin (``scheme://authority/``)."""
    url = dest.pac_url()
    if len(url) <= MAX_URL_LENGTH:
        return url
    scheme_end = url.find("://")
    path = url.find("/", scheme_end + 3) if scheme_end >= 0 else -1
    origin = url[: path + 1] if path >= 0 else ""
    return (
        origin
        if 0 < len(origin) <= MAX_URL_LENGTH
        else Destination(dest.host, dest.ip, dest.port, dest.proto).pac_url()
    )


class _LRU:
    """A small thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._size = max(0, size)
        self._data: OrderedDict[tuple[object, ...], tuple[Decision, object]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[object, ...]) -> tuple[Decision, object] | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                self._data.move_to_end(key)
            return entry

    def put(self, key: tuple[object, ...], entry: tuple[Decision, object]) -> None:
        if self._size == 0:
            return
        with self._lock:
            self._data[key] = entry
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
