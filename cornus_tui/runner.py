"""Run one deploy-attach session for the command line: against a given server, or an embedded one."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cornus_core.caller import Outcome
from cornus_core.events import Error
from cornus_core.proxy.settings import ProxySettings, merge_env_proxies
from cornus_core.spec import DeploySpec

if TYPE_CHECKING:
    from server.backends.base import Backend, Deployment

EXIT_OK = 0
EXIT_DEPLOY_FAILED = 3
EXIT_SESSION_LOST = 4
EXIT_INTERRUPTED = 130


def exit_code(outcome: Outcome, report: Callable[[str], None]) -> int:
    """The command's exit status for a finished session: the workload's own status when it ran."""
    if outcome.exit_code is not None:
        if outcome.exit_code != 0:
            report(f"the workload exited with status {outcome.exit_code}")
        return outcome.exit_code if 0 <= outcome.exit_code <= 255 else 128 + (-outcome.exit_code % 128)
    for message in outcome.errors or []:
        report(message)
    return EXIT_DEPLOY_FAILED


@dataclass(frozen=True)
class Target:
    url: str
    token: str
    embedded: bool
    backend: str = ""  # the embedded server's backend; empty for a remote server


BACKEND_ENV = "CORNUS_BACKEND"  # process | local: the embedded server's backend, instead of detecting one
NAT_ENV = "CORNUS_LOCAL_NAT"  # 1: local pods get IPv4 NAT for their own `cluster` egress (off by default)


@contextlib.asynccontextmanager
async def session_target(server_url: str | None, token: str | None = None) -> AsyncIterator[Target]:
    """The server to attach to: `server_url` with the caller token, or an embedded server on loopback.

    The embedded server deploys into local pods (network namespaces) when this machine allows them,
    else into plain processes, and then says so in a non-fatal error event of every session:
    transparent egress and network isolation need pods. `CORNUS_BACKEND=process|local` chooses instead;
    `CORNUS_LOCAL_NAT=1` lets pods' own `cluster` egress leave the machine through IPv4 NAT.
    """
    if server_url:
        token = token or os.environ.get("CORNUS_AUTH_TOKEN", "")
        scheme, sep, rest = server_url.partition("://")
        url = {"http": "ws", "https": "wss"}.get(scheme, scheme) + sep + rest
        yield Target(url, token, embedded=False)
        return
    from server.app import CornusServer
    from server.auth import Authenticator, new_secret
    from server.backends.base import BackendError
    from server.backends.local.backend import LocalBackend
    from server.gateway import Gateway

    token = secrets.token_urlsafe(24)
    backend = await _embedded_backend()
    server = CornusServer(auth=Authenticator(token, new_secret()), backend=backend, gateway=Gateway.from_env())
    url = await server.start("127.0.0.1", 0)
    try:
        if isinstance(backend, LocalBackend):
            backend.listeners = server
            with contextlib.suppress(BackendError):  # it fails again, with its reason, at deploy
                await backend.start()
        yield Target(url, token, embedded=True, backend=backend.name)
    finally:
        await server.close()
        if isinstance(backend, LocalBackend):
            with contextlib.suppress(BackendError):
                await backend.close()


async def _embedded_backend() -> Backend:
    from server.backends.local import detect_isolation
    from server.backends.local.backend import LocalBackend
    from server.backends.process import ProcessBackend

    choice = os.environ.get(BACKEND_ENV, "").strip().lower()
    nat = os.environ.get(NAT_ENV, "").strip() in ("1", "true", "yes")
    if choice == "local":
        return LocalBackend(nat=nat)
    if choice == "process":
        return StandIn(ProcessBackend())
    if choice:
        print(f"cornus-tui: {BACKEND_ENV}={choice!r} is neither process nor local; choosing by what this "
              "machine allows", file=sys.stderr)
    isolation = await detect_isolation()
    if isolation.kind == "root":
        return LocalBackend(nat=nat)
    return StandIn(
        ProcessBackend(),
        f"local pods are unavailable ({'; '.join(isolation.failures) or isolation.reason}), so the workload runs as a plain process "
        "on this machine: transparent egress and network isolation are unavailable",
    )


class StandIn:
    """A backend standing in for local pods: it refuses the transparent mode it cannot capture for, where
    the app would bypass the policy unnoticed, and says why pods are missing (`notice`, a non-fatal error
    event in every session) unless they were not wanted."""

    def __init__(self, backend: Backend, notice: str | None = None) -> None:
        self.backend = backend
        self.name = backend.name
        self.notice = notice

    async def apply(self, dep: Deployment) -> None:
        from server.backends.base import BackendError

        if self.notice:
            dep.emit(Error(message=self.notice, fatal=False))
        egress = getattr(dep.spec, "egress", None)
        if egress is not None and egress.mode == "transparent":
            raise BackendError(f"egress mode 'transparent' needs local pods; this server runs workloads as "
                               f"plain processes (backend {self.name}), where nothing could capture their traffic")
        await self.backend.apply(dep)

    async def wait(self, dep: Deployment) -> int:
        return await self.backend.wait(dep)

    async def delete(self, dep: Deployment) -> None:
        await self.backend.delete(dep)

    def status(self, dep: Deployment) -> str:
        return self.backend.status(dep)


def prepare_spec(spec: DeploySpec, proxies: ProxySettings) -> DeploySpec:
    """Env mode: copy the caller's resolved proxy settings into the workload's env (the user's keys win);
    explicit `egress.proxies` replace the resolved ones."""
    egress = spec.egress
    if egress is not None and egress.mode != "env":
        return spec
    resolved = dict(egress.proxies) if egress is not None and egress.proxies else proxies.to_env()
    if not resolved:
        return spec
    return spec.model_copy(update={"env": merge_env_proxies(spec.env, resolved)})
