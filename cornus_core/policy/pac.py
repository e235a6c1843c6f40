"""PAC scripts: compile once, evaluate per connection in a sandbox with a deadline, map the answer to a route.

Two evaluators run the same hardened sandbox (see ``_prelude``):

* **in-process** — one QuickJS context per thread (the binding must not share a runtime between
  threads), about 20 µs per evaluation. The engine's CPU-time limit interrupts loops; memory and
  stack limits stop blow-ups. Regex execution is a tripwire here, because a backtracking regex is
  never interrupted: it moves the script to the isolated evaluator for good.
* **isolated** — a worker process per thread (``_worker``) that is killed and replaced when the
  wall-clock deadline passes. Scripts that use regexes (seen by a lexical scan, or by the tripwire)
  run here, and every script when ``isolation="process"``. That is the mode for scripts written by
  someone else: inside the process a hostile script can still hold a thread in a long native call
  (a quadratic ``indexOf`` on megabyte strings, say); only a process boundary bounds everything.
  The replacement worker starts at once; the next isolated evaluation in that thread waits for it
  to be ready (typically 0.1-0.2 s, outside the deadline, bounded by a startup timeout).

Evaluations are synchronous and release the GIL while the engine runs (in-process) or while waiting
for the worker; from asyncio, call them directly for in-process scripts or through a thread.

Every failure — syntax, exception, timeout, memory, a non-string answer — is a :class:`PacError`,
and a policy turns it into ``deny``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
import time
from dataclasses import dataclass
from typing import Literal

from ._sandbox import Outcome, Sandbox, decode
from ._scan import uses_regex
from ._worker import worker_for_thread
from .errors import PacError
from .routes import Route

Isolation = Literal["auto", "process"]

MAX_HOST_LENGTH = 1024
MAX_URL_LENGTH = 8192
DEFAULT_DEADLINE_MS = 50.0

_PROXY_SCHEMES = frozenset({"PROXY", "HTTP", "HTTPS", "SOCKS", "SOCKS4", "SOCKS5"})
_KEYWORD_ROUTES = {
    "DIRECT": Route.CLUSTER,
    "DENY": Route.DENY,
    "BLOCK": Route.DENY,
    "CLIENT": Route.CLIENT,
    "CLUSTER": Route.CLUSTER,
    "GATEWAY": Route.GATEWAY,
}
_NAMED_PROXIES = {"client": Route.CLIENT, "gateway": Route.GATEWAY, "cluster": Route.CLUSTER}


def pac_return_to_route(ret: str | None, default: Route) -> Route:
    """The route for what ``FindProxyForURL`` returned (only its first ``;``-separated directive counts).

    ``DIRECT`` → cluster; ``DENY``/``BLOCK`` → deny; ``CLIENT``/``CLUSTER``/``GATEWAY`` → that route;
    ``PROXY|HTTP|HTTPS|SOCKS|SOCKS4|SOCKS5`` followed by ``client``/``gateway``/``cluster`` → that
    route, followed by a real proxy (``host:port``) → client, whose session holds the real proxy;
    empty, null and anything unrecognised → ``default``. Keywords are case-insensitive.
    """
    if not ret:
        return default
    words = ret.split(";", 1)[0].split()
    if not words:
        return default
    keyword = words[0].upper()
    if len(words) == 1:
        return _KEYWORD_ROUTES.get(keyword, default)
    if len(words) == 2 and keyword in _PROXY_SCHEMES:
        return _NAMED_PROXIES.get(words[1].lower(), Route.CLIENT)
    return default


@dataclass(frozen=True, slots=True)
class PacResult:
    """One evaluation: the raw return (None for null/undefined), the alerts, and whether the script
    read the clock (then the answer holds only for that time)."""

    value: str | None
    alerts: tuple[str, ...] = ()
    clock_read: bool = False


class PacScript:
    """A compiled PAC script; evaluate it with :meth:`find_proxy` from any thread.

    ``now_ms`` pins the clock the date/time builtins read (else each evaluation reads the real
    clock, unless it passes its own ``now_ms``); ``deadline_ms`` bounds each evaluation.
    Compile errors raise :class:`PacError` (``kind`` ``syntax`` with line and column, ``entry``,
    ``load``, ``structure``, ``input``).
    """

    def __init__(
        self,
        source: str,
        *,
        now_ms: int | None = None,
        deadline_ms: float = DEFAULT_DEADLINE_MS,
        isolation: Isolation = "auto",
    ) -> None:
        if not isinstance(source, str):
            raise PacError("input", f"a PAC script must be text, not {type(source).__name__}")
        try:
            source.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PacError("input", f"the script contains a lone surrogate at offset {exc.start}") from None
        nul = source.find("\0")
        if nul >= 0:
            line = source.count("\n", 0, nul) + 1
            column = nul - (source.rfind("\n", 0, nul) + 1) + 1
            raise PacError("input", "the script contains a NUL character", line=line, column=column)
        if not deadline_ms > 0:
            raise PacError("input", f"the deadline must be positive, not {deadline_ms!r}")
        if isolation not in ("auto", "process"):
            raise PacError("input", f"isolation must be 'auto' or 'process', not {isolation!r}")
        self.source = source
        self.now_ms = now_ms
        self.deadline_ms = float(deadline_ms)
        self.alerts: tuple[str, ...] = ()  # the alerts of the most recent evaluation, for a UI to show
        self._deadline_s = self.deadline_ms / 1000.0
        self._id = hashlib.sha256(
            f"{self.deadline_ms}\0{source}".encode("utf-8", "surrogatepass")
        ).hexdigest()[:24]
        self._local = threading.local()
        self._isolated = isolation == "process" or uses_regex(source)
        compile_now = float(now_ms) if now_ms is not None else time.time() * 1000.0
        if not self._isolated:
            sandbox = Sandbox(restricted=True, deadline_s=self._deadline_s)
            outcome = decode(sandbox.install(source, compile_now))
            if outcome.kind == "isolate":
                self._isolated = True
            else:
                self._check_compiled(outcome)
                if not sandbox.broken:
                    self._local.sandbox = sandbox
        if self._isolated:
            failure = worker_for_thread().load(self._id, source, self._deadline_s, compile_now)
            if failure is not None:
                self._check_compiled(decode(failure))

    @property
    def isolated(self) -> bool:
        """Whether evaluations run in the killable worker process."""
        return self._isolated

    def find_proxy(
        self, url: str, host: str, dest_ip: str | None = None, *, now_ms: int | None = None
    ) -> str | None:
        """``FindProxyForURL(url, host)``'s raw return (None for null/undefined); PacError on any failure."""
        return self.evaluate(url, host, dest_ip, now_ms=now_ms).value

    def evaluate(
        self, url: str, host: str, dest_ip: str | None = None, *, now_ms: int | None = None
    ) -> PacResult:
        """Like :meth:`find_proxy`, with the alerts and whether the clock was read."""
        ip = _check_inputs(url, host, dest_ip)
        if now_ms is None:
            now_ms = self.now_ms
        now = float(now_ms) if now_ms is not None else time.time() * 1000.0
        outcome = None if self._isolated else self._evaluate_here(url, host, ip, now)
        if outcome is None or outcome.kind == "isolate":
            self._isolated = True
            raw = worker_for_thread().evaluate(self._id, self.source, self._deadline_s, url, host, ip, now)
            outcome = decode(raw)
        self.alerts = outcome.alerts
        if outcome.kind == "ok":
            return PacResult(outcome.value, outcome.alerts, outcome.clock_read)
        if outcome.kind == "null":
            return PacResult(None, outcome.alerts, outcome.clock_read)
        raise self._evaluation_error(outcome)

    def _evaluate_here(self, url: str, host: str, ip: str | None, now: float) -> Outcome:
        sandbox: Sandbox | None = getattr(self._local, "sandbox", None)
        if sandbox is None:
            sandbox = Sandbox(restricted=True, deadline_s=self._deadline_s)
            installed = decode(sandbox.install(self.source, now))
            if installed.kind != "ok":
                return installed
            self._local.sandbox = sandbox
        outcome = decode(sandbox.evaluate(url, host, ip, now))
        if sandbox.broken:
            self._local.sandbox = None  # build a clean context for the next evaluation
        return outcome

    def _check_compiled(self, outcome: Outcome) -> None:
        if outcome.kind == "ok":
            return
        if outcome.kind == "syntax":
            line, column, message = _locate_syntax_error(self.source, outcome.line, outcome.value or "")
            raise PacError("syntax", f"syntax error: {message}", line=line, column=column)
        messages = {
            "entry": "the script defines no function FindProxyForURL",
            "load": f"the script's top level threw {outcome.value}",
            "structure": "the script is not one self-contained program (it closes a brace it did not open)",
            "timeout": f"the script's top level did not finish within {self.deadline_ms:g} ms",
            "memory": "the script's top level ran out of memory",
            "stack": "the script's top level overflowed the stack",
            "worker": f"the isolated evaluator failed: {outcome.value}",
        }
        kind = outcome.kind if outcome.kind in messages else "load"
        raise PacError(
            kind,
            messages.get(outcome.kind, f"the script failed to load: {outcome.value}"),
            alerts=outcome.alerts,
        )

    def _evaluation_error(self, outcome: Outcome) -> PacError:
        kind = outcome.kind
        detail = outcome.value
        if kind == "exception" and detail is not None:  # the engine's own limits, as the script saw them
            if detail.startswith("InternalError: stack overflow"):
                kind = "stack"
            elif detail.startswith("InternalError: out of memory"):
                kind = "memory"
        messages = {
            "exception": f"FindProxyForURL threw {detail}",
            "return": f"FindProxyForURL returned {detail}, not a string or null",
            "timeout": f"no answer within the {self.deadline_ms:g} ms deadline",
            "memory": "the evaluation ran out of memory",
            "stack": "the evaluation overflowed the stack",
            "entry": "FindProxyForURL is not a function",
            "worker": f"the isolated evaluator failed: {detail}",
        }
        if kind not in messages:
            kind = "internal"
        return PacError(kind, messages.get(kind, f"the sandbox failed: {detail}"), alerts=outcome.alerts)


