"""The PAC sandbox: compile errors, escape attempts, limits, isolation, threads.

Every failure must end in a PacError (a policy turns that into deny), leave the sandbox clean for
the next evaluation, and keep the process responsive.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cornus_core.policy import PacError, PacScript


def script(body: str, **options: object) -> PacScript:
    return PacScript("function FindProxyForURL(url, host) {\n" + body + "\n}\n", **options)  # type: ignore[arg-type]


def fails(pac: PacScript, host: str = "h.example", ip: str | None = None) -> PacError:
    with pytest.raises(PacError) as caught:
        pac.find_proxy(f"tcp://{host}:443/", host, ip)
    return caught.value


# ---- compiling -----------------------------------------------------------------------------------


def test_a_syntax_error_names_line_and_column() -> None:
    with pytest.raises(PacError) as caught:
        PacScript("function FindProxyForURL(url, host) {\n  return 'x' +;\n}\n")
    assert caught.value.kind == "syntax"
    assert (caught.value.line, caught.value.column) == (2, 15)
    assert "line 2, column 15" in str(caught.value)


def test_an_unclosed_brace_is_reported_at_the_end_of_the_script() -> None:
    with pytest.raises(PacError) as caught:
        PacScript("function FindProxyForURL(url, host) {\n  return 'DIRECT';\n")
    assert caught.value.kind == "syntax"
    assert caught.value.line == 3
    assert "end of the script" in str(caught.value)


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("var x = 1;", "entry"),
        ("var FindProxyForURL = 'DIRECT';", "entry"),
        ("throw new Error('boom'); function FindProxyForURL() {}", "load"),
        ("}); let n = 0; (function () { function FindProxyForURL() { return 'DIRECT'; }", "structure"),
        ("function FindProxyForURL() {}\0", "input"),
        ("for (;;) {} function FindProxyForURL() {}", "timeout"),
    ],
)
def test_compile_errors(source: str, kind: str) -> None:
    with pytest.raises(PacError) as caught:
        PacScript(source)
    assert caught.value.kind == kind
    assert str(caught.value)


def test_strict_scripts_helpers_and_shadowed_builtins_work() -> None:
    pac = PacScript(
        "'use strict';\n"
        "const PROXIES = ['PROXY client', 'PROXY gateway'];\n"
        "function dnsDomainIs(host, domain) { return host === 'shadowed' || host.endsWith(domain); }\n"
        "function pick(host) { return host.length > 5 ? 1 : 0; }\n"
        "function FindProxyForURL(url, host) { return dnsDomainIs(host, '.x') ? PROXIES[pick(host)] : 'DIRECT'; }\n"
    )
    assert pac.find_proxy("tcp://ab.x:1/", "ab.x") == "PROXY client"
    assert pac.find_proxy("tcp://shadowed:1/", "shadowed") == "PROXY gateway"
    assert pac.find_proxy("tcp://y:1/", "y") == "DIRECT"


def test_a_function_expression_and_a_global_assignment_also_define_the_entry() -> None:
    assert (
        PacScript("var FindProxyForURL = function (u, h) { return 'DIRECT'; };").find_proxy("u", "h")
        == "DIRECT"
    )
    assert (
        PacScript("this.FindProxyForURL = function (u, h) { return 'DENY'; };").find_proxy("u", "h") == "DENY"
    )


# ---- no ambient authority ---------------------------------------------------------------------


def test_no_ambient_authority() -> None:
    pac = script(
        "return [typeof require, typeof fetch, typeof XMLHttpRequest, typeof std, typeof os, typeof print,"
        " typeof console, typeof setTimeout, typeof process, typeof __date_clock, typeof Atomics,"
        " typeof SharedArrayBuffer].join(',');"
    )
    assert pac.find_proxy("u", "h") == ",".join(["undefined"] * 12)


@pytest.mark.parametrize(
    "body",
    [
        "return require('fs').readFileSync('/etc/passwd');",
        "return fetch('http://example.com/');",
        "return new XMLHttpRequest();",
        "return std.loadFile('/etc/passwd');",
    ],
)
def test_reaching_for_io_fails_closed(body: str) -> None:
    assert fails(script(body)).kind == "exception"


def test_the_sandbox_machinery_is_out_of_reach() -> None:
    pac = PacScript(
        "function FindProxyForURL(url, host) {\n"
        "  var found = [arguments.callee.caller, FindProxyForURL.caller, new Date().constructor === Date];\n"
        "  return found.map(function (x) { return typeof x; }).join(' ');\n"
        "}\n"
    )
    assert pac.find_proxy("u", "h") == "undefined undefined boolean"


def test_a_dynamic_import_loads_nothing() -> None:
    pac = script("var p = import('os'); return typeof p.then === 'function' ? 'DIRECT' : 'DENY';")
    assert pac.find_proxy("u", "h") == "DIRECT"  # a promise that never settles: no module, no loader


# ---- no state between evaluations ------------------------------------------------------------------

STATEFUL = [
    "var n = 0; function FindProxyForURL(u, h) { n++; return 'N' + n; }",
    "let n = 0; function FindProxyForURL(u, h) { n += 1; return 'N' + n; }",
    "'use strict'; let n = 0; function FindProxyForURL(u, h) { n += 1; return 'N' + n; }",
    "var memo = {}; function FindProxyForURL(u, h) { memo.n = (memo.n || 0) + 1; return 'N' + memo.n; }",
    "function FindProxyForURL(u, h) { counter = (typeof counter === 'undefined' ? 0 : counter) + 1;"
    " return 'N' + counter; }",
    "function FindProxyForURL(u, h) { globalThis.n = (globalThis.n || 0) + 1; return 'N' + globalThis.n; }",
    "function FindProxyForURL(u, h) { Object.prototype.n = (({}).n || 0) + 1; return 'N' + ({}).n; }",
    "function FindProxyForURL(u, h) { Array.prototype.n = ([].n || 0) + 1; return 'N' + [].n; }",
    "function FindProxyForURL(u, h) { Object.defineProperty(globalThis, 'n', {value: (globalThis.n || 0) + 1});"
    " return 'N' + globalThis.n; }",
    "function FindProxyForURL(u, h) { var p = Object.getPrototypeOf(globalThis);"
    " Object.setPrototypeOf(globalThis, {n: (globalThis.n || 0) + 1, __proto__: p}); return 'N' + globalThis.n; }",
    "function FindProxyForURL(u, h) { var n = (globalThis.n || 0) + 1; try { globalThis.n = n;"
    " Object.preventExtensions(globalThis); } catch (e) {} return 'N' + n; }",
    "function FindProxyForURL(u, h) { Math.n = (Math.n || 0) + 1; return 'N' + Math.n; }",
    "function FindProxyForURL(u, h) { Date.prototype.n = (Date.prototype.n || 0) + 1;"
    " return 'N' + Date.prototype.n; }",
    "var s = new Set(); function FindProxyForURL(u, h) { s.add(s.size); return 'N' + s.size; }",
]


@pytest.mark.parametrize("source", STATEFUL)
def test_an_evaluation_leaves_no_state_for_the_next(source: str) -> None:
    pac = PacScript(source)
    answers = []
    for _ in range(3):
        try:
            answers.append(pac.find_proxy("tcp://h:1/", "h"))
        except PacError as exc:  # strict mode refuses to write frozen things: also fine
            answers.append(exc.kind)
    assert answers[0] == answers[1] == answers[2], answers


def test_overwriting_a_builtin_does_not_outlive_the_evaluation() -> None:
    pac = PacScript(
        "function FindProxyForURL(u, h) {\n"
        "  var before = dnsDomainIs('a.example', '.other');\n"
        "  dnsDomainIs = function () { return true; };\n"
        "  String.prototype.slice = function () { return '.other'; };\n"
        "  return String(before) + ' ' + dnsDomainIs('a.example', '.other');\n"
        "}\n"
    )
    assert pac.find_proxy("u", "h") == "false false"
    assert pac.find_proxy("u", "h") == "false false"


@pytest.mark.parametrize("strict", ["", "'use strict';\n"])
def test_own_objects_can_still_override_what_they_inherit(strict: str) -> None:
    pac = PacScript(
        strict + "function Foo() {}\n"
        "Foo.prototype.toString = function () { return 'foo'; };\n"
        "class Named extends Error { constructor(m) { super(m); this.name = 'Named'; } }\n"
        "function FindProxyForURL(url, host) {\n"
        "  var o = {}; o.toString = function () { return 'o'; }; o.valueOf = function () { return 1; };\n"
        "  return [String(new Foo()), String(o), o + 1, String(new Named('x'))].join(' ');\n"
        "}\n"
    )
    assert pac.find_proxy("u", "h") == "foo o 2 Named: x"
    tamper = PacScript(
        strict + "function FindProxyForURL(u, h) { Object.prototype.toString = String; return 'x'; }"
    )
    assert fails(tamper).kind == "exception"  # the shared one stays as it was


# ---- limits ------------------------------------------------------------------------------------------


def test_an_infinite_loop_times_out_and_the_process_stays_responsive() -> None:
    pac = script("while (true) {}")
    ticks = 0
    stop = threading.Event()

    def tick() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        assert fails(pac).kind == "timeout"
        assert fails(pac).kind == "timeout"
    finally:
        stop.set()
        ticker.join(timeout=30)
    assert ticks > 0  # the loop did not hold the interpreter
    assert script("return 'DIRECT';").find_proxy("u", "h") == "DIRECT"


def test_a_loop_that_catches_everything_still_times_out() -> None:
    assert fails(script("for (;;) { try { while (true) {} } catch (e) {} }")).kind == "timeout"


def test_a_huge_allocation_hits_the_memory_limit() -> None:
    pac = script("var a = []; for (;;) a.push(new Array(100000).fill(1));")
    assert fails(pac).kind == "memory"
    assert fails(script("return 'x'.repeat(1 << 28);")).kind == "memory"
    assert fails(pac).kind == "memory"  # and again: the limit holds after the first blow-up


def test_deep_recursion_hits_the_stack_limit() -> None:
    assert fails(script("function r(n) { return r(n + 1) + 1; } return r(0);")).kind == "stack"


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ("throw { toString: function () { for (;;) {} } };", "exception"),
        ("throw { get message() { for (;;) {} }, get name() { for (;;) {} } };", "exception"),
        ("Error.prototype.toString = function () { for (;;) {} }; throw new Error('x');", "exception"),
        ("throw new Proxy({}, { get: function () { for (;;) {} } });", "exception"),
        ("throw null;", "exception"),
        (
            "var e = new Error('x'); Object.defineProperty(e, 'message', { get: function () { for (;;) {} } });"
            " throw e;",
            "timeout",
        ),
        (
            "return { toJSON: function () { for (;;) {} }, toString: function () { return 'DIRECT'; } };",
            "return",
        ),
        ("return { get length() { for (;;) {} } };", "return"),
        ("return new Proxy({}, { get: function () { for (;;) {} } });", "return"),
        ("return new String('DIRECT');", "return"),
        ("return function () { return 'DIRECT'; };", "return"),
        ("return 42;", "return"),
        ("return Symbol('DIRECT');", "return"),
        ("return [ 'DIRECT' ];", "return"),
    ],
)
def test_hostile_values_never_reach_python(body: str, kind: str) -> None:
    assert fails(script(body)).kind == kind


def test_null_and_undefined_are_no_answer() -> None:
    assert script("return null;").find_proxy("u", "h") is None
    assert script("return;").find_proxy("u", "h") is None


def test_strings_with_nul_and_unicode_come_back_whole() -> None:
    assert script("return 'PROXY a\\u0000b';").find_proxy("u", "h") == "PROXY a\0b"
    assert script("return 'PROXY ünï';").find_proxy("u", "h") == "PROXY ünï"
    assert script("return host;").find_proxy("u", "ünï.example") == "ünï.example"


@pytest.mark.parametrize(
    ("url", "host", "ip"),
    [
        ("tcp://a\0b:1/", "a", None),
        ("u", "a\0b", None),
        ("u", "a\nb", None),
        ("u", "x" * 2000, None),
        ("x" * 10000, "h", None),
        ("u", "h", "not-an-ip"),
    ],
)
def test_inputs_the_sandbox_cannot_take_faithfully_are_refused(url: str, host: str, ip: str | None) -> None:
    with pytest.raises(PacError) as caught:
        script("return 'DIRECT';").find_proxy(url, host, ip)
    assert caught.value.kind == "input"


def test_queued_promise_jobs_never_run() -> None:
    pac = script("Promise.resolve().then(function () { for (;;) {} }); return 'DIRECT';")
    for _ in range(5):
        assert pac.find_proxy("u", "h") == "DIRECT"


# ---- regexes: the isolated evaluator -----------------------------------------------------------------

CATASTROPHIC = "function FindProxyForURL(url, host) { return /^(a+)+$/.test(host) ? 'DENY' : 'DIRECT'; }"
EVIL_HOST = "a" * 40 + "!"


@pytest.mark.timeout(120)
def test_a_catastrophic_regex_times_out_in_the_worker_and_the_next_evaluation_works() -> None:
    pac = PacScript(CATASTROPHIC)
    assert pac.isolated
    assert pac.find_proxy("u", "aaaa") == "DENY"
    error = fails(pac, EVIL_HOST)
    assert error.kind == "timeout"
    assert pac.find_proxy("u", "aaaa") == "DENY"  # a fresh worker took over
    assert pac.find_proxy("u", "b.example") == "DIRECT"


@pytest.mark.timeout(120)
def test_a_hidden_regex_trips_the_wire_and_moves_to_the_worker() -> None:
    pac = PacScript(
        "function FindProxyForURL(url, host) {\n"
        "  var R = this['Reg' + 'Exp'] || (function () { return this; })()['Reg' + 'Exp'];\n"
        "  try { if (new R('^(a+)+$')['te' + 'st'](host)) return 'DENY'; } catch (e) {}\n"
        "  return 'DIRECT';\n"
        "}\n"
    )
    assert not pac.isolated  # the scan did not see it...
    assert pac.find_proxy("u", "aaaa") == "DENY"  # ...the tripwire did, and the answer is still right
    assert pac.isolated
    assert fails(pac, EVIL_HOST).kind == "timeout"


@pytest.mark.timeout(120)
def test_process_isolation_bounds_a_long_native_call() -> None:
    # A quadratic indexOf inside the engine is never interrupted; only killing the process ends it.
    body = "var a = 'a'.repeat(4000000), b = 'a'.repeat(2000000) + 'b'; return a.indexOf(b) < 0 ? 'DIRECT' : 'DENY';"
    pac = script(body, isolation="process")
    assert pac.isolated
    assert fails(pac).kind == "timeout"


@pytest.mark.timeout(120)
def test_isolated_scripts_compile_errors_and_builtins_match_in_process() -> None:
    with pytest.raises(PacError) as caught:
        PacScript("function FindProxyForURL(url, host) {\n  return /x/.test(host) +;\n}\n")
    assert (caught.value.kind, caught.value.line) == ("syntax", 2)
    probe = (
        "return [dnsResolve(host), isInNet(host, '10.0.0.0', '255.0.0.0'), Date.now(), alert('a')].join(' ');"
    )
    here = script(probe)
    there = script(probe, isolation="process")
    args = ("tcp://db.corp:1/", "db.corp", "10.1.2.3")
    assert here.evaluate(*args, now_ms=1234) == there.evaluate(*args, now_ms=1234)


# ---- threads -------------------------------------------------------------------------------------------

ROUTER = (
    "function FindProxyForURL(url, host) {\n"
    "  if (dnsDomainIs(host, '.corp.example')) return 'PROXY client';\n"
    "  if (isInNet(host, '10.0.0.0', '255.0.0.0')) return 'GATEWAY';\n"
    "  return 'DIRECT; ' + host;\n"
    "}\n"
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("isolation", ["auto", "process"])
def test_threads_evaluate_together(isolation: str) -> None:
    pac = PacScript(ROUTER, isolation=isolation)  # type: ignore[arg-type]
    jobs = [
        (f"h{i}.corp.example" if i % 3 == 0 else f"h{i}.example", f"10.0.{i % 250}.1" if i % 3 == 1 else None)
        for i in range(300)
    ]
    expected = [pac.find_proxy(f"tcp://{host}:443/", host, ip) for host, ip in jobs]
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda job: pac.find_proxy(f"tcp://{job[0]}:443/", job[0], job[1]), jobs))
    assert answers == expected
    assert expected[0] == "PROXY client" and expected[1] == "GATEWAY" and expected[2] == "DIRECT; h2.example"
