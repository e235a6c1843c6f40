"""Run one deploy-attach session for the command line: against a given server, or an embedded one."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cornus_core.caller import Outcome
from cornus_core.proxy.settings import ProxySettings, merge_env_proxies
from cornus_core.spec import DeploySpec

if TYPE_CHECKING:
    pass

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
    for message in outcome.errors:
        report(message)
    return EXIT_DEPLOY_FAILED


@dataclass(frozen=True)
class Target:
    url: str
    token: str
    embedded: bool
    backend: str = ""  # the embedded server's backend; empty for a remote server


BACKEND_ENV = "CORNUS_BACKEND"  # process | local | dockerhost: the embedded server's backend, instead of detecting one


@contextlib.asynccontextmanager
async def session_target(server_url: str | None, token: str | None = None) -> AsyncIterator[Target]:
    """The server to attach to: `server_url` with the caller token, or an embedded server on loopback.

    The embedded server deploys into local pods (network namespaces) when this machine allows them,
    else into plain processes, and then says so in a non-fatal error event of every session:
    transparent egress and network isolation need pods. `CORNUS_BACKEND=process|local|dockerhost` chooses instead;
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
    from server.backends.choose import choose_backend, start_backend, stop_backend
    from server.gateway import Gateway

    token = secrets.token_urlsafe(24)
    backend = await choose_backend(os.environ.get(BACKEND_ENV))
    server = CornusServer(auth=Authenticator(token, new_secret()), backend=backend, gateway=Gateway.from_env())
    url = await server.start("127.0.0.1", 0)
    try:
        await start_backend(backend, server)
        yield Target(url, token, embedded=True, backend=backend.name)
    finally:
        await server.close()
        await stop_backend(backend)


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
