"""The local backend, the embedded default: every deployment runs in a pod of its own on this machine.

A pod is a network namespace joined to the host by a veth, with a mount namespace of its own (see
``pod.py``). Its caretaker starts first, inside the pod, and dials the server at the host end of the
veth (the server's caretaker endpoint is served there for as long as the pod lives, see ``Listeners``).
Once the caretaker says READY the workload starts beside it, with the spec's environment, the
caretaker's ``app_env`` (proxy mode) and the spec's ``workdir``.

Transparent mode: after READY the backend loads the capture rules into the pod's namespace, sending
every app TCP connection (IPv4 and IPv6, loopback and link-local excepted) to the caretaker's port, and
the app's DNS (UDP and TCP port 53) to the caretaker's resolver (its dns role, which forwards to
``dns_upstream`` or the nameservers of /etc/resolv.conf). Other UDP is dropped unless the deployed policy
routes its address ``cluster`` (see ``udp_policy``: name rules and PAC scripts cannot be said in nft, so
from the first of them on UDP is dropped; a live policy update reloads these UDP rules). The
workload starts only after the rules are loaded, and the caretaker listens before it says READY. The
caretaker's own sockets are exempt: by its uid when a dedicated user exists on this machine (it then
runs as that user), else by a socket mark it puts on every outbound socket (``CORNUS_SOCKET_MARK``).
Capture keeps a well-behaved app's traffic on the policy; it is not a sandbox against a workload that
runs as root inside the pod, which could mark its own sockets.

NAT is off by default: nothing forwards or masquerades a pod's packets, so its ``cluster`` route
reaches this host's own addresses and no further (and a name resolver elsewhere times out).
``pod_setup`` runs on each new pod before its caretaker starts, e.g. to join it to another network
(a second link and routes into a cluster network of its own). ``nat=True`` gives each pod IPv4 masquerading for its ``cluster`` egress (the uplink must also forward
for it to leave the machine). Routes ``client`` and ``gateway`` never need it: they ride the
caretaker's connection to the server.

Without root (``rootless=True``, see ``rootless.py``): the pod is a user namespace with network and mount
namespaces of its own, the caretaker dials the server's listener on a unix socket in the run directory,
is exempt from capture by socket mark (the pod has one uid), and ``cluster`` egress reaches only the
pod's own loopback. Client-local mounts need /dev/fuse open to the server's user; else they are refused.

Teardown: the workload first, then the caretaker, then the capture rules, the server's listener on
the veth and the pod itself (namespaces, veth, NAT table). ``start`` removes what a crashed earlier
run of the server left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pwd
import shutil
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from cornus_core.events import Error, Status
from cornus_core.netguard import is_loopback_host
from cornus_core.proxy.transparent import CaptureError, install_capture, remove_capture, udp_policy
from cornus_core.spec import EgressSpec

from ..base import BackendError, Deployment
from ..process import (
    INHERITED_ENV,
    note_unused_image,
    pump_lines,
    read_caretaker_ready,
    stop_group,
    workload_argv,
    workload_status,
)
from ._commands import PodError
from .addresses import DEFAULT_IPV4_RANGE, DEFAULT_IPV6_RANGE, AddressError
from .leftovers import cleanup_leftovers
from .naming import DEFAULT_PREFIX, NamingError
from .pod import DEFAULT_RUN_DIR, STOP_GRACE, Pod, PodHost
from .rootless import RootlessPod, fuse_unusable, rootless_run_dir

log = logging.getLogger(__name__)

DEFAULT_CARETAKER_USER = "cornus-caretaker"  # a dedicated system user, when the machine has one
CARETAKER_MARK = 0x636E6374  # on the caretaker's own sockets when it runs as root: "cnct"
LOG_DRAIN = 2.0  # how long the last lines of a stopped process may take to arrive

_SETUP_ERRORS = (PodError, CaptureError, AddressError, NamingError, OSError)


class Listeners(Protocol):
    """Where the server serves its caretaker endpoint on another address (``CornusServer`` is one)."""

    async def add_listener(self, host: str, port: int = 0) -> str:
        """Listen on ``host`` too; return the ws:// URL of that listener."""
        ...

    async def add_unix_listener(self, path: str) -> str:
        """Listen on the unix socket ``path`` too; return the ws+unix:// URL of that listener."""
        ...

    async def close_listener(self, url: str) -> None: ...


