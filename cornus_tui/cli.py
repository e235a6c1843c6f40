"""Entry point of cornus-tui: argument parsing, then the session or one of the tool subcommands.

``cornus-tui -f SPEC ...`` runs a deploy-attach session; ``cornus-tui route ...`` and
``cornus-tui pac eval ...`` are offline tools over the same policy code the three hops run.
The first argument picks: a known subcommand name, otherwise the session. The logic lives in
``cornus_core.spec`` and ``cornus_core.policy``; this module only parses and prints.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from cornus_core import __version__
from cornus_core.policy import PacError, PacScript
from cornus_core.spec import (
    DEFAULT_PORT,
    EgressFlags,
    LoadedSpec,
    PolicyCompileError,
    SpecError,
    check_deployable,
    compile_spec_policy,
    empty_spec,
    flag_source,
    fold_egress_flags,
    fold_local_mounts,
    load_spec_file,
    parse_dest,
)

PROG = "cornus-tui"

# Exit codes.
OK = 0
FAILED = 1  # the tool ran and what it ran failed (a PAC evaluation error)
USAGE = 2  # bad arguments, spec, Compose file or PAC source
POLICY = 5  # the session's egress policy does not compile

SESSION_EPILOG = f"""\
tools (run '{PROG} TOOL --help'):
  route      show how the egress policy routes destinations
  pac eval   run a PAC file's FindProxyForURL once and print what it returns
  serve-9p   serve a local directory over 9P2000.L on TCP (debugging, conformance runs)

egress flags and the spec file:
  --egress-route rules are put BEFORE the file's rules, in the order given, so they win
  (first match wins); --egress-pac replaces the file's script (a script supersedes all
  rules); --egress and --egress-default replace the file's mode and default.

examples:
  {PROG} -f app.yaml --server https://cornus.example.com --egress proxy
  {PROG} -f compose.yaml --service worker --local-mount ./src:/app/src:ro
  {PROG} -f app.yaml --egress-route '*.corp.example=client' --egress-default deny
  {PROG} route -f app.yaml api.corp.example:443 10.1.2.3:5432 [2001:db8::1]:80

exit codes: the workload's own exit status when it ran (128+N when signal N ended it);
otherwise 2 bad arguments or spec, 3 the deployment was refused or failed, 4 the session
could not be established or was lost, 5 the egress policy does not compile, 130 interrupted
(after tearing the deployment down); with --exit-on-ready, 0 once it was ready
"""

ROUTE_EPILOG = f"""\
DEST is one of:
  host, host:port          a name (its IP unknown, so CIDR rules cannot match it)
  IP, IP:port              an IPv4 address
  [IPv6], [IPv6]:port      an IPv6 address (a bare IPv6 address takes no port)
  host:port@IP, host@IP    a name whose IP is known
The port defaults to {DEFAULT_PORT}.

Output: one line per destination, 'DEST ROUTE REASON' in aligned columns; with --json
one object per line: dest, host, ip, port, route, reason, version.

Precedence: --egress-route rules come before the file's rules (in flag order), so they win;
--egress-pac replaces the file's script; --egress-default replaces its default.

examples:
  {PROG} route --egress-route '*.corp.example=client' build.corp.example pypi.org
  {PROG} route -f compose.yaml --service worker db.internal:5432@10.0.3.7
  {PROG} route --egress-pac examples/corp.pac --json intranet.corp.example 8.8.8.8:53

exit codes: 0 routed, 2 bad arguments, spec or policy
"""

PAC_EVAL_EPILOG = f"""\
Prints what FindProxyForURL returns, as is ('null' for null or undefined).
The sandbox resolves no names: HOST resolves only to --ip, the destination's known address.

example:
  {PROG} pac eval examples/corp.pac --url https://wiki.corp.example/ --host wiki.corp.example \\
      --ip 10.20.0.5 --now 2025-03-03T09:30:00Z

exit codes: 0 evaluated, 1 evaluation error (exception, timeout, non-string result),
2 bad arguments or a PAC file that does not compile
"""


class _Exit(Exception):
    """Raised instead of sys.exit so that main(argv) returns a code in-process."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _Exit(status)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message}\n")


def _parser(prog: str, description: str, epilog: str) -> _Parser:
    return _Parser(
        prog=prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _add_spec_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f", "--file", metavar="SPEC", help="deploy spec YAML, or a Compose file (has 'services:')"
    )
    parser.add_argument("--service", metavar="NAME", help="the Compose service (default: the only one)")


