"""The caller's side of a deploy-attach session: send the spec, receive events, and be the last hop
of `client` egress — re-check with our own policy, then dial through our own proxy settings."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cornus_core.credentials import CredentialError, SourceSet, error_json
from cornus_core.events import (
    ConnEnd,
    Done,
    Error,
    Event,
    EventError,
    Exit,
    HopDecision,
    MountStats,
    PolicyApplied,
    decode_event,
)
from cornus_core.netguard import CLIENT_REFUSED, parse_ip, refusal
from cornus_core.ninep import Export, StatsSnapshot, serve_connection
from cornus_core.policy import Policy, PolicyError, Route, compile_policy
from cornus_core.proxy.dialer import DialError, dial
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec, EgressSpec, MountSpec
from cornus_core.streams import (
    TAG_CALLER_CREDENTIAL,
    TAG_CALLER_EGRESS,
    TAG_CALLER_MOUNT,
    TAG_CONTROL,
    BadRequest,
    EgressRequest,
    mount_name,
)
from cornus_core.wire import (
    Mux,
    MuxStream,
    Verdict,
    VerdictKind,
    WireError,
    dial_websocket,
    read_header,
    splice,
    write_header,
    write_verdict,
)

log = logging.getLogger(__name__)

DEPLOY_ATTACH = "/.cornus/v1/deploy/attach"
DIAL_TIMEOUT = 15.0
MOUNT_STATS_INTERVAL = 1.0


def wire_spec(spec: DeploySpec) -> str:
    """The spec as the server receives it: credential sources without their config (it may hold secrets)."""
    data = spec.model_dump(mode="json", exclude_none=True)
    for source in data.get("credentials", {}).get("sources", []):
        source.pop("config", None)
    return json.dumps(data)


class SessionError(Exception):
    """The session could not be established or was lost; the message says which and why."""


@dataclass
class Outcome:
    """How a session ended: the workload's exit code when it exited, and the final reason."""

    exit_code: int | None = None
    reason: str = ""
    errors: list[str] = field(default_factory=list)


