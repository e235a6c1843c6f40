"""Pods without root: a user namespace (this server's uid mapped to root inside) with a network and a
mount namespace of its own, held open by a small holder process that every pod process joins.

What a user-namespace pod has: its own loopback, nftables (so transparent capture works), socket marks,
a private mount namespace. What it lacks: a veth into the host (creating one needs root outside), so
nothing reaches beyond the pod's own loopback; and more than one uid, so the caretaker is exempted
from capture by socket mark, never by uid. The caretaker reaches the server through a unix socket in
the run directory, which the pod sees because it shares this machine's filesystem.

Inside, an interface ``eth0`` (one end of a veth pair whose other end is inside too) carries the
default routes: without a route, an app's connection fails before capture could take it. Whatever
would leave through ``eth0`` uncaptured is refused at once (a TCP reset or an ICMP error) instead of
vanishing, so the caretaker's own ``cluster`` dials beyond the pod fail fast.

Each holder leaves a ``<pod>.pid`` file in the run directory naming the holder and its namespaces, so
that ``cleanup_leftovers`` of a later run can stop what a crashed run left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._commands import PodError, run, start_in_pod
from ._reaper import NamespaceId, namespace_id, stop_namespace
from .naming import PodName
from .pod import DEFAULT_RUN_DIR, PodHost, ipv6_available

POD_IPV4 = "192.0.2.2"  # documentation ranges: only ever seen inside the pod
POD_IPV6 = "2001:db8::2"
HOLDER_READY = "ready"
HOLDER_READY_TIMEOUT = 15.0
UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL
FENCE_TABLE = "cornus_fence"

# Nothing that leaves through eth0 uncaptured has anywhere to go: say so at once. Captured packets were
# redirected (by the capture table's nat chain, which runs first) and only still look bound for eth0.
FENCE_RULESET = (
    f"table inet {FENCE_TABLE} {{\n"
    "\tchain output {\n"
    "\t\ttype filter hook output priority 0; policy accept;\n"
    "\t\tct status dnat accept\n"
    '\t\toifname "eth0" meta l4proto tcp reject with tcp reset\n'
    '\t\toifname "eth0" reject with icmpx admin-prohibited\n'
    "\t}\n"
    "}\n"
)


def holders_dir(run_dir: Path) -> Path:
    """Where user-namespace pods keep their holder files and the server's unix sockets."""
    return run_dir / "userns"


def rootless_run_dir() -> Path:
    """A run directory this (unprivileged) user owns: ``$XDG_RUNTIME_DIR/cornus``, else ``cornus-<uid>``
    in the temporary directory."""
    if os.geteuid() == 0:
        return DEFAULT_RUN_DIR
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "cornus"
    return Path(tempfile.gettempdir()) / f"cornus-{os.geteuid()}"


def fuse_unusable() -> str | None:
    """Why FUSE mounts cannot work in a user-namespace pod of this server, or None when they may: the
    caretaker mounts from inside the namespace, where only a /dev/fuse it may open will do."""
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not open to this server's user, so a user-namespace pod cannot mount with FUSE"
    return None