def _check_inputs(url: str, host: str, dest_ip: str | None) -> str | None:
    """Refuse what the sandbox cannot take faithfully; the canonical text of the destination IP."""
    for name, value, limit in (("url", url, MAX_URL_LENGTH), ("host", host, MAX_HOST_LENGTH)):
        if not isinstance(value, str):
            raise PacError("input", f"{name} must be text, not {type(value).__name__}")
        if len(value) > limit:
            raise PacError("input", f"{name} is longer than {limit} characters")
        if "\0" in value:
            raise PacError("input", f"{name} contains a NUL character")  # QuickJS would cut the string there
        if not value.isprintable() and any(ord(c) < 32 or 0xD800 <= ord(c) < 0xE000 for c in value):
            raise PacError("input", f"{name} contains a control character or a lone surrogate")
    if dest_ip is None or dest_ip == "":
        return None
    try:
        address = ipaddress.ip_address(dest_ip.strip("[]") if isinstance(dest_ip, str) else dest_ip)
    except ValueError:
        raise PacError("input", f"dest_ip {dest_ip!r} is not an IP address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _locate_syntax_error(source: str, line: int | None, message: str) -> tuple[int | None, int | None, str]:
    """The engine names a line and the offending token; the column is where that token first appears."""
    lines = source.split("\n")
    if line is None:
        return None, None, message
    if line > len(lines) or line < 1:
        last = lines[-1] if lines else ""
        return (
            len(lines),
            len(last) + 1,
            f"unexpected end of the script: an unclosed '{{', '(', '[', string or comment? ({message})",
        )
    token = ""
    if message.endswith("'") and ": '" in message:
        token = message[message.rindex(": '") + 3 : -1]
    column = lines[line - 1].find(token) + 1 if token else 0
    return line, column or None, message
