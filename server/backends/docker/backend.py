"""The dockerhost backend: each deployment is a container of the spec's ``image`` on a Docker engine of this
machine, with its caretaker beside it in the container's network namespace.

A pod is two containers of that image, like a Kubernetes pod and its pause container: a holder that only
keeps the network namespace (it runs a static busybox bind-mounted read-only, so the image needs nothing),
and the workload, started with ``--network container:<holder>`` once the caretaker is READY, with the
caretaker's variables (proxy settings, credential URLs and env deliveries) in its environment. The
spec's ``command`` replaces the image's entrypoint and command; without one the image runs as built.

The caretaker runs on the host, entered into the holder's network namespace only: it shares the app's
loopback (the proxy port, the DNS role, credential endpoints) and its capture rules, while it keeps the
host's filesystem, so it reaches the server through a unix socket in the run directory (whatever network
the containers have) and its 9P mounts land under the run directory, from where they propagate into the
workload (each mount is a bind with ``rslave`` propagation at its target, made once the caretaker has
mounted it, so a single-file mount is a file there). Credential files are written the same way, into a directory bound
read-only at the file's directory. It runs as root, exempt from capture by its socket mark. This backend
never pulls: an image must already be on the engine (``docker load`` or ``docker import``).

Teardown: the workload first, then the caretaker (which unmounts its mounts), the holder, the server's
unix listener, and the run directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import urlsplit

from cornus_core.events import Log, Status
from cornus_core.mountinfo import mounted_under
from cornus_core.proxy.transparent import CaptureError, install_capture, udp_policy
from cornus_core.spec import EgressSpec

from .. import runlock
from ..base import BackendError, Deployment
from ..local._commands import PodError
from ..local._commands import run as run_command
from ..process import STOP_GRACE, pump_lines, read_caretaker_ready, stop_group
from .engine import Engine, EngineError, LogError, engine_host

log = logging.getLogger(__name__)

CARETAKER_MARK = 0x636E6374  # the caretaker's own sockets, let by the capture rules
HOLDER_BUSYBOX = "/.cornus/busybox"  # bind-mounted read-only: the holder needs nothing from the image
BUSYBOX_PATHS = ("/bin/busybox", "/usr/bin/busybox")
PT_INTERP = 3
LABEL = "cornus.backend"
RUN_LABEL = "cornus.run"  # the server run that made a container; its lock file says whether it lives
DEFAULT_RUN_DIR = Path("/run/cornus/docker")
LOCK = ".lock"
# A network-less container gets a default route into a veth pair that leads nowhere, so that an app's
# connection reaches the capture rules instead of failing with "network unreachable".
DEAD_END_ROUTE = ["link add cornus0 type veth peer name cornus0p", "addr add 192.0.2.2/32 dev cornus0",
                  "link set cornus0p up", "link set cornus0 up", "route add default dev cornus0"]
_SETUP_ERRORS = (EngineError, CaptureError, PodError, OSError, LogError)


class Listeners(Protocol):
    async def add_unix_listener(self, path: str) -> str: ...

    async def close_listener(self, url: str) -> None: ...


class DockerBackend:
    name = "dockerhost"

    def __init__(self, *, host: str | None = None, listeners: Listeners | None = None,
                 run_dir: str | Path | None = None, network: str = "bridge", prefix: str = "cornus",
                 caretaker_argv: list[str] | None = None, stop_grace: float = STOP_GRACE,
                 dns_upstream: Sequence[str] = ()) -> None:
        """``host``: the engine (``unix:///path``; default ``$DOCKER_HOST`` or /var/run/docker.sock).
        ``network``: the containers' network mode (``bridge``, ``none``, a network's name). ``prefix``
        names and labels the containers; each server run keeps a locked directory under ``run_dir``, so
        that a later run removes what a crashed one left and never what a live one runs."""
        self.engine = Engine(host or engine_host())
        self.listeners = listeners
        self.run_dir = Path(run_dir) if run_dir is not None else DEFAULT_RUN_DIR
        self.network = network
        self.prefix = prefix
        self.caretaker_argv = caretaker_argv or [sys.executable, "-m", "caretaker"]
        self.stop_grace = stop_grace
        self.dns_upstream = list(dns_upstream)
        self.run_id = ""
        self._lock: int | None = None

    async def start(self) -> list[str]:
        """Check the engine answers, take this run's locked directory, then remove the containers and
        directories of runs whose lock nobody holds (they crashed). Returns the removed containers."""
        if self._lock is not None:
            return []
        try:
            await self.engine.ping()
        except EngineError as exc:
            raise BackendError(f"the Docker engine is unavailable: {exc}") from None
        self.run_id = secrets.token_hex(4)
        mine = self.run_dir / self.run_id
        mine.mkdir(mode=0o700, parents=True)
        self._lock = runlock.take(mine / LOCK)
        removed = []
        try:
            for container in await self.engine.containers(f"{LABEL}={self.prefix}"):
                run = str((container.get("Labels") or {}).get(RUN_LABEL, ""))
                if run != self.run_id and not runlock.held(self.run_dir / run / LOCK):
                    await self.engine.remove(str(container["Id"]))
                    removed.append(str(container["Id"])[:12])
        except EngineError as exc:
            raise BackendError(f"the Docker engine is unavailable: {exc}") from None
        for stale in self.run_dir.iterdir():
            if stale.name != self.run_id and not runlock.held(stale / LOCK):
                _release(stale)
        return removed

    async def close(self) -> None:
        await self.engine.aclose()
        if self._lock is not None:
            _release(self.run_dir / self.run_id)  # what deployments remain are deleted by now
            os.close(self._lock)
            self._lock = None

    # -- the Backend protocol -------------------------------------------------------------------

    async def apply(self, dep: Deployment) -> None:
        if self.listeners is None:
            raise BackendError("the dockerhost backend needs the server's listeners (its caretakers dial a "
                               "unix socket)")
        image = getattr(dep.spec, "image", None)
        if not image:
            raise BackendError("the dockerhost backend runs the spec's image: set `image`")
        try:
            await self._apply(dep, image, self.listeners)
        except _SETUP_ERRORS as exc:
            raise BackendError(str(exc)) from None

    async def _apply(self, dep: Deployment, image: str, listeners: Listeners) -> None:
        found = await self.engine.image(image)
        if found is None:
            raise BackendError(f"image {image!r} is not on the Docker engine at {self.engine.host} (this "
                               "backend never pulls: docker load or docker import it first)")
        await self.start()
        run = self.run_dir / self.run_id / dep.id
        dep.state["run"] = run
        run.mkdir(mode=0o700, parents=True)
        name = f"{self.prefix}-{dep.id}".replace("_", "-")
        labels = {LABEL: self.prefix, RUN_LABEL: self.run_id, "cornus.deployment": dep.id}
        dep.emit(Status(state="deploying", detail=f"creating the pod's network holder from {image}"))
        holder = await self.engine.create(f"{name}-net", {
            "Image": image, "Entrypoint": [HOLDER_BUSYBOX, "sleep", "2147483647"], "Cmd": [], "Labels": labels,
            "HostConfig": {"NetworkMode": self.network, "Binds": [f"{_busybox()}:{HOLDER_BUSYBOX}:ro"]},
        })
        dep.state["holder"] = holder
        await self.engine.start(holder)
        holder_info = await self.engine.inspect(holder)
        state = holder_info["State"]
        if not state.get("Running") or not state.get("Pid"):
            raise BackendError(f"the pod's network holder exited at once: {state.get('Error') or state}")
        netns = f"/proc/{int(state['Pid'])}/ns/net"
        dep.state["netns"] = netns

        config = dict(dep.caretaker_config)
        binds = await self._mount_points(run, config) if config.get("mounts") else []
        binds += _credential_files(run, config)
        transparent = (config.get("egress") or {}).get("mode") == "transparent"
        if transparent and self.network == "none":
            await run_command(["nsenter", f"--net={netns}", "ip", "-batch", "-"],
                              input="\n".join(DEAD_END_ROUTE) + "\n", what="a default route for the capture rules")
        if transparent:  # the app's DNS goes to the caretaker, which asks what the container would have
            upstream = self.dns_upstream or _nameservers(holder_info.get("ResolvConfPath"))
            if upstream:
                config["dns"] = {**(config.get("dns") or {}), "upstream": upstream}
        url = await listeners.add_unix_listener(str(run / "caretaker.sock"))
        dep.state["listener"] = url
        env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TZ") if k in os.environ}
        env |= {
            "PYTHONUNBUFFERED": "1",
            "CORNUS_SERVER_URL": url + urlsplit(dep.server_url).path,
            "CORNUS_CARETAKER_TOKEN": dep.caretaker_token,
            "CORNUS_CARETAKER_CONFIG": json.dumps(config),
            "CORNUS_SOCKET_MARK": str(CARETAKER_MARK),
        }
        dep.emit(Status(state="deploying", detail="starting caretaker"))
        pipe = asyncio.subprocess.PIPE
        caretaker = await asyncio.create_subprocess_exec(
            "nsenter", f"--net={netns}", "--", *self.caretaker_argv, env=env, cwd="/",
            stdin=asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe, start_new_session=True)
        dep.state["caretaker"] = caretaker
        pumps = dep.state["pumps"] = [asyncio.create_task(pump_lines(caretaker.stderr, dep, "caretaker", "stderr"))]
        ready = await read_caretaker_ready(caretaker, dep)
        pumps.append(asyncio.create_task(pump_lines(caretaker.stdout, dep, "caretaker", "stdout")))
        if transparent:
            port, dns_port = ready.get("capture_port"), ready.get("dns_port")
            if not isinstance(port, int) or not isinstance(dns_port, int):
                raise BackendError(f"the caretaker's READY line names no capture and dns ports: {ready}")
            dep.state["capture"] = {"port": port, "exempt_mark": CARETAKER_MARK, "dns_port": dns_port}
            await self._load_capture(dep)

        app_env = {**dict(getattr(dep.spec, "env", None) or {}), **(ready.get("app_env") or {})}
        command = getattr(dep.spec, "command", None)
        dep.emit(Status(state="deploying", detail="starting workload"))
        app = await self.engine.create(name, {
            "Image": image,
            # The spec's command replaces the image's entrypoint and command; else the image's own run.
            **({"Entrypoint": list(command[:1]), "Cmd": list(command[1:])} if command else {}),
            "Env": [f"{k}={v}" for k, v in app_env.items()],
            "WorkingDir": getattr(dep.spec, "workdir", None) or "",
            "Labels": labels,
            "HostConfig": {"NetworkMode": f"container:{holder}", "Binds": binds},
        })
        dep.state["container"] = app
        await self.engine.start(app)
        # After the start: a log request for a container that is not running yet ends at once, empty.
        dep.state["logs"] = asyncio.create_task(self._pump_logs(dep, app))
        dep.state["app"] = True

    async def _mount_points(self, run: Path, config: dict[str, Any]) -> list[str]:
        """Each mount's directory under the run directory, where the caretaker mounts it, and the bind that
        shows it at the target inside the container (made once the caretaker has mounted it, so a
        single-file mount is a file there). The directory is a shared mount of its own, so a mount made again
        under it after a lost connection propagates into the container."""
        mounts_dir = run / "mounts"
        mounts_dir.mkdir(mode=0o700)
        await run_command(["mount", "--bind", str(mounts_dir), str(mounts_dir)], what="the mounts directory")
        await run_command(["mount", "--make-rshared", str(mounts_dir)], what="the mounts directory")
        binds, moved = [], []
        for mount in config["mounts"]:
            point = mounts_dir / mount["name"]  # the caretaker makes it: a directory, or a file for a file
            binds.append(f"{point}:{mount['target']}:{'ro,' if mount.get('read_only') else ''}rslave")
            moved.append({**mount, "target": str(point)})
        config["mounts"] = moved
        return binds

    async def _load_capture(self, dep: Deployment) -> None:
        egress = getattr(dep.spec, "egress", None) or EgressSpec()
        udp = udp_policy(egress.rules, egress.default, egress.script)
        netns = dep.state["netns"]

        def spawn(argv: Sequence[str], *, stdin: int | None = None, stdout: int | None = None,
                  stderr: int | None = None) -> Any:
            return asyncio.create_subprocess_exec("nsenter", f"--net={netns}", "--", *argv, stdin=stdin,
                                                  stdout=stdout, stderr=stderr)

        await install_capture(**dep.state["capture"], udp=udp, spawn=spawn)

    async def _pump_logs(self, dep: Deployment, cid: str) -> None:
        output: AppOutput = dep.state.setdefault("output", AppOutput(dep))
        try:
            async for stream, chunk in self.engine.logs(cid):
                output.feed(stream, chunk)
        except (EngineError, LogError) as exc:
            log.info("dockerhost: logs of %s ended: %s", cid[:12], exc)

    async def wait(self, dep: Deployment) -> int:
        cid = dep.state["container"]
        try:
            code = await self.engine.wait(cid)
        except EngineError as exc:
            raise BackendError(str(exc)) from None
        logs = dep.state.get("logs")
        if logs is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(logs), 2.0)
        # A followed log stream may end before the engine has its last bytes: read the whole log once more
        # and report what the stream missed.
        output: AppOutput = dep.state.setdefault("output", AppOutput(dep))
        replayed: dict[str, int] = {}
        with contextlib.suppress(EngineError, LogError):
            async for stream, chunk in self.engine.logs(cid, follow=False):
                start = replayed.get(stream, 0)
                replayed[stream] = start + len(chunk)
                output.feed(stream, chunk[max(0, output.seen.get(stream, 0) - start):])
        output.flush()
        dep.state["exit"] = code
        return code

    async def delete(self, dep: Deployment) -> None:
        """The workload first, then its caretaker (which unmounts its mounts), then the network holder."""
        await self._remove(dep.state.get("container"))
        caretaker = dep.state.get("caretaker")
        if caretaker is not None:
            await stop_group(caretaker)
        await self._remove(dep.state.get("holder"), stop=False)  # it only holds the namespace
        for task in [*dep.state.pop("pumps", []), dep.state.pop("logs", None)]:
            if task is not None:
                task.cancel()
        url = dep.state.pop("listener", None)
        if url is not None and self.listeners is not None:
            await self.listeners.close_listener(url)
        run = dep.state.get("run")
        if run is not None:
            _release(run)
        dep.state["deleted"] = True

    async def _remove(self, cid: str | None, *, stop: bool = True) -> None:
        """Stop a container within the grace period (or, ``stop=False``, kill it) and remove it."""
        if cid is None:
            return
        try:
            if stop:
                await self.engine.stop(cid, self.stop_grace)
            await self.engine.remove(cid)
        except EngineError as exc:
            log.warning("dockerhost: %s", exc)

    async def update_policy(self, dep: Deployment) -> None:
        """Transparent mode: the capture table follows the new policy, in one nft transaction."""
        if dep.state.get("capture") and not dep.state.get("deleted"):
            await self._load_capture(dep)

    def status(self, dep: Deployment) -> str:
        if dep.state.get("deleted"):
            return "deleted"
        if "exit" in dep.state:
            return f"exited {dep.state['exit']}"
        return "running" if dep.state.get("app") else "pending"


class AppOutput:
    """The workload's output as log events: whole lines per stream, and how many bytes each stream gave."""

    def __init__(self, dep: Deployment) -> None:
        self.dep = dep
        self.seen: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}

    def feed(self, stream: str, chunk: bytes) -> None:
        if not chunk:
            return
        self.seen[stream] = self.seen.get(stream, 0) + len(chunk)
        lines = (self._partial.pop(stream, b"") + chunk).split(b"\n")
        self._partial[stream] = lines.pop()
        for line in lines:
            self.dep.emit(Log(source="app", line=line.decode(errors="replace"), stream=stream))

    def flush(self) -> None:
        """The last line of each stream, even without its newline."""
        for stream, rest in self._partial.items():
            if rest:
                self.dep.emit(Log(source="app", line=rest.decode(errors="replace"), stream=stream))
        self._partial.clear()


