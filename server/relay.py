"""The server's hop of an egress connection: re-evaluate the deployment's own policy (never the route
the pod claims), then bridge to the caller (`client`), dial from here (`gateway`), or refuse."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from cornus_core.events import ConnEnd, Event, HopDecision
from cornus_core.policy import Policy, Route
from cornus_core.streams import TAG_CALLER_EGRESS, EgressRequest
from cornus_core.wire import (
    Mux,
    MuxStream,
    Verdict,
    VerdictKind,
    WireError,
    read_verdict,
    splice,
    write_header,
    write_verdict,
)

from .gateway import Gateway

VERDICT_TIMEOUT = 30.0


async def relay_egress(
    stream: MuxStream,
    request: EgressRequest,
    *,
    policy: Policy,
    caller: Mux | None,
    gateway: Gateway,
    emit: Callable[[Event], None],
) -> None:
    """Answer one caretaker `E` stream: a verdict line, then (when ok) the spliced bytes."""
    started = time.monotonic()
    decision = policy.route(request.destination, now_ms=request.t_ms or None)
    emit(HopDecision(
        conn=request.conn, hop="server", route=decision.route, reason=decision.reason,
        version=decision.version, host=request.host, ip=request.ip, port=request.port, t_ms=request.t_ms,
    ))

    def end(verdict: Verdict, up: int = 0, down: int = 0) -> None:
        emit(ConnEnd(
            conn=request.conn, hop="server", outcome=verdict.kind, reason=verdict.reason,
            bytes_up=up, bytes_down=down, duration_ms=(time.monotonic() - started) * 1000,
        ))

    if decision.route is Route.CLIENT:
        if caller is None or caller.is_closed:
            verdict = Verdict(VerdictKind.REFUSED, "no caller session is attached")
            await _refuse(stream, verdict)
            return end(verdict)
        try:
            upstream = await caller.open_stream()
            await write_header(upstream, TAG_CALLER_EGRESS, request.to_fields() | {
                "route": decision.route, "policy": decision.version,
            })
            async with asyncio.timeout(VERDICT_TIMEOUT):  # no extra task per connection, unlike wait_for
                verdict = await read_verdict(upstream)
        except TimeoutError:
            verdict = Verdict(VerdictKind.TIMEOUT, "the caller did not answer in time")
            upstream.reset()
        except WireError as exc:
            verdict = Verdict(VerdictKind.ERROR, f"caller session: {exc}")
        if not verdict.ok:
            await _refuse(stream, verdict)
            return end(verdict)
        await write_verdict(stream, verdict)
        result = await splice(stream, upstream)
        return end(verdict, result.a_to_b, result.b_to_a)

    if decision.route is Route.GATEWAY:
        refusal, explicit = gateway.check(request.destination, request.t_ms)
        dialed = refusal or await gateway.dial(request.destination, allow_internal=explicit)
        if isinstance(dialed, Verdict):
            await _refuse(stream, dialed)
            return end(dialed)
        ok = Verdict(VerdictKind.OK)
        await write_verdict(stream, ok)
        result = await splice(stream, dialed)
        return end(ok, result.a_to_b, result.b_to_a)

    why = decision.reason if decision.route is Route.DENY else f"routed {decision.route}, not relayed"
    verdict = Verdict(VerdictKind.DENY, f"server policy: {why}")
    await _refuse(stream, verdict)
    return end(verdict)


async def _refuse(stream: MuxStream, verdict: Verdict) -> None:
    try:
        await write_verdict(stream, verdict)
        await stream.aclose()
    except WireError:
        stream.reset()