class RootlessPod:
    """One user-namespace pod: ``await RootlessPod.create(host)``, then ``spawn``, then ``destroy``.

    It offers what the local backend uses of a root ``Pod``; ``uid`` is not among it (one uid only)."""

    kind = "userns"
    pod_ip = POD_IPV4
    host_ip: str | None = None  # no link to the host

    def __init__(self, host: PodHost, name: PodName) -> None:
        self.host = host
        self.pod_name = name
        self.name = str(name)
        self.holder: asyncio.subprocess.Process | None = None
        self.net_id: NamespaceId | None = None
        self.user_id: NamespaceId | None = None
        self.processes: list[asyncio.subprocess.Process] = []
        self.destroyed = False
        self._destroying = asyncio.Lock()

    @property
    def socket_path(self) -> Path:
        """Where the server listens for this pod's caretaker."""
        return holders_dir(self.host.run_dir) / f"{self.name}.sock"

    @property
    def holder_file(self) -> Path:
        return holders_dir(self.host.run_dir) / f"{self.name}.pid"

    @classmethod
    async def create(cls, host: PodHost) -> RootlessPod:
        pod = cls(host, host.next_name())
        host.pods[pod.name] = pod
        try:
            await pod._build()
        except BaseException:
            with contextlib.suppress(PodError):
                await asyncio.shield(pod.destroy())
            raise
        return pod

    async def _build(self) -> None:
        what = f"pod {self.name}"
        if len(os.fsencode(self.socket_path)) > UNIX_PATH_MAX:
            raise PodError(f"{what}: the socket path {self.socket_path} is longer than {UNIX_PATH_MAX} bytes; "
                           "choose a shorter run directory")
        try:
            holders_dir(self.host.run_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise PodError(f"{what}: cannot use {holders_dir(self.host.run_dir)}: {exc.strerror}") from None
        await self._start_holder()
        setup = [
            "link set lo up",
            "link add eth0 type veth peer name eth0p",
            f"addr add {POD_IPV4}/24 dev eth0",
            "link set eth0p up",
            "link set eth0 up",
            "route add default dev eth0",
        ]
        if ipv6_available():
            setup[3:3] = [f"addr add {POD_IPV6}/64 dev eth0 nodad"]
            setup.append("route add ::/0 dev eth0")
        await run(self.command(["ip", "-batch", "-"]), input="\n".join(setup) + "\n", what=f"{what}: addresses")
        await run(self.command(["nft", "-f", "-"]), input=FENCE_RULESET, what=f"{what}: fence rules")

    async def _start_holder(self) -> None:
        what = f"pod {self.name}: user namespace"
        unshare = shutil.which("unshare") or "unshare"
        pipe = asyncio.subprocess.PIPE
        try:
            self.holder = holder = await asyncio.create_subprocess_exec(
                unshare, "--user", "--map-root-user", "--net", "--mount", "--propagation", "private",
                "--", "sh", "-c", f"echo {HOLDER_READY} && exec sleep infinity",
                stdin=asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe, start_new_session=True,
            )
        except OSError as exc:
            raise PodError(f"{what}: cannot run unshare: {exc.strerror or exc}") from None
        assert holder.stdout is not None and holder.stderr is not None
        try:
            line = await asyncio.wait_for(holder.stdout.readline(), HOLDER_READY_TIMEOUT)
        except TimeoutError:
            raise PodError(f"{what}: the holder was not ready within {HOLDER_READY_TIMEOUT:.0f} s") from None
        if line.decode(errors="replace").strip() != HOLDER_READY:
            err = (await holder.stderr.read()).decode(errors="replace").strip()
            raise PodError(f"{what}: {err or f'unshare exited with status {await holder.wait()}'}")
        self.net_id = namespace_id(f"/proc/{holder.pid}/ns/net")
        self.user_id = namespace_id(f"/proc/{holder.pid}/ns/user")
        if self.net_id is None or self.user_id is None:
            raise PodError(f"{what}: the holder (pid {holder.pid}) ended at once")
        write_holder_file(self.holder_file, holder.pid, self.net_id, self.user_id)

    def command(self, argv: Sequence[str], *, cwd: str | None = None, uid: int | None = None) -> list[str]:
        """``argv`` wrapped to run inside this pod's namespaces, as the namespace's root (this server's
        own uid outside)."""
        if not argv:
            raise PodError(f"pod {self.name}: nothing to run (empty argv)")
        if uid is not None:
            raise PodError(f"pod {self.name}: a user-namespace pod has one uid; cannot run {argv[0]} as uid {uid}")
        if self.holder is None or self.holder.returncode is not None:
            raise PodError(f"pod {self.name}: its namespace holder is not running; cannot start {argv[0]}")
        # Entering a mount namespace resets the working directory; choose it inside the namespace.
        return ["nsenter", f"--target={self.holder.pid}", "--user", "--preserve-credentials", "--net", "--mount",
                f"--wdns={cwd or os.getcwd()}", "--", *argv]

    async def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        *,
        uid: int | None = None,
        mark: int | None = None,
        stdin: int | None = asyncio.subprocess.DEVNULL,
        stdout: int | None = None,
        stderr: int | None = None,
    ) -> asyncio.subprocess.Process:
        """Start ``argv`` inside the pod, in a session of its own; as ``Pod.spawn``, without ``uid``."""
        if self.destroyed:
            raise PodError(f"pod {self.name} is destroyed; cannot start {argv[0] if argv else 'nothing'}")
        proc = await start_in_pod(self.name, argv, self.command(argv, cwd=cwd, uid=uid), env, cwd=None, mark=mark,
                                  stdin=stdin, stdout=stdout, stderr=stderr)
        self.processes.append(proc)
        return proc

    async def destroy(self) -> None:
        """Stop every process in the pod (the holder last among them): the namespaces end with the last
        process in them. Idempotent."""
        async with self._destroying:
            if self.destroyed:
                return
            leftover: list[int] = []
            if self.net_id is not None:
                leftover = await stop_namespace(self.net_id, self.host.stop_grace, user=self.user_id)
            for proc in [*self.processes, *([self.holder] if self.holder else [])]:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5.0)
            self.holder_file.unlink(missing_ok=True)
            self.socket_path.unlink(missing_ok=True)
            self.host.pods.pop(self.name, None)
            self.destroyed = True
            if leftover:
                raise PodError(f"pod {self.name} was not fully removed: processes {leftover} would not stop")


def write_holder_file(path: Path, pid: int, net: NamespaceId, user: NamespaceId) -> None:
    path.write_text(json.dumps({"pid": pid, "net": list(net), "user": list(user)}) + "\n")


def holder_names(run_dir: Path) -> list[str]:
    """The pod names with a holder file in ``run_dir``."""
    try:
        return [p.stem for p in holders_dir(run_dir).glob("*.pid")]
    except OSError:
        return []


async def remove_holder(run_dir: Path, name: str, grace: float) -> None:
    """Stop a pod a crashed run left: every process in its namespaces (holder included), then its files.
    Both namespace identities must match, so a reused inode number never names someone else's."""
    path = holders_dir(run_dir) / f"{name}.pid"
    try:
        info = json.loads(path.read_text())
        net, user = tuple(info["net"]), tuple(info["user"])
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PodError(f"pod {name}: unreadable holder file {path}: {exc}") from None
    leftover = await stop_namespace((int(net[0]), int(net[1])), grace, user=(int(user[0]), int(user[1])))
    if leftover:
        raise PodError(f"pod {name}: processes {leftover} would not stop")
    path.unlink(missing_ok=True)
    (holders_dir(run_dir) / f"{name}.sock").unlink(missing_ok=True)
