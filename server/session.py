"""One caller's deploy-attach session: the control stream, the deployment's lifecycle, and the
caretaker connection that belongs to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from pydantic import ValidationError

from cornus_core.credentials import error_json
from cornus_core.events import (
    ConnEnd,
    CredentialRequest,
    Done,
    Error,
    Event,
    EventError,
    Exit,
    HopDecision,
    Log,
    MountStats,
    PolicyApplied,
    Ready,
    Status,
    decode_event,
)
from cornus_core.policy import Isolation, Policy, PolicyError, compile_policy
from cornus_core.proxy.transparent import CaptureError
from cornus_core.spec import DeploySpec, EgressSpec, SpecError, detach_check
from cornus_core.streams import (
    TAG_CALLER_CREDENTIAL,
    TAG_CALLER_MOUNT,
    TAG_CONTROL,
    TAG_CREDENTIAL,
    TAG_EGRESS,
    TAG_MOUNT,
    TAG_POLICY,
    TAG_TELEMETRY,
    BadRequest,
    EgressRequest,
    mount_name,
)
from cornus_core.wire import Mux, MuxStream, WireError, read_header, read_verdict, splice, write_header

from .auth import Authenticator, new_id
from .backends.base import Backend, BackendError, Deployment
from .gateway import Gateway
from .relay import relay_egress

log = logging.getLogger(__name__)

MAX_SPEC_LINE = 1024 * 1024
MAX_EVENT_QUEUE = 10_000
DOWN = "caller asked to tear down"
# The server runs callers' PAC scripts: each in a killable worker process, so no script can stall it.
PAC_ISOLATION: Isolation = "process"


class SessionRefused(Exception):
    """The caller's request cannot be served; the message is sent to the caller as an error event."""