def _add_egress_flags(parser: argparse.ArgumentParser, *, mode_help: str) -> None:
    group = parser.add_argument_group("egress")
    group.add_argument("--egress", metavar="MODE", help=mode_help)
    group.add_argument(
        "--egress-route",
        metavar="PATTERN=ROUTE",
        action="append",
        default=[],
        help="a rule tried before the file's rules; repeatable, first match wins",
    )
    group.add_argument(
        "--egress-default", metavar="ROUTE", help="route for unmatched destinations (default cluster)"
    )
    group.add_argument(
        "--egress-pac", metavar="FILE", help="a PAC file; replaces the file's script and rules"
    )


def _egress_flags(args: argparse.Namespace) -> EgressFlags:
    return EgressFlags(
        mode=args.egress,
        routes=tuple(args.egress_route),
        default=args.egress_default,
        pac=args.egress_pac,
    )


def _load(args: argparse.Namespace) -> LoadedSpec:
    if args.file is None:
        if args.service is not None:
            raise SpecError(flag_source("--service", args.service), "needs a Compose file (-f)")
        loaded = empty_spec()
    else:
        loaded = load_spec_file(args.file, service=args.service)
    return fold_egress_flags(loaded, _egress_flags(args))


def _now_ms(text: str | None) -> int | None:
    """``--now`` as milliseconds since the epoch; a time without a zone is UTC."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    except (ValueError, OverflowError):
        raise SpecError(
            flag_source("--now", text), "expected an ISO 8601 time such as 2025-03-03T09:30:00Z"
        ) from None


def _fail(error: SpecError | str, status: int = USAGE) -> int:
    for line in str(error).splitlines():
        print(f"{PROG}: {line}", file=sys.stderr)
    return status


# ---- route ------------------------------------------------------------------------------------


def _route_main(argv: Sequence[str]) -> int:
    parser = _parser(f"{PROG} route", "Show how the egress policy routes each destination.", ROUTE_EPILOG)
    _add_spec_flags(parser)
    # --egress is accepted so a session's flags can be pasted as they are; the mode does not route.
    _add_egress_flags(parser, mode_help="env, proxy or transparent (checked; no effect on routing)")
    parser.add_argument("--now", metavar="ISO8601", help="the clock that time-dependent PAC builtins read")
    parser.add_argument("--json", action="store_true", help="one JSON object per destination")
    parser.add_argument(
        "dest", nargs="+", metavar="DEST", help="host[:port], IP:port, [IPv6]:port, host:port@IP"
    )
    args = parser.parse_args(argv)
    try:
        dests = [parse_dest(text) for text in args.dest]
        policy = compile_spec_policy(_load(args), now_ms=_now_ms(args.now))
    except SpecError as exc:
        return _fail(exc)
    rows = []
    for dest in dests:
        decision = policy.route(dest.destination())
        rows.append((dest, decision.route.value, decision.reason, decision.version))
    if args.json:
        for dest, route, reason, version in rows:
            record = {
                "dest": dest.text,
                "host": dest.host,
                "ip": dest.ip,
                "port": dest.port,
                "route": route,
                "reason": reason,
                "version": version,
            }
            print(json.dumps(record))
    else:
        dest_width = max(len(dest.text) for dest, *_ in rows)
        route_width = max(len(route) for _, route, *_ in rows)
        for dest, route, reason, _ in rows:
            print(f"{dest.text:<{dest_width}}  {route:<{route_width}}  {reason}")
    return OK


# ---- pac eval ---------------------------------------------------------------------------------


def _pac_main(argv: Sequence[str]) -> int:
    parser = _parser(f"{PROG} pac", "PAC file tools.", f"run '{PROG} pac eval --help' for details")
    tools = parser.add_subparsers(dest="tool", required=True, metavar="TOOL", parser_class=_Parser)
    run = tools.add_parser(
        "eval",
        help="evaluate FindProxyForURL once",
        description="Evaluate a PAC file's FindProxyForURL(url, host) once in the sandbox.",
        epilog=PAC_EVAL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("pac_file", metavar="FILE", help="the PAC file")
    run.add_argument("--url", required=True, help="the url argument, e.g. https://host/path")
    run.add_argument("--host", required=True, help="the host argument")
    run.add_argument("--ip", help="the destination's known IP, what dnsResolve(HOST) answers")
    run.add_argument("--now", metavar="ISO8601", help="the clock that time-dependent builtins read")
    args = parser.parse_args(argv)
    try:
        source = _read_text(args.pac_file)
        now_ms = _now_ms(args.now)
        dest_ip = None if args.ip is None else _ip_address(args.ip)
    except SpecError as exc:
        return _fail(exc)
    try:
        script = PacScript(source, now_ms=now_ms)
    except PacError as exc:
        at = f"{args.pac_file}:{exc.line}:{exc.column or 1}" if exc.line is not None else args.pac_file
        return _fail(f"{at}: does not compile: {exc.message}")
    try:
        result = script.find_proxy(args.url, args.host, dest_ip=dest_ip)
    except PacError as exc:
        return _fail(f"{args.pac_file}: evaluation failed: {exc}", FAILED)
    print("null" if result is None else result)
    return OK


def _ip_address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise SpecError(flag_source("--ip", text), "expected an IP address") from None


def _read_text(path: str) -> str:
    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise SpecError(path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(path, f"not UTF-8 text (bad byte at offset {exc.start})") from None


# ---- the session --------------------------------------------------------------------------------


def _session_main(argv: Sequence[str]) -> int:
    parser = _parser(
        PROG,
        "Deploy a workload and keep a live session to it: its egress can leave from this\n"
        "machine, local directories are mounted into it over 9P, and credentials are minted\n"
        f"here on demand. Tools: '{PROG} route ...', '{PROG} pac eval ...' (see below).",
        SESSION_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _add_spec_flags(parser)
    parser.add_argument(
        "--server", metavar="URL", help="a remote Cornus server (default: an embedded local one)"
    )
    parser.add_argument(
        "--local-mount",
        metavar="SRC:DST[:ro]",
        action="append",
        default=[],
        help="serve a local directory or file to the workload at DST; repeatable",
    )
    parser.add_argument("--plain", action="store_true", help="line-oriented output instead of the dashboard")
    parser.add_argument("--json", action="store_true", help="JSON lines (implies --plain)")
    parser.add_argument("--detach", action="store_true", help="leave the workload running without a session")
    parser.add_argument("--exit-on-ready", action="store_true",
                        help="exit 0 once the deployment is ready (with --detach it keeps running; without, it "
                        "is torn down first: a readiness check); implies --plain")
    _add_egress_flags(parser, mode_help="env, proxy or transparent (replaces the file's mode)")
    args = parser.parse_args(argv)
    if args.file is None:
        parser.error(f"a spec is required: -f SPEC (or run a tool: {', '.join(SUBCOMMANDS)})")
    try:
        _check_server(args.server)
        loaded = fold_local_mounts(_load(args), args.local_mount)
        check_deployable(loaded, detach=args.detach)
    except PolicyCompileError as exc:
        return _fail(exc, POLICY)
    except SpecError as exc:
        return _fail(exc)
    return _run_session(loaded, args)


def _run_session(loaded: LoadedSpec, args: argparse.Namespace) -> int:
    from cornus_core import aio

    from .plain import run_plain

    spec = loaded.spec.model_copy(update={"detach": True}) if args.detach else loaded.spec
    if args.plain or args.json or args.exit_on_ready or not sys.stdout.isatty():
        return aio.run(run_plain(spec, server_url=args.server, as_json=args.json,
                                     exit_on_ready=args.exit_on_ready))
    from .dashboard_run import run_dashboard

    pac_file = Path(args.egress_pac) if args.egress_pac else None
    return aio.run(run_dashboard(spec, server_url=args.server, pac_file=pac_file))


def _check_server(url: str | None) -> None:
    if url is None:
        return
    try:
        parts = urlsplit(url)
        usable = parts.scheme in ("http", "https", "ws", "wss") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a bad port or an unterminated [IPv6]
        usable = False
    if not usable:
        raise SpecError(flag_source("--server", url), "expected an http(s):// or ws(s):// URL with a host")


def _serve_9p(argv: Sequence[str]) -> int:
    """Serve one local directory (or file) over 9P2000.L on TCP, for debugging and conformance runs."""
    from cornus_core.ninep.__main__ import main as serve_main

    return serve_main(argv, prog=f"{PROG} serve-9p")


# ---- dispatch -----------------------------------------------------------------------------------

SUBCOMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "route": _route_main,
    "pac": _pac_main,
    "serve-9p": _serve_9p,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = SUBCOMMANDS.get(args[0]) if args else None
    try:
        if command is not None:
            return command(args[1:])
        return _session_main(args)
    except _Exit as done:
        return done.status


if __name__ == "__main__":
    raise SystemExit(main())
