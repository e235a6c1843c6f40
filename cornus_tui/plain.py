"""`cornus-tui --plain`: the session for scripts, one line per event (or JSON lines with --json)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from typing import TextIO

from cornus_core.caller import CallerSession, SessionError
from cornus_core.events import (
    ConnEnd,
    CredentialRequest,
    Done,
    Error,
    Event,
    Exit,
    HopDecision,
    Log,
    MountStats,
    PolicyApplied,
    Ready,
    Status,
)
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec

from .runner import EXIT_INTERRUPTED, EXIT_OK, EXIT_SESSION_LOST, exit_code, prepare_spec, session_target


def format_event(event: Event) -> str:
    """One human line per event; stable enough for grep."""
    stamp = time.strftime("%H:%M:%S")
    match event:
        case Log(source=source, line=line, stream=stream):
            return f"{stamp} {source}{'!' if stream == 'stderr' else ':'} {line}"
        case HopDecision(conn=conn, hop=hop, route=route, reason=reason, host=host, ip=ip, port=port):
            dest = f"{host or ip}:{port}" + (f" ({ip})" if host and ip and host != ip else "")
            return f"{stamp} conn {conn} {hop:<9} {route:<7} {dest}  [{reason}]"
        case ConnEnd(conn=conn, hop=hop, outcome=outcome, reason=reason, bytes_up=up, bytes_down=down,
                     duration_ms=ms):
            tail = f"  [{reason}]" if reason else ""
            return f"{stamp} conn {conn} {hop:<9} {outcome:<7} up={up} down={down} {ms:.0f}ms{tail}"
        case Ready(deployment=dep, backend=backend, policy_version=version):
            return f"{stamp} ready deployment={dep} backend={backend} policy={version}"
        case Status(state=state, detail=detail):
            return f"{stamp} status {state}" + (f" ({detail})" if detail else "")
        case Error(message=message):
            return f"{stamp} error {message}"
        case Exit(code=code):
            return f"{stamp} exit {code}"
        case Done(reason=reason):
            return f"{stamp} done {reason}"
        case MountStats(name=name, source=source, target=target, read_only=ro, ops=ops, bytes_read=read,
                        bytes_written=written, errors=errors):
            return (f"{stamp} mount {name} {source} -> {target} ({'ro' if ro else 'rw'}) ops={sum(ops.values())} "
                    f"read={read} written={written} errors={errors}")
        case CredentialRequest(name=name, delivery=delivery, cache=cache, outcome=outcome, expiration=expiry):
            return f"{stamp} credential {name} {delivery} {cache} {outcome}" + (f" expires {expiry}" if expiry else "")
        case PolicyApplied(hop=hop, version=version):
            return f"{stamp} policy {hop} now {version}"
    return f"{stamp} {event.type} {json.dumps(event.to_dict())}"


async def run_plain(spec: DeploySpec, *, server_url: str | None, as_json: bool = False,
                    out: TextIO | None = None, exit_on_ready: bool = False) -> int:
    """Run the session until the workload exits or Ctrl-C (then tear down); return the exit code."""

    stream = out or sys.stdout
    flush_pending = False

    def flush() -> None:
        nonlocal flush_pending
        flush_pending = False
        stream.flush()

    ready = False

    def show(event: Event) -> None:
        # Lines are flushed once per event-loop turn, not once per event: busy sessions make many.
        nonlocal flush_pending, ready
        if exit_on_ready and isinstance(event, Ready) and not ready:
            ready = True
            # Detached, leave it running; otherwise tear it down: then this was a readiness check.
            pending.add(asyncio.ensure_future(session.leave() if spec.detach else session.down()))
        stream.write(event.encode().decode() if as_json else format_event(event) + "\n")
        if not flush_pending:
            flush_pending = True
            asyncio.get_running_loop().call_soon(flush)

    proxies = ProxySettings.resolve()
    interrupted = False
    pending: set[asyncio.Future[None]] = set()
    async with session_target(server_url) as target:
        session = CallerSession(target.url, target.token, prepare_spec(spec, proxies), on_event=show,
                                proxies=proxies)
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            nonlocal interrupted
            interrupted = True
            print("cornus-tui: tearing down (Ctrl-C again to stop waiting)", file=sys.stderr)
            pending.add(asyncio.ensure_future(session.down()))
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        try:
            outcome = await session.run()
        except SessionError as exc:
            print(f"cornus-tui: {exc}", file=sys.stderr)
            return EXIT_SESSION_LOST
        finally:
            stream.flush()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
    if interrupted:
        return EXIT_INTERRUPTED
    if ready:
        return EXIT_OK
    return exit_code(outcome, lambda message: print(f"cornus-tui: {message}", file=sys.stderr))
