"""The dockerhost backend: each deployment is a container of the spec's ``image`` on a Docker engine of this
machine, with its caretaker beside it in the container's network namespace.

The caretaker runs on the host, entered into the container's network namespace only: it shares the
app's loopback (the proxy port, the DNS role, credential endpoints) and its capture rules, while it keeps
the host's filesystem, so it reaches the server through a unix socket in the run directory (whatever
network the container has) and its 9P mounts land under the run directory, from where they propagate
into the container (each mount is a bind with ``rslave`` propagation at its target; a directory, so
single-file mounts are not available here). It runs as root, exempt from capture by its socket mark.

The container starts at once (its network namespace must exist for the caretaker), but its command
waits behind a gate: a static busybox bind-mounted read-only at ``/.cornus`` loops until the backend
writes ``/.cornus/env`` (the caretaker's variables: proxy settings, credential URLs) and creates
``/.cornus/go``, then sources the one and execs the workload. Images need no shell of their own. This
backend never pulls: an image must already be on the engine (``docker load`` or ``docker import``).

Teardown: the container first (stopped, then removed), then the caretaker (which unmounts its mounts),
the server's unix listener, and the run directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from cornus_core.events import Log, Status
from cornus_core.proxy.transparent import CaptureError, install_capture, udp_policy
from cornus_core.spec import EgressSpec

from ..base import BackendError, Deployment
from ..process import STOP_GRACE, pump_lines, read_caretaker_ready, stop_group
from .engine import Engine, EngineError, LogError, engine_host

log = logging.getLogger(__name__)

CARETAKER_MARK = 0x636E6374  # the caretaker's own sockets, let by the capture rules
GATE_DIR = "/.cornus"
# Waits for the backend's go, takes the caretaker's variables, becomes the workload.
GATE = f'while [ ! -e {GATE_DIR}/go ]; do {GATE_DIR}/busybox sleep 0.05; done; . {GATE_DIR}/env; exec "$@"'
BUSYBOX_PATHS = ("/bin/busybox", "/usr/bin/busybox")
LABEL = "cornus.backend"
DEFAULT_RUN_DIR = Path("/run/cornus/docker")
# A network-less container gets a default route into a veth pair that leads nowhere, so that an app's
# connection reaches the capture rules instead of failing with "network unreachable".
DEAD_END_ROUTE = ["link add cornus0 type veth peer name cornus0p", "addr add 192.0.2.2/32 dev cornus0",
                  "link set cornus0p up", "link set cornus0 up", "route add default dev cornus0"]
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SETUP_ERRORS = (EngineError, CaptureError, OSError, LogError)


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
        names this server's containers and labels them, so that a restart removes only its own."""
        self.engine = Engine(host or engine_host())
        self.listeners = listeners
        self.run_dir = Path(run_dir) if run_dir is not None else DEFAULT_RUN_DIR
        self.network = network
        self.prefix = prefix
        self.caretaker_argv = caretaker_argv or [sys.executable, "-m", "caretaker"]
        self.stop_grace = stop_grace
        self.dns_upstream = list(dns_upstream)

    async def start(self) -> list[str]:
        """Check the engine answers, then remove the containers a crashed earlier run left behind."""
        try:
            await self.engine.ping()
            leftovers = await self.engine.containers(f"{LABEL}={self.prefix}")
            for container in leftovers:
                await self.engine.remove(str(container["Id"]))
        except EngineError as exc:
            raise BackendError(f"the Docker engine is unavailable: {exc}") from None
        if self.run_dir.is_dir():
            for stale in self.run_dir.iterdir():
                _release(stale)
        return [str(c["Id"])[:12] for c in leftovers]

    async def close(self) -> None:
        await self.engine.aclose()

    # -- the Backend protocol -------------------------------------------------------------------

    async def apply(self, dep: Deployment) -> None:
        if self.listeners is None:
            raise BackendError("the dockerhost backend needs the server's listeners (its caretakers dial a "
                               "unix socket)")
        image = getattr(dep.spec, "image", None)
        if not image:
            raise BackendError("the dockerhost backend runs the spec's image: set `image`")
        try:
            await self._apply(dep, image)
        except _SETUP_ERRORS as exc:
            raise BackendError(str(exc)) from None

    async def _apply(self, dep: Deployment, image: str) -> None:
        found = await self.engine.image(image)
        if found is None:
            raise BackendError(f"image {image!r} is not on the Docker engine at {self.engine.host} (this "
                               "backend never pulls: docker load or docker import it first)")
        argv = _argv(dep.spec, found)
        run = self.run_dir / dep.id
        dep.state["run"] = run
        gate = run / "gate"
        gate.mkdir(mode=0o700, parents=True)
        shutil.copy2(_busybox(), gate / "busybox")
        (gate / "env").write_text("")
        config = dict(dep.caretaker_config)
        binds = [f"{gate}:{GATE_DIR}:ro"]
        if config.get("mounts"):
            binds += await self._mount_points(dep, run, config)
        spec_env = dict(getattr(dep.spec, "env", None) or {})
        dep.emit(Status(state="deploying", detail=f"creating a container of {image}"))
        cid = await self.engine.create(f"{self.prefix}-{dep.id}".replace("_", "-"), {
            "Image": image,
            "Entrypoint": [f"{GATE_DIR}/busybox", "sh", "-c", GATE, "cornus-gate"],
            "Cmd": argv,
            "Env": [f"{k}={v}" for k, v in spec_env.items()],
            "WorkingDir": getattr(dep.spec, "workdir", None) or "",
            "Labels": {LABEL: self.prefix, "cornus.deployment": dep.id},
            "HostConfig": {"NetworkMode": self.network, "Binds": binds},
        })
        dep.state["container"] = cid
        await self.engine.start(cid)
        pid = int((await self.engine.inspect(cid))["State"]["Pid"])
        netns = f"/proc/{pid}/ns/net"
        dep.state["netns"] = netns
        dep.state["logs"] = asyncio.create_task(self._pump_logs(dep, cid))
        dep.emit(Status(state="deploying", detail=f"container {cid[:12]} (network {self.network})"))

        transparent = (config.get("egress") or {}).get("mode") == "transparent"
        if transparent and self.network == "none":
            await _run(["nsenter", f"--net={netns}", "ip", "-batch", "-"], "\n".join(DEAD_END_ROUTE) + "\n",
                       what="a default route for the capture rules")
        if transparent and self.dns_upstream:
            config["dns"] = {**(config.get("dns") or {}), "upstream": self.dns_upstream}
        url = await self.listeners.add_unix_listener(str(run / "caretaker.sock"))  # type: ignore[union-attr]
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
        _write_env(gate / "env", ready.get("app_env") or {})
        (gate / "go").touch()
        dep.state["app"] = True
        dep.emit(Status(state="deploying", detail="starting workload"))

    async def _mount_points(self, dep: Deployment, run: Path, config: dict[str, Any]) -> list[str]:
        """Each mount's directory under the run directory, where the caretaker mounts it, and the bind that
        shows it at the target inside the container. The directory is a shared mount of its own, so mounts
        made under it later propagate into the container."""
        mounts_dir = run / "mounts"
        mounts_dir.mkdir(mode=0o700)
        await _run(["mount", "--bind", str(mounts_dir), str(mounts_dir)], what="the mounts directory")
        dep.state["shared"] = mounts_dir
        await _run(["mount", "--make-rshared", str(mounts_dir)], what="the mounts directory")
        binds, moved = [], []
        for mount in config["mounts"]:
            point = mounts_dir / mount["name"]
            point.mkdir()
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
        partial: dict[str, bytes] = {}
        try:
            async for stream, chunk in self.engine.logs(cid):
                lines = (partial.pop(stream, b"") + chunk).split(b"\n")
                partial[stream] = lines.pop()
                for line in lines:
                    dep.emit(Log(source="app", line=line.decode(errors="replace"), stream=stream))
        except (EngineError, LogError) as exc:
            log.info("dockerhost: logs of %s ended: %s", cid[:12], exc)
        for stream, rest in partial.items():
            if rest:
                dep.emit(Log(source="app", line=rest.decode(errors="replace"), stream=stream))

    async def wait(self, dep: Deployment) -> int:
        try:
            code = await self.engine.wait(dep.state["container"])
        except EngineError as exc:
            raise BackendError(str(exc)) from None
        logs = dep.state.get("logs")
        if logs is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(logs), 2.0)
        dep.state["exit"] = code
        return code

    async def delete(self, dep: Deployment) -> None:
        cid = dep.state.get("container")
        if cid is not None:  # the workload goes first
            try:
                await self.engine.stop(cid, self.stop_grace)
                await self.engine.remove(cid)
            except EngineError as exc:
                log.warning("dockerhost: %s", exc)
        caretaker = dep.state.get("caretaker")
        if caretaker is not None:
            await stop_group(caretaker)
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


