"""The in-process backend: the workload and its caretaker run as plain processes on the server's host.

It is the smallest backend that runs the whole product for real (egress in proxy mode through a
caretaker on loopback). It has no network namespace, so it cannot capture traffic transparently and
every caretaker listens on an ephemeral loopback port instead of the configured one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from typing import Any

from cornus_core.events import Error, Log, Status

from .base import BackendError, Deployment

READY_PREFIX = "READY "
CARETAKER_READY_TIMEOUT = 30.0
STOP_GRACE = 5.0

# Variables a workload inherits from the server's environment; everything else comes from its spec.
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM")


def note_unused_image(dep: Deployment, backend: str) -> None:
    """A backend that runs commands on this machine says so when the spec names an image."""
    image = getattr(dep.spec, "image", None)
    if image:
        dep.emit(Error(message=f"the {backend} backend runs the spec's command on this machine: image {image!r} "
                               "is not used (the dockerhost backend runs images)", fatal=False))


def workload_argv(command: Any) -> list[str]:
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        return list(command)
    raise BackendError("the spec needs a command (a list, or a string run with sh -c) on this backend")


async def pump_lines(stream: asyncio.StreamReader | None, dep: Deployment, source: str, name: str) -> None:
    if stream is None:
        return
    while line := await stream.readline():
        dep.emit(Log(source=source, line=line.decode(errors="replace").rstrip("\n"), stream=name))


async def stop_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, then SIGKILL it when it outstays the grace period."""
    if proc.returncode is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE)
            return
        except TimeoutError:
            continue


def workload_status(dep: Deployment) -> str:
    """pending, running, exited N or deleted: what a backend that keeps its workload's process says."""
    if dep.state.get("deleted"):
        return "deleted"
    app = dep.state.get("app")
    if app is None:
        return "pending"
    return "running" if app.returncode is None else f"exited {app.returncode}"


async def read_caretaker_ready(caretaker: asyncio.subprocess.Process, dep: Deployment) -> dict[str, Any]:
    """The caretaker's ``READY {json}`` line (its readiness gate); lines before it become log events."""
    assert caretaker.stdout is not None
    stdout = caretaker.stdout

    async def read() -> dict[str, Any]:
        while line := await stdout.readline():
            text = line.decode(errors="replace").rstrip("\n")
            if text.startswith(READY_PREFIX):
                try:
                    info = json.loads(text[len(READY_PREFIX):])
                except ValueError:
                    info = None
                if not isinstance(info, dict):
                    raise BackendError(f"the caretaker's READY line is not a JSON object: {text[:200]!r}")
                return info
            dep.emit(Log(source="caretaker", line=text))
        raise BackendError(f"the caretaker exited before it was ready (status {await caretaker.wait()})")

    try:
        return await asyncio.wait_for(read(), CARETAKER_READY_TIMEOUT)
    except TimeoutError:
        raise BackendError(f"the caretaker was not ready within {CARETAKER_READY_TIMEOUT:.0f} s") from None


class ProcessBackend:
    name = "process"

    def __init__(
        self, caretaker_argv: list[str] | None = None, *, notice: str | None = None, host_mounts: bool = False
    ) -> None:
        self._caretaker_argv = caretaker_argv or [sys.executable, "-m", "caretaker"]
        self.notice = notice  # why this backend stands in for pods: a non-fatal error in every session
        # Without a mount namespace a client-local mount lands on this host's own filesystem, at a path
        # the caller chose: refused unless the operator opts in.
        self.host_mounts = host_mounts

    async def apply(self, dep: Deployment) -> None:
        if self.notice:
            dep.emit(Error(message=self.notice, fatal=False))
        note_unused_image(dep, self.name)
        egress = getattr(dep.spec, "egress", None)
        if egress is not None and egress.mode == "transparent":
            # Nothing could capture a plain process's traffic: it would bypass the policy unnoticed.
            raise BackendError("egress mode 'transparent' needs local pods; this server runs workloads as "
                               "plain processes (backend process), where nothing could capture their traffic")
        if getattr(dep.spec, "local_mounts", None) and not self.host_mounts:
            raise BackendError("client-local mounts need local pods (a private mount namespace); this server "
                               "runs workloads as plain processes (backend process)")
        argv = workload_argv(getattr(dep.spec, "command", None))
        config = json.loads(json.dumps(dep.caretaker_config))
        if "egress" in config:
            config["egress"]["listen_host"] = "127.0.0.1"
            config["egress"]["listen_port"] = 0  # processes share the host's loopback
        base_env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        caretaker_env = {
            **base_env,
            "PYTHONUNBUFFERED": "1",
            "CORNUS_SERVER_URL": dep.server_url,
            "CORNUS_CARETAKER_TOKEN": dep.caretaker_token,
            "CORNUS_CARETAKER_CONFIG": json.dumps(config),
        }
        dep.emit(Status(state="deploying", detail="starting caretaker"))
        caretaker = await asyncio.create_subprocess_exec(
            *self._caretaker_argv, env=caretaker_env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        dep.state["caretaker"] = caretaker
        pumps = [asyncio.create_task(pump_lines(caretaker.stderr, dep, "caretaker", "stderr"))]
        dep.state["pumps"] = pumps
        ready = await read_caretaker_ready(caretaker, dep)
        pumps.append(asyncio.create_task(pump_lines(caretaker.stdout, dep, "caretaker", "stdout")))

        env = {**base_env, **dict(getattr(dep.spec, "env", None) or {}), **ready.get("app_env", {})}
        dep.emit(Status(state="deploying", detail="starting workload"))
        try:
            app = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=getattr(dep.spec, "workdir", None) or None,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"cannot start workload {argv[0]!r}: {exc.strerror or exc}") from None
        dep.state["app"] = app
        pumps.append(asyncio.create_task(pump_lines(app.stdout, dep, "app", "stdout")))
        pumps.append(asyncio.create_task(pump_lines(app.stderr, dep, "app", "stderr")))

    async def wait(self, dep: Deployment) -> int:
        app: asyncio.subprocess.Process = dep.state["app"]
        code = await app.wait()
        # Let the log pumps drain what the workload printed last.
        for pump in dep.state.get("pumps", [])[-2:]:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(pump), 2.0)
        return code

    async def delete(self, dep: Deployment) -> None:
        for key in ("app", "caretaker"):  # the workload goes first, then its caretaker
            proc = dep.state.get(key)
            if proc is not None:
                await stop_group(proc)
        for pump in dep.state.pop("pumps", []):
            pump.cancel()
        dep.state["deleted"] = True

    async def update_policy(self, dep: Deployment) -> None:
        """Nothing to do: processes are not captured, the caretaker alone applies the policy."""

    def status(self, dep: Deployment) -> str:
        return workload_status(dep)