def _credential_files(run: Path, config: dict[str, Any]) -> list[str]:
    """File deliveries: the caretaker writes them into a directory of the run directory, bound read-only at
    the file's directory in the workload (so its refreshes, atomic renames, show through). Files of one
    directory share one bind, which hides what the image has there, like a mounted secret volume."""
    folders: dict[str, Path] = {}
    sources = []
    for source in config.get("credentials") or []:
        deliveries = []
        for delivery in source.get("deliver") or []:
            if delivery.get("kind") == "file" and delivery.get("path"):
                inside = PurePosixPath(delivery["path"])
                folder = folders.setdefault(str(inside.parent), run / "files" / str(len(folders)))
                folder.mkdir(mode=0o755, parents=True, exist_ok=True)
                delivery = {**delivery, "path": str(folder / inside.name)}
            deliveries.append(delivery)
        sources.append({**source, "deliver": deliveries})
    if sources:
        config["credentials"] = sources
    return [f"{folder}:{inside}:ro" for inside, folder in folders.items()]


def _nameservers(resolv_conf: str | None) -> list[str]:
    """The nameservers of a container's resolv.conf, loopback ones included: Docker's embedded DNS at
    127.0.0.11 answers in the container's own namespace, where the caretaker asks it (its own sockets pass
    the capture rules)."""
    try:
        text = Path(resolv_conf).read_text() if resolv_conf else ""
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            address = fields[1].partition("%")[0]
            found.append(f"[{address}]" if ":" in address else address)
    return found


def _busybox() -> str:
    """A statically linked busybox of this machine: it runs in any image, whatever libraries it has."""
    for path in BUSYBOX_PATHS:
        if os.path.isfile(path) and os.access(path, os.X_OK) and statically_linked(path):
            return path
    raise BackendError("the dockerhost backend holds each pod's network with a statically linked busybox: "
                       "install busybox-static")


def statically_linked(path: str) -> bool:
    """Whether an ELF64 executable has no program interpreter (PT_INTERP), i.e. needs no shared libraries."""
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:5] != b"\x7fELF\x02" or len(header) < 64:
            return False
        order = "<" if header[5] == 1 else ">"
        phoff, = struct.unpack_from(order + "Q", header, 0x20)
        phentsize, phnum = struct.unpack_from(order + "HH", header, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(struct.unpack_from(order + "I", table, i * phentsize)[0] != PT_INTERP for i in range(phnum))


def _release(run: Path) -> None:
    """Unmount whatever is still mounted under a deployment's run directory (deepest first), then remove
    it."""
    for point in sorted(mounted_under(run), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    shutil.rmtree(run, ignore_errors=True)