def _argv(spec: Any, image: dict[str, Any]) -> list[str]:
    command = getattr(spec, "command", None)
    if command:
        return list(command)
    config = image.get("Config") or {}
    argv = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    if not argv:
        raise BackendError("the image names no command to run: set the spec's `command`")
    return [str(a) for a in argv]


def _busybox() -> str:
    for path in BUSYBOX_PATHS:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise BackendError("the dockerhost backend gates workloads with a static busybox: install busybox-static")


def _write_env(path: Path, values: dict[str, str]) -> None:
    lines = []
    for key, value in values.items():
        if not _ENV_KEY.fullmatch(key):
            raise BackendError(f"the caretaker's variable {key!r} is not a valid environment variable name")
        lines.append(f"export {key}={shlex.quote(str(value))}\n")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(lines))
    tmp.replace(path)


def _release(run: Path) -> None:
    """Unmount whatever is still mounted under a deployment's run directory (deepest first), then remove
    it."""
    for point in sorted(mounts_under(run), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    shutil.rmtree(run, ignore_errors=True)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` (from /proc/self/mountinfo: a self-bind on the same filesystem is
    invisible to ``os.path.ismount``)."""
    prefix = str(path.resolve())
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return points


async def _run(argv: list[str], stdin: str | None = None, *, what: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if proc.returncode != 0:
        raise BackendError(f"{what}: {argv[0]} failed: {err.decode(errors='replace').strip()}")