class CallerSession:
    def __init__(
        self,
        server_url: str,
        token: str,
        spec: DeploySpec,
        *,
        on_event: Callable[[Event], None] = lambda event: None,
        proxies: ProxySettings | None = None,
    ) -> None:
        self.server_url = server_url.rstrip("/")
        self._token = token
        self.spec = spec
        self.on_event = on_event
        self.proxies = proxies if proxies is not None else ProxySettings.resolve()
        self.policy: Policy | None
        try:
            self.policy = compile_policy(spec.egress or EgressSpec())
        except PolicyError:
            self.policy = None  # fail closed: every relayed connection is denied at this hop
        self.sources = SourceSet([])
        self.exports: dict[str, tuple[MountSpec, Export]] = {}
        self._last_stats: dict[str, StatsSnapshot] = {}
        self._mux: Mux | None = None
        self._leaving = False
        self._control: MuxStream | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def run(self) -> Outcome:
        """Deploy, serve the session until it is done, and say how it ended."""
        url = self.server_url + DEPLOY_ATTACH
        try:
            # Sources mint secrets here, at fetch time; their config never leaves this machine.
            self.sources = SourceSet.from_config(self.spec.credentials.sources)
        except CredentialError as exc:
            raise SessionError(f"credentials: {exc}") from None
        try:
            self.exports = {
                mount_name(i): (mount, Export(mount.source, read_only=mount.read_only))
                for i, mount in enumerate(self.spec.local_mounts)
            }
        except OSError as exc:
            raise SessionError(f"local mount: {exc}") from None
        try:
            self._mux = await dial_websocket(url, token=self._token)
        except WireError as exc:
            raise SessionError(str(exc)) from None
        acceptor = asyncio.create_task(self._accept_streams(self._mux))
        reporter = asyncio.create_task(self._report_mounts()) if self.exports else None
        outcome = Outcome()
        try:
            self._control = control = await self._mux.open_stream()
            await write_header(control, TAG_CONTROL)
            control.write(wire_spec(self.spec).encode() + b"\n")
            await control.drain()
            while line := await control.readline():
                try:
                    event = decode_event(line)
                except EventError as exc:
                    log.warning("ignoring a bad event from the server: %s", exc)
                    continue
                if isinstance(event, Exit):
                    outcome.exit_code = event.code
                elif isinstance(event, Error):
                    outcome.errors.append(event.message)
                elif isinstance(event, Done):
                    outcome.reason = event.reason
                    self._mount_stats()  # the final counts, before the session says it is done
                self.on_event(event)
                if isinstance(event, Done):
                    return outcome
            if self._leaving:
                outcome.reason = "left the detached deployment running"
                return outcome
            raise SessionError("the server ended the session without saying it was done")
        except WireError as exc:
            if self._leaving:
                outcome.reason = "left the detached deployment running"
                return outcome
            raise SessionError(f"session lost: {exc}") from None
        finally:
            acceptor.cancel()
            if reporter is not None:
                reporter.cancel()
            for task in list(self._tasks):
                task.cancel()
            await self._mux.aclose(timeout=2)

    async def leave(self) -> None:
        """Go away without tearing down: a detached deployment keeps running on the server."""
        self._leaving = True
        if self._mux is not None:
            await self._mux.aclose(timeout=2)

    async def down(self) -> None:
        """Ask the server to tear the deployment down; run() returns once it is done."""
        if self._control is not None:
            with contextlib.suppress(WireError):
                self._control.write(json.dumps({"action": "down"}).encode() + b"\n")
                await self._control.drain()

    async def apply_policy(self, egress: EgressSpec) -> str:
        """Apply a new egress policy (default, rules, script) to the live session at all three hops.

        Compiles here first, so a draft that does not compile never leaves this machine; returns the
        new version. The server and the caretaker report their switch as `policy` events.
        """
        if self._control is None:
            raise SessionError("the session is not running")
        current = self.spec.egress or EgressSpec()
        egress = current.model_copy(update={"default": egress.default, "rules": egress.rules,
                                            "script": egress.script})
        policy = compile_policy(egress)  # raises PolicyError
        line = {"action": "policy", "egress": egress.model_dump(include={"default", "rules", "script"})}
        try:
            self._control.write(json.dumps(line).encode() + b"\n")
            await self._control.drain()
        except WireError as exc:
            raise SessionError(f"session lost: {exc}") from None
        self.spec = self.spec.model_copy(update={"egress": egress})
        self.policy = policy
        self.on_event(PolicyApplied(hop="client", version=policy.version))
        return policy.version

    async def _accept_streams(self, mux: Mux) -> None:
        with contextlib.suppress(WireError):
            while True:
                stream = await mux.accept_stream()
                task = asyncio.create_task(self._serve_stream(stream))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _serve_stream(self, stream: MuxStream) -> None:
        try:
            header = await read_header(stream)
            if header.tag == TAG_CALLER_EGRESS:
                await self._egress(stream, EgressRequest.from_fields(header.fields))
            elif header.tag == TAG_CALLER_MOUNT:
                await self._serve_mount(stream, header.get("name") or "")
            elif header.tag == TAG_CALLER_CREDENTIAL:
                await self._credential(stream, header.get("name") or "")
            else:
                stream.reset()
        except (BadRequest, WireError) as exc:
            log.info("bad stream from the server: %s", exc)
            stream.reset()

    async def _serve_mount(self, stream: MuxStream, name: str) -> None:
        """Serve one of our exports over 9P2000.L on this stream, until the pod's side closes it."""
        if name not in self.exports:
            stream.reset()
            return
        await serve_connection(self.exports[name][1], stream, stream)

    async def _report_mounts(self) -> None:
        while True:
            await asyncio.sleep(MOUNT_STATS_INTERVAL)
            self._mount_stats()

    def _mount_stats(self) -> None:
        """Report each mount's cumulative counters, when they moved since the last report."""
        for name, (mount, export) in self.exports.items():
            snap = export.stats.snapshot()
            if self._last_stats.get(name) == snap:
                continue
            self._last_stats[name] = snap
            self.on_event(MountStats(
                name=name, source=mount.source, target=mount.target, read_only=mount.read_only,
                ops=dict(snap.ops), bytes_read=snap.bytes_read, bytes_written=snap.bytes_written,
                errors=snap.total_errors, latency_ms_sum=sum(snap.latency_s.values()) * 1000,
            ))

    async def _credential(self, stream: MuxStream, name: str) -> None:
        """Mint one credential for the workload; an error is answered, never left hanging."""
        try:
            answer = (await self.sources.fetch(name)).to_json()
        except CredentialError as exc:
            answer = error_json(str(exc))
        stream.write(answer + b"\n")
        await stream.aclose()

    async def _egress(self, stream: MuxStream, request: EgressRequest) -> None:
        started = time.monotonic()
        verdict, streams = await self._decide_and_dial(request)

        def end(verdict: Verdict, up: int = 0, down: int = 0) -> None:
            self.on_event(ConnEnd(
                conn=request.conn, hop="client", outcome=verdict.kind, reason=verdict.reason,
                bytes_up=up, bytes_down=down, duration_ms=(time.monotonic() - started) * 1000,
            ))

        await write_verdict(stream, verdict)
        if streams is None:
            await stream.aclose()
            return end(verdict)
        result = await splice(stream, streams)
        end(verdict, result.a_to_b, result.b_to_a)

    async def _decide_and_dial(
        self, request: EgressRequest
    ) -> tuple[Verdict, tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]:
        if self.policy is None:
            route, reason, version = Route.DENY, "caller policy does not compile", ""
        else:
            decision = self.policy.route(request.destination, now_ms=request.t_ms or None)
            route, reason, version = decision.route, decision.reason, decision.version
        self.on_event(HopDecision(
            conn=request.conn, hop="client", route=route, reason=reason, version=version,
            host=request.host, ip=request.ip, port=request.port, t_ms=request.t_ms,
        ))
        if route is not Route.CLIENT:
            return Verdict(VerdictKind.DENY, f"caller policy: {reason} routes it {route}"), None
        scheme = request.url.partition("://")[0] if request.url else None
        scheme = scheme if scheme in ("http", "https") else None
        target = request.host
        if not reason.startswith("rule ") and self.proxies.proxy_for(target, request.port, scheme) is None:
            # A direct dial the policy did not name: check what the name resolves to here (the pod's
            # idea of its address means nothing on this side), then dial exactly that address.
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(target, request.port, type=socket.SOCK_STREAM)
            except OSError as exc:
                return Verdict(VerdictKind.REFUSED, f"cannot resolve {target}: {exc.strerror or exc}"), None
            for info in infos:
                ip = parse_ip(str(info[4][0]))
                if ip is not None and (why := refusal(ip, CLIENT_REFUSED)):
                    return Verdict(VerdictKind.DENY, f"caller does not dial {why} unless a rule names it"), None
            target = str(infos[0][4][0])
        try:
            streams = await dial(target, request.port, self.proxies, timeout=DIAL_TIMEOUT, scheme=scheme)
        except DialError as exc:
            kind = VerdictKind.TIMEOUT if exc.kind == "timeout" else VerdictKind.REFUSED
            return Verdict(kind, exc.reason), None
        return Verdict(VerdictKind.OK), streams