class LocalBackend:
    name = "local"

    def __init__(
        self,
        *,
        listeners: Listeners | None = None,
        prefix: str = DEFAULT_PREFIX,
        run_dir: str | Path | None = None,
        ipv4_range: str = DEFAULT_IPV4_RANGE,
        ipv6_range: str | None = DEFAULT_IPV6_RANGE,
        nat: bool = False,
        caretaker_user: str | None = DEFAULT_CARETAKER_USER,
        caretaker_argv: list[str] | None = None,
        stop_grace: float = STOP_GRACE,
        dns_upstream: Sequence[str] = (),
        pod_setup: Callable[[Pod | RootlessPod], Awaitable[None]] | None = None,
        rootless: bool = False,
        notice: str | None = None,
    ) -> None:
        """``listeners`` (the server) makes the caretaker endpoint reachable from each pod; without it the
        deployment's own caretaker URL must already be reachable from a pod (not loopback). ``dns_upstream``
        names the resolvers a transparent pod's DNS is forwarded to (``IP``, ``IP:PORT``, ``[IPv6]:PORT``;
        default: this machine's /etc/resolv.conf). ``pod_setup(pod)`` runs on every new pod before its
        caretaker starts; what it adds inside the pod's namespace goes with the pod.

        ``rootless`` makes user-namespace pods (see ``rootless.py``) instead, which need no root: the
        caretaker reaches the server through a unix socket (so ``listeners`` is required), runs exempt by
        socket mark, and ``cluster`` egress reaches only the pod's own loopback (no NAT is possible).
        ``notice`` (what such pods lack) becomes a non-fatal error in every session. ``run_dir``
        defaults to /run/cornus, or for rootless pods without root a directory of this user's own."""
        if rootless and nat:
            raise BackendError("user-namespace pods cannot have NAT: masquerading needs root on this machine")
        self.listeners = listeners
        self.prefix = prefix
        self.rootless = rootless
        self.notice = notice
        self.run_dir = Path(run_dir) if run_dir is not None else (
            rootless_run_dir() if rootless else DEFAULT_RUN_DIR)
        self.nat = nat
        self.caretaker_user = caretaker_user
        self.stop_grace = stop_grace
        self.dns_upstream = list(dns_upstream)
        self.pod_setup = pod_setup
        self._ranges = (ipv4_range, ipv6_range)
        self.caretaker_argv = caretaker_argv or [sys.executable, "-m", "caretaker"]
        self._host: PodHost | None = None
        self._starting = asyncio.Lock()

    @property
    def pod_host(self) -> PodHost | None:
        """This run's pod host (names, addresses, liveness lock), once started."""
        return self._host

    async def start(self) -> list[str]:
        """Remove the pods of crashed earlier runs (this prefix and run directory), then take this run's
        pod names; idempotent. Returns the removed pods' names."""
        async with self._starting:
            if self._host is not None:
                return []
            removed: list[str] = []
            try:
                removed = await cleanup_leftovers(self.prefix, run_dir=self.run_dir)
            except PodError as exc:  # what could not go stays for the next run; our names are fresh
                log.warning("local backend: %s", exc)
            if removed:
                log.warning("local backend: removed pods a crashed run left behind: %s", ", ".join(removed))
            try:
                self._host = PodHost(
                    prefix=self.prefix, run_dir=self.run_dir, ipv4_range=self._ranges[0],
                    ipv6_range=self._ranges[1], stop_grace=self.stop_grace,
                )
            except (PodError, AddressError, NamingError) as exc:
                raise BackendError(f"local pods are unavailable: {exc}") from None
            return removed

    async def close(self) -> None:
        """Destroy every pod this run still has."""
        if self._host is not None:
            try:
                await self._host.close()
            except PodError as exc:
                raise BackendError(str(exc)) from None
            finally:
                self._host = None

    async def __aenter__(self) -> LocalBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the Backend protocol -------------------------------------------------------------------

    async def apply(self, dep: Deployment) -> None:
        argv = workload_argv(getattr(dep.spec, "command", None))
        workdir = getattr(dep.spec, "workdir", None) or None
        if workdir is not None and not os.path.isdir(workdir):
            raise BackendError(f"the spec's workdir {workdir!r} is not a directory on this machine")
        path = dict(getattr(dep.spec, "env", None) or {}).get("PATH", os.environ.get("PATH"))
        _check_program(argv[0], path, workdir)
        if self.rootless:
            self._check_rootless(dep)
        elif self.listeners is None and is_loopback_host(urlsplit(dep.server_url).hostname or ""):
            raise BackendError(
                f"the caretaker URL {dep.server_url} is on loopback, which a pod cannot reach "
                "(give the local backend the server's listeners, or advertise an address of this machine)"
            )
        await self.start()
        assert self._host is not None
        if self.notice:
            dep.emit(Error(message=self.notice, fatal=False))
        note_unused_image(dep, self.name)
        try:
            await self._apply(dep, self._host, argv, workdir)
        except _SETUP_ERRORS as exc:
            raise BackendError(_reason(exc)) from None

    async def _apply(self, dep: Deployment, host: PodHost, argv: list[str], workdir: str | None) -> None:
        dep.emit(Status(state="deploying", detail="creating a pod"))
        pod: Pod | RootlessPod
        if self.rootless:
            pod = await RootlessPod.create(host)
        else:
            pod = await Pod.create(host, nat=self.nat, private_mounts=True)
        dep.state["pod"] = pod
        dep.emit(Status(state="deploying", detail=f"pod {pod.name} at {pod.pod_ip}"))
        if self.pod_setup is not None:
            await self.pod_setup(pod)

        uid = None if self.rootless else self._caretaker_uid()
        mark = None if uid is not None else CARETAKER_MARK
        config = dict(dep.caretaker_config)
        transparent = (config.get("egress") or {}).get("mode") == "transparent"
        if transparent and self.dns_upstream:
            config["dns"] = {**(config.get("dns") or {}), "upstream": self.dns_upstream}
        base_env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        caretaker_env = {
            **base_env,
            "PYTHONUNBUFFERED": "1",
            "CORNUS_SERVER_URL": await self._server_url(dep, pod),
            "CORNUS_CARETAKER_TOKEN": dep.caretaker_token,
            "CORNUS_CARETAKER_CONFIG": json.dumps(config),
        }
        dep.emit(Status(state="deploying", detail="starting caretaker"))
        pipe = asyncio.subprocess.PIPE
        caretaker = await pod.spawn(
            self.caretaker_argv, caretaker_env, cwd="/", uid=uid, mark=mark, stdout=pipe, stderr=pipe
        )
        dep.state["caretaker"] = caretaker
        pumps = dep.state["pumps"] = [_pump(caretaker.stderr, dep, "caretaker", "stderr")]
        ready = await read_caretaker_ready(caretaker, dep)
        pumps.append(_pump(caretaker.stdout, dep, "caretaker", "stdout"))

        if transparent:
            port, dns_port = ready.get("capture_port"), ready.get("dns_port")
            if not isinstance(port, int) or not isinstance(dns_port, int):
                raise BackendError(f"the caretaker's READY line names no capture and dns ports: {ready}")
            dep.emit(Status(state="deploying", detail=f"capturing the pod's TCP to the caretaker on port {port}, "
                                                      f"its DNS to port {dns_port}"))
            dep.state["capture"] = {"port": port, "exempt_uid": uid, "exempt_mark": mark, "dns_port": dns_port}
            await self._load_capture(dep)

        env = {**base_env, **dict(getattr(dep.spec, "env", None) or {}), **ready.get("app_env", {})}
        dep.emit(Status(state="deploying", detail="starting workload"))
        app = await pod.spawn(argv, env, cwd=workdir, stdout=pipe, stderr=pipe)
        dep.state["app"] = app
        dep.state["app_pumps"] = [_pump(app.stdout, dep, "app", "stdout"), _pump(app.stderr, dep, "app", "stderr")]

    async def update_policy(self, dep: Deployment) -> None:
        """Transparent mode: the UDP rules follow the new policy (the table is replaced in one nft
        transaction, so no datagram slips through in between; TCP needs nothing, the caretaker decides)."""
        if dep.state.get("capture") and not dep.state.get("deleted"):
            await self._load_capture(dep)

    async def _load_capture(self, dep: Deployment) -> None:
        egress = getattr(dep.spec, "egress", None) or EgressSpec()
        udp = udp_policy(egress.rules, egress.default, egress.script)
        await install_capture(**dep.state["capture"], udp=udp, spawn=dep.state["pod"].spawn)

    def _check_rootless(self, dep: Deployment) -> None:
        """What a user-namespace pod cannot do, refused before one is made."""
        if self.listeners is None:
            raise BackendError("a user-namespace pod reaches the server only through a unix socket the server "
                               "listens on: give the local backend the server's listeners")
        if getattr(dep.spec, "mounts", None) and (why := fuse_unusable()):
            raise BackendError(f"client-local mounts are unavailable in user-namespace pods here: {why}")

    def _caretaker_uid(self) -> int | None:
        """The dedicated caretaker user's uid, when this machine has that user."""
        if not self.caretaker_user:
            return None
        try:
            return pwd.getpwnam(self.caretaker_user).pw_uid
        except KeyError:
            return None

    async def _server_url(self, dep: Deployment, pod: Pod | RootlessPod) -> str:
        """The caretaker URL as seen from inside ``pod``: the server's listener on the veth's host end, or
        on a unix socket in the run directory for a user-namespace pod."""
        if self.listeners is None:
            return dep.server_url
        if isinstance(pod, RootlessPod):
            url = await self.listeners.add_unix_listener(str(pod.socket_path))
        else:
            url = await self.listeners.add_listener(pod.host_ip)
        dep.state["listener"] = url
        return url + urlsplit(dep.server_url).path

    async def wait(self, dep: Deployment) -> int:
        app: asyncio.subprocess.Process = dep.state["app"]
        code = await app.wait()
        await _drain(dep.state.get("app_pumps", []))
        return code

    async def delete(self, dep: Deployment) -> None:
        """The workload, the caretaker, the capture rules, the listener, the pod; idempotent."""
        errors: list[str] = []
        app = dep.state.get("app")
        if app is not None:
            await stop_group(app)
            await _drain(dep.state.get("app_pumps", []))
        caretaker = dep.state.get("caretaker")
        if caretaker is not None:
            await stop_group(caretaker)
        pod: Pod | RootlessPod | None = dep.state.get("pod")
        if pod is not None and dep.state.pop("capture", False) and not pod.destroyed:
            try:
                await remove_capture(spawn=pod.spawn)
            except (CaptureError, PodError) as exc:
                errors.append(str(exc))
        listener = dep.state.pop("listener", None)
        if listener is not None and self.listeners is not None:
            await self.listeners.close_listener(listener)
        if pod is not None:
            try:
                await pod.destroy()
            except PodError as exc:
                errors.append(str(exc))
        for pump in dep.state.pop("pumps", []) + dep.state.pop("app_pumps", []):
            pump.cancel()
        dep.state["deleted"] = True
        if errors:
            raise BackendError("; ".join(errors))

    def status(self, dep: Deployment) -> str:
        return workload_status(dep)


def _pump(stream: asyncio.StreamReader | None, dep: Deployment, source: str, name: str) -> asyncio.Task[None]:
    return asyncio.create_task(pump_lines(stream, dep, source, name))


async def _drain(pumps: list[asyncio.Task[None]]) -> None:
    """Let log pumps deliver what a finished process printed last."""
    for pump in pumps:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(pump), LOG_DRAIN)


def _check_program(program: str, path: str | None, workdir: str | None) -> None:
    """Refuse a workload program that cannot run, as the process backend does: inside the pod, nsenter
    would only report it as an exit status. The pod's mount namespace starts as a copy of this one."""
    if "/" in program:
        found = os.path.join(workdir or os.getcwd(), program)
        if not os.path.isfile(found):
            raise BackendError(f"cannot start workload {program!r}: No such file or directory")
        if not os.access(found, os.X_OK):
            raise BackendError(f"cannot start workload {program!r}: Permission denied")
    elif shutil.which(program, path=path) is None:
        raise BackendError(f"cannot start workload {program!r}: not found on PATH {path or ''}".rstrip())


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"local pod: {exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return str(exc)
