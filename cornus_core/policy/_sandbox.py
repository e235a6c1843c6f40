"""One hardened QuickJS context running one PAC script.

A ``Sandbox`` is not thread-safe: the binding may crash when one runtime is used from two threads,
so each thread (and the isolation worker process) owns its own. Every answer is the JSON text the
prelude built inside the engine; an error the engine raises past the prelude (the time limit's
interrupt, which scripts cannot catch) becomes the same JSON here. Either way, nothing the script
controls is ever converted in Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import _quickjs

from ._prelude import PRELUDE

MEMORY_LIMIT = 32 * 1024 * 1024
STACK_LIMIT = 1024 * 1024
SETUP_TIME_LIMIT_S = 2.0  # building the context and compiling the script; evaluations get the deadline


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one call into the sandbox gave.

    ``kind``: ``ok`` (value is the string returned, or None at compile time), ``null``, ``exception``,
    ``return`` (value: the JavaScript type), ``entry``, ``isolate`` (restricted mode met a regex;
    value: what), ``timeout``, ``memory``, ``stack``, ``internal``; at compile time also ``syntax``
    (``line``), ``load``, ``structure``.
    """

    kind: str
    value: str | None = None
    line: int | None = None
    alerts: tuple[str, ...] = ()
    alerts_dropped: int = 0
    clock_read: bool = False
    dirty: bool = False


def engine_error(exc: BaseException) -> str:
    """The kind of an error that escaped the prelude's own try/catch."""
    text = str(exc)
    if isinstance(exc, _quickjs.StackOverflow) or "stack overflow" in text:
        return "stack"
    if "interrupted" in text:
        return "timeout"
    if "out of memory" in text:
        return "memory"
    return "internal"


def error_json(kind: str, detail: str, alerts: object = (), dropped: object = 0) -> str:
    return json.dumps({"k": kind, "v": detail, "a": alerts, "ad": dropped, "d": True})


def decode(raw: str) -> Outcome:
    """The Outcome in one JSON answer (from this process or the worker)."""
    try:
        data = json.loads(raw)
        value = data.get("v")
        line = data.get("x")
        return Outcome(
            kind=str(data["k"]),
            value=None if value is None else str(value),
            line=line if isinstance(line, int) and not isinstance(line, bool) else None,
            alerts=tuple(str(text) for text in data.get("a") or ()),
            alerts_dropped=int(data.get("ad") or 0),
            clock_read=bool(data.get("c")),
            dirty=bool(data.get("d")),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return Outcome("internal", "the sandbox gave an unreadable answer", dirty=True)


class Sandbox:
    """A QuickJS context with the prelude, memory/stack limits and a CPU-time limit per call."""

    def __init__(self, *, restricted: bool, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.broken = False  # set when the context may hold state it should not: build a new one
        self._context = _quickjs.Context()
        self._context.set_memory_limit(MEMORY_LIMIT)
        self._context.set_max_stack_size(STACK_LIMIT)
        self._context.set_time_limit(SETUP_TIME_LIMIT_S)
        self._dispatch = self._context.eval(PRELUDE)(restricted)
        self._context.set_time_limit(deadline_s)
        self._calls = 0

    def install(self, source: str, now_ms: float) -> str:
        """Compile the script (a generous limit for the parse), then run its top level once."""
        self._context.set_time_limit(SETUP_TIME_LIMIT_S)
        try:
            raw = self._call("install", source)
        finally:
            self._context.set_time_limit(self.deadline_s)
        if decode(raw).kind != "ok":
            return raw
        return self._call("probe", float(now_ms))

    def evaluate(self, url: str, host: str, ip: str | None, now_ms: float) -> str:
        """Call FindProxyForURL(url, host) with the destination IP and the clock for this evaluation."""
        raw = self._call("eval", url, host, ip or "", float(now_ms))
        self._calls += 1
        if self._calls % 512 == 0:
            self._check_memory()
        return raw

    def _call(self, op: str, *args: object) -> str:
        try:
            raw = self._dispatch(op, *args)
        except _quickjs.JSException as exc:
            self.broken = True
            kind = engine_error(exc)
            alerts, dropped = self._alerts_so_far()
            return error_json(kind, {"timeout": "the deadline passed"}.get(kind, kind), alerts, dropped)
        except (UnicodeError, TypeError, ValueError) as exc:  # what the binding raises converting values
            self.broken = True
            return error_json("internal", type(exc).__name__)
        if not isinstance(raw, str):
            self.broken = True
            return error_json("internal", "the sandbox gave no answer")
        if raw.endswith('"d":true}'):
            self.broken = True
        return raw

    def _alerts_so_far(self) -> tuple[object, object]:
        """What the interrupted evaluation had alerted (the prelude built the JSON; nothing else runs)."""
        try:
            data = json.loads(self._dispatch("alerts"))
            return data["a"], data["ad"]
        except Exception:  # a context that cannot even answer this has nothing to show
            return (), 0

    def _check_memory(self) -> None:
        """Jobs a script queued (promises) are never run; rebuild before they fill the memory limit."""
        self._context.gc()
        if self._context.memory().get("malloc_size", 0) > MEMORY_LIMIT // 2:
            self.broken = True