class AttachSession:
    """Lives as long as the caller's connection (or, detached, until `down`)."""

    def __init__(self, mux: Mux, *, registry: Registry) -> None:
        self.id = new_id()
        self.mux = mux
        self.registry = registry
        self.deployment: Deployment | None = None
        self.policy: Policy | None = None
        self.deployed_version = ""  # the version in the caretaker's config
        self.caretaker: Mux | None = None
        self._events: asyncio.Queue[Event | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task[Any]] = set()

    def emit(self, event: Event) -> None:
        """Queue an event for the caller. Connection telemetry is dropped when the caller falls far behind
        (it never blocks a data path); the session's own events (status, errors, exit, done) never are."""
        if self._events.qsize() >= MAX_EVENT_QUEUE and isinstance(event, HopDecision | ConnEnd | MountStats):
            return
        self._events.put_nowait(event)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self) -> None:
        try:
            control = await asyncio.wait_for(self.mux.accept_stream(), 30)
            header = await read_header(control)
        except (TimeoutError, WireError) as exc:
            log.info("session %s: no control stream: %s", self.id[:8], exc)
            return
        if header.tag != TAG_CONTROL:
            control.reset()
            return
        writer = asyncio.create_task(self._write_events(control))
        try:
            await self._serve(control)
        except SessionRefused as exc:
            self.emit(Error(message=str(exc)))
            self.emit(Done(reason="refused"))
        finally:
            self._events.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, 5)
            for task in list(self._tasks):
                task.cancel()
            self.registry.forget(self)

    async def _write_events(self, control: MuxStream) -> None:
        """Send queued events as JSON lines; whatever queued up meanwhile goes out in one write."""
        done = False
        while not done:
            batch = [await self._events.get()]
            while not self._events.empty() and len(batch) < 512:
                batch.append(self._events.get_nowait())
            if None in batch:
                done = True
                batch = batch[: batch.index(None)]
            try:
                control.write(b"".join(event.encode() for event in batch if event is not None))
                await control.drain()
            except WireError:
                return
        with contextlib.suppress(WireError):
            await control.aclose()

    async def _serve(self, control: MuxStream) -> None:
        try:
            line = await control.readuntil(b"\n", limit=MAX_SPEC_LINE)
        except WireError as exc:
            raise SessionRefused(f"expected the deploy spec as one JSON line: {exc}") from None
        spec = self._validate(line)
        dep = self._deployment(spec)
        self.emit(Status(state="deploying", detail=f"backend {self.registry.backend.name}"))
        self._spawn(self._accept_caller_streams())
        try:
            await self.registry.backend.apply(dep)
        except BackendError as exc:
            self.emit(Error(message=f"deploy failed: {exc}"))
            await self._teardown(dep, "deploy failed")
            return
        self.emit(Ready(deployment=dep.id, backend=self.registry.backend.name,
                        policy_version=self.policy.version if self.policy else ""))
        self.emit(Status(state="running"))

        workload = asyncio.create_task(self.registry.backend.wait(dep))
        caller = asyncio.create_task(self._read_control(control))
        done, _ = await asyncio.wait({workload, caller}, return_when=asyncio.FIRST_COMPLETED)
        if caller in done and caller.result() != DOWN and dep.spec.detach:
            # Detached: the workload outlives its caller (its policy never routes to it).
            log.info("session %s: caller left; deployment %s stays detached", self.id[:8], dep.id)
            await asyncio.wait({workload})
        if workload.done():
            self.emit(Exit(code=workload.result()))
            reason = "workload exited"
        else:
            reason = caller.result()
        caller.cancel()
        await self._teardown(dep, reason)

    def _validate(self, line: bytes) -> DeploySpec:
        try:
            spec = DeploySpec.model_validate(json.loads(line))
        except ValueError as exc:  # JSON and pydantic errors alike
            text = str(exc) if not isinstance(exc, ValidationError) else "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            raise SessionRefused(f"invalid deploy spec: {text}") from None
        try:
            self.policy = compile_policy(spec.egress or EgressSpec(), pac_isolation=PAC_ISOLATION)
            self.deployed_version = self.policy.version
            if spec.detach and (why := detach_check(spec)):
                raise SessionRefused(f"detach refused: {why}")
        except (PolicyError, SpecError) as exc:
            raise SessionRefused(f"invalid egress policy: {exc}") from None
        return spec

    def _deployment(self, spec: DeploySpec) -> Deployment:
        dep_id = new_id(9)
        egress = spec.egress or EgressSpec()
        config: dict[str, Any] = {"deployment": dep_id}
        if egress.mode in ("proxy", "transparent"):
            config["egress"] = {
                "mode": egress.mode,
                "listen_port": egress.listen_port,
                "policy": egress.model_dump(include={"default", "rules", "script"}),
            }
        if spec.local_mounts:
            config["mounts"] = [{"name": mount_name(i), "target": m.target, "read_only": m.read_only}
                                for i, m in enumerate(spec.local_mounts)]
        if spec.credentials.sources:
            config["credentials"] = [source.model_dump(exclude={"config"}) for source in spec.credentials.sources]
        dep = Deployment(
            id=dep_id, spec=spec, server_url=self.registry.caretaker_url,
            caretaker_token=self.registry.auth.mint_caretaker_token(dep_id),
            caretaker_config=config, emit=self.emit,
        )
        self.deployment = dep
        self.registry.deployments[dep_id] = self
        return dep

    async def _read_control(self, control: MuxStream) -> str:
        """Wait for `{"action": "down"}` or the caller going away; returns why the session ends."""
        while True:
            try:
                line = await control.readline()
            except WireError:
                return "caller connection lost"
            if not line:
                return "caller closed the session"
            try:
                message = json.loads(line)
                action = message.get("action")
            except (ValueError, AttributeError):
                self.emit(Error(message=f"ignored a control line that is not a JSON object: {line[:80]!r}",
                                fatal=False))
                continue
            if action == "down":
                return DOWN
            if action == "policy":
                await self._update_policy(message.get("egress"))
            else:
                self.emit(Error(message=f"ignored unknown control action {action!r}", fatal=False))

    async def _update_policy(self, raw: Any) -> None:
        """A live policy update: compile, switch this hop, then push it to the caretaker."""
        assert self.deployment is not None
        current = self.deployment.spec.egress or EgressSpec()
        try:
            update = EgressSpec.model_validate(raw)
            egress = current.model_copy(update={"default": update.default, "rules": update.rules,
                                                "script": update.script})
            policy = compile_policy(egress, pac_isolation=PAC_ISOLATION)
        except (ValueError, PolicyError) as exc:
            self.emit(Error(message=f"policy update refused: {exc}", fatal=False))
            return
        self.deployment.spec = self.deployment.spec.model_copy(update={"egress": egress})
        self.policy = policy
        self.emit(PolicyApplied(hop="server", version=policy.version))
        if self.caretaker is not None and not self.caretaker.is_closed:
            await self._push_policy(self.caretaker)
        try:
            await self.registry.backend.update_policy(self.deployment)
        except (BackendError, CaptureError) as exc:
            self.emit(Error(message=f"the backend could not apply the policy update: {exc}", fatal=False))

    async def _push_policy(self, mux: Mux) -> None:
        assert self.deployment is not None
        egress = self.deployment.spec.egress or EgressSpec()
        try:
            stream = await mux.open_stream()
            await write_header(stream, TAG_POLICY)
            stream.write(egress.model_dump_json(include={"default", "rules", "script"}).encode() + b"\n")
            verdict = await asyncio.wait_for(read_verdict(stream), 10)
            await stream.aclose()
        except (TimeoutError, WireError) as exc:
            self.emit(Error(message=f"could not update the caretaker's policy: {exc}", fatal=False))
            return
        if not verdict.ok:
            self.emit(Error(message=f"the caretaker refused the policy update: {verdict.reason}", fatal=False))

    async def _teardown(self, dep: Deployment, reason: str) -> None:
        """The workload goes first, then everything that served it."""
        self.emit(Status(state="stopping", detail=reason))
        try:
            await self.registry.backend.delete(dep)
        except BackendError as exc:
            self.emit(Error(message=f"delete failed: {exc}", fatal=False))
        self.emit(Status(state="deleted"))
        self.registry.deployments.pop(dep.id, None)
        if self.caretaker is not None:
            await self.caretaker.aclose(timeout=2)
        self.emit(Done(reason=reason))

    async def _accept_caller_streams(self) -> None:
        # Callers open only the control stream; anything else is refused.
        with contextlib.suppress(WireError):
            while True:
                stream = await self.mux.accept_stream()
                stream.reset()

    # -- the caretaker side -------------------------------------------------------------------

    async def serve_caretaker(self, mux: Mux) -> None:
        if self.caretaker is not None and not self.caretaker.is_closed:
            await self.caretaker.aclose(timeout=1)  # a redialing caretaker replaces its old connection
        self.caretaker = mux
        if self.policy is not None and self.policy.version != self.deployed_version:
            self._spawn(self._push_policy(mux))  # a redialed caretaker catches up with live updates
        try:
            while True:
                stream = await mux.accept_stream()
                self._spawn(self._caretaker_stream(stream))
        except WireError:
            return

    async def _caretaker_stream(self, stream: MuxStream) -> None:
        try:
            header = await read_header(stream)
            if header.tag == TAG_EGRESS:
                request = EgressRequest.from_fields(header.fields)
                assert self.policy is not None
                await relay_egress(stream, request, policy=self.policy, caller=self.mux,
                                   gateway=self.registry.gateway, emit=self.emit)
            elif header.tag == TAG_CREDENTIAL:
                await self._relay_credential(stream, header.get("name") or "")
            elif header.tag == TAG_MOUNT:
                await self._relay_mount(stream, header.get("name") or "")
            elif header.tag == TAG_TELEMETRY:
                await self._telemetry(stream)
            else:
                stream.reset()
        except (BadRequest, WireError) as exc:
            log.info("session %s: bad caretaker stream: %s", self.id[:8], exc)
            stream.reset()

    async def _relay_credential(self, stream: MuxStream, name: str) -> None:
        """Bridge a caretaker's credential request to the caller, for names this session declared only."""
        assert self.deployment is not None
        declared = {source.name for source in self.deployment.spec.credentials.sources}
        if name not in declared:
            log.info("session %s: refused credential %r: not declared by the session", self.id[:8], name)
            stream.write(error_json(f"credential {name!r} is not declared by this session") + b"\n")
            await stream.aclose()
            return
        await self._bridge_to_caller(stream, TAG_CALLER_CREDENTIAL, name)

    async def _relay_mount(self, stream: MuxStream, name: str) -> None:
        """Bridge a caretaker's 9P stream to the caller's export of that name, if the session declared it."""
        assert self.deployment is not None
        if name not in {mount_name(i) for i in range(len(self.deployment.spec.local_mounts))}:
            log.info("session %s: refused mount %r: not declared by the session", self.id[:8], name)
            stream.reset()
            return
        await self._bridge_to_caller(stream, TAG_CALLER_MOUNT, name)

    async def _bridge_to_caller(self, stream: MuxStream, tag: str, name: str) -> None:
        upstream = await self.mux.open_stream()
        await write_header(upstream, tag, {"name": name})
        await splice(stream, upstream)

    async def _telemetry(self, stream: MuxStream) -> None:
        """Forward the caretaker's reports. The pod speaks only for its own hop: anything else it
        sends (a `done`, an `exit`, another hop's decision) is dropped, never shown as the server's."""
        while line := await stream.readline():
            with contextlib.suppress(EventError):
                event = decode_event(line)
                if caretaker_may_report(event):
                    self.emit(event)


def caretaker_may_report(event: Event) -> bool:
    if isinstance(event, HopDecision | ConnEnd | PolicyApplied):
        return event.hop == "caretaker"
    if isinstance(event, Log):
        return event.source == "caretaker"
    return isinstance(event, CredentialRequest)


class Registry:
    """Every attach session and deployment this server holds, by unguessable id."""

    def __init__(self, *, auth: Authenticator, backend: Backend, gateway: Gateway, caretaker_url: str) -> None:
        self.auth = auth
        self.backend = backend
        self.gateway = gateway
        self.caretaker_url = caretaker_url
        self.sessions: dict[str, AttachSession] = {}
        self.deployments: dict[str, AttachSession] = {}

    def open(self, mux: Mux) -> AttachSession:
        session = AttachSession(mux, registry=self)
        self.sessions[session.id] = session
        return session

    def forget(self, session: AttachSession) -> None:
        self.sessions.pop(session.id, None)
        if session.deployment is not None:
            self.deployments.pop(session.deployment.id, None)
