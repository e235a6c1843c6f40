"""Pods on this machine: a network namespace (and optionally a mount namespace) joined to the host by
a veth pair, with processes started inside it.

The host end of the veth is how a pod reaches the server; the pod's default routes point at it. Host
IP forwarding stays off, so a pod reaches nothing beyond the host unless it is created with ``nat``.

Processes enter a pod through ``nsenter``: it adds about 1.4 ms to a process start here, where a
``preexec_fn`` calling setns adds 2.7 ms (it loses the fast spawn path) and ``ip netns exec`` 3.3 ms,
and gives every process a mount namespace of its own, so mounts made in the pod would not be shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from cornus_core.mountinfo import mount_points
from cornus_core.proxy.transparent import CaptureError, load_nft, release_ruleset

from .. import runlock
from . import _links
from ._commands import PodError, run, start_in_pod
from ._reaper import stop_namespace
from .addresses import DEFAULT_IPV4_RANGE, DEFAULT_IPV6_RANGE, AddressPlan, PodAddresses
from .naming import DEFAULT_PREFIX, PodName, check_instance, check_prefix, new_instance, pod_name

if TYPE_CHECKING:
    from .rootless import RootlessPod

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
DEFAULT_RUN_DIR = Path("/run/cornus")
STOP_GRACE = 5.0


def owners_dir(run_dir: Path) -> Path:
    """Where each live server run holds a lock file named after its ``<prefix><instance>``."""
    return run_dir / "owners"


def mounts_dir(run_dir: Path) -> Path:
    """Where each pod's mount namespace is pinned (a private mount, so it may hold namespace binds)."""
    return run_dir / "mnt"


def is_mount_point(path: Path) -> bool:
    """Whether something is mounted at ``path`` in this mount namespace (bind mounts included)."""
    return os.path.realpath(path) in mount_points()


def ipv6_available() -> bool:
    try:
        return Path("/proc/sys/net/ipv6/conf/default/disable_ipv6").read_text().strip() == "0"
    except OSError:
        return False


class PodHost:
    """This server run's side of its pods: the names, the address blocks, and a lock that marks the run
    alive so that ``cleanup_leftovers`` of another run leaves its pods alone.

    ``async with PodHost() as host`` destroys every pod still alive on exit.
    """

    def __init__(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        instance: str | None = None,
        ipv4_range: str = DEFAULT_IPV4_RANGE,
        ipv6_range: str | None = DEFAULT_IPV6_RANGE,
        run_dir: str | Path = DEFAULT_RUN_DIR,
        stop_grace: float = STOP_GRACE,
    ) -> None:
        self.prefix = check_prefix(prefix)
        self.instance = check_instance(instance or new_instance())
        self.addresses = AddressPlan(ipv4_range, ipv6_range if ipv6_available() else None)
        self.run_dir = Path(run_dir)
        self.stop_grace = stop_grace
        self.pods: dict[str, Pod | RootlessPod] = {}
        self._numbers = iter(range(10**9))
        self._mounts_dir_lock = asyncio.Lock()
        self._lock_path = owners_dir(self.run_dir) / f"{self.owner}.lock"
        try:
            self._lock_fd: int | None = runlock.take(self._lock_path)
        except BlockingIOError:
            raise PodError(f"pod owner {self.owner} is already in use by another server run") from None
        except OSError as exc:
            raise PodError(f"cannot use the pod run directory {self.run_dir}: {exc.strerror}") from None

    @property
    def owner(self) -> str:
        return f"{self.prefix}{self.instance}"

    def next_name(self) -> PodName:
        return pod_name(self.prefix, self.instance, next(self._numbers))

    async def prepare_mounts_dir(self) -> None:
        """Make the mount-namespace directory a private mount (once): a namespace can only be pinned
        by a bind mount onto a file whose mount does not propagate, as ``ip netns`` does for /run/netns."""
        async with self._mounts_dir_lock:
            directory = mounts_dir(self.run_dir)
            directory.mkdir(parents=True, exist_ok=True)
            if not is_mount_point(directory):
                await run(
                    ["mount", "--bind", str(directory), str(directory)], what=f"mount directory {directory}"
                )
            await run(["mount", "--make-private", str(directory)], what=f"mount directory {directory}")

    async def close(self) -> None:
        """Destroy this run's pods, then release its lock (kept when a pod could not be removed, so that
        ``cleanup_leftovers`` of a later run finishes the job)."""
        errors = []
        for pod in list(self.pods.values()):
            try:
                await pod.destroy()
            except PodError as exc:
                errors.append(str(exc))
        if errors:
            raise PodError("; ".join(errors))
        if self._lock_fd is not None:
            with contextlib.suppress(FileNotFoundError):
                self._lock_path.unlink()
            os.close(self._lock_fd)
            self._lock_fd = None

    async def __aenter__(self) -> PodHost:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class Pod:
    """One pod: create with ``await Pod.create(host)``, run processes with ``spawn``, end with ``destroy``."""

    def __init__(
        self, host: PodHost, name: PodName, addresses: PodAddresses, *, nat: bool, private_mounts: bool
    ) -> None:
        self.host = host
        self.pod_name = name
        self.name = str(name)  # the netns, the host veth, the mount-namespace file and the NAT table
        self.addresses = addresses
        self.nat = nat
        self.netns_path = NETNS_DIR / self.name
        self.mount_ns_path = mounts_dir(host.run_dir) / self.name if private_mounts else None
        self.processes: list[asyncio.subprocess.Process] = []
        self.destroyed = False
        self._destroying = asyncio.Lock()

    @property
    def host_ip(self) -> str:
        """The host end of the veth: the address the pod reaches the server at."""
        return self.addresses.host_ip

    @property
    def pod_ip(self) -> str:
        return self.addresses.pod_ip

    @property
    def host_ip6(self) -> str | None:
        return self.addresses.host_ip6

    @property
    def pod_ip6(self) -> str | None:
        return self.addresses.pod_ip6

    @classmethod
    async def create(cls, host: PodHost, *, nat: bool = False, private_mounts: bool = False) -> Pod:
        """A new pod of ``host``. ``nat`` lets it reach beyond the host through IPv4 masquerading (IPv6
        would need host-wide forwarding, which stays off); ``private_mounts`` gives it a mount namespace
        of its own, shared by all its processes."""
        name = host.next_name()
        addresses = host.addresses.allocate(await _links.host_addresses())
        pod = cls(host, name, addresses, nat=nat, private_mounts=private_mounts)
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
        a = self.addresses
        await run(["ip", "netns", "add", self.name], what=f"{what}: network namespace")
        host_side = [(a.host_ip, a.prefixlen)]
        pod_side = [
            "link set lo up",
            f"addr add {a.pod_ip}/{a.prefixlen} dev eth0",
            "link set eth0 up",
            f"route add default via {a.host_ip} dev eth0",
        ]
        if a.host_ip6 and a.pod_ip6:
            host_side.append((a.host_ip6, a.prefixlen6))
            pod_side[2:2] = [f"addr add {a.pod_ip6}/{a.prefixlen6} dev eth0 nodad"]
            pod_side.append(f"route add ::/0 via {a.host_ip6} dev eth0")
        await _links.add_veth(self.name, self.name, host_side)
        await run(
            ["ip", "-n", self.name, "-batch", "-"],
            input="\n".join(pod_side) + "\n",
            what=f"{what}: addresses",
        )
        if self.mount_ns_path is not None:
            await self._make_mount_namespace()
        if self.nat:
            await self._enable_nat()

    async def _make_mount_namespace(self) -> None:
        assert self.mount_ns_path is not None
        what = f"pod {self.name}: mount namespace"
        await self.host.prepare_mounts_dir()
        self.mount_ns_path.touch()
        # Made from inside the pod's netns, so the fresh sysfs shows the pod's interfaces (as ip netns exec
        # does). The copied binds of other pods' namespaces are dropped: they would keep those alive.
        script = (
            "umount -l /sys && mount -t sysfs sysfs /sys && "
            f'for m in {NETNS_DIR} "$1"; do if mountpoint -q "$m"; then umount -l "$m" || exit 1; fi; done'
        )
        await run(
            [
                "nsenter",
                f"--net={self.netns_path}",
                "unshare",
                f"--mount={self.mount_ns_path}",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
                str(self.mount_ns_path.parent),
            ],
            what=what,
        )

    async def _enable_nat(self) -> None:
        what = f"pod {self.name}: NAT"
        table = self.pod_name.nft_table
        ruleset = (
            f"table inet {table} {{\n"
            f"\tchain postrouting {{\n"
            f"\t\ttype nat hook postrouting priority 100; policy accept;\n"
            f'\t\tip saddr {self.pod_ip} oifname != "{self.name}" masquerade\n'
            f"\t}}\n"
            f"}}\n"
        )
        try:
            await load_nft(ruleset, what=f"NAT table of pod {self.name}")
        except CaptureError as exc:
            raise PodError(f"{what}: {exc}") from None
        # Forwarding for packets from this pod only; the uplink must forward the replies.
        try:
            Path(f"/proc/sys/net/ipv4/conf/{self.name}/forwarding").write_text("1\n")
        except OSError as exc:
            raise PodError(f"{what}: cannot enable forwarding on {self.name}: {exc.strerror}") from None
        uplink = await _links.default_route_device()
        if uplink is not None and _forwarding(uplink) is False:
            log.warning(
                "pod %s: NAT egress needs IPv4 forwarding on the uplink %s (net.ipv4.conf.%s.forwarding=1); "
                "it is off, so the pod reaches only the host",
                self.name,
                uplink,
                uplink,
            )

    def command(self, argv: Sequence[str], *, cwd: str | None = None, uid: int | None = None) -> list[str]:
        """``argv`` wrapped to run inside this pod's namespaces (as ``uid`` when given)."""
        if not argv:
            raise PodError(f"pod {self.name}: nothing to run (empty argv)")
        wrapped = ["nsenter", f"--net={self.netns_path}"]
        if self.mount_ns_path is not None:
            # Entering a mount namespace resets the working directory; choose it inside the namespace.
            wrapped += [f"--mount={self.mount_ns_path}", f"--wdns={cwd or os.getcwd()}"]
        if uid is not None:
            wrapped += [f"--setgid={_primary_gid(uid)}", f"--setuid={uid}"]
        return [*wrapped, "--", *argv]

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
        """Start ``argv`` inside the pod, in a session of its own (see ``start_in_pod``)."""
        if self.destroyed:
            raise PodError(f"pod {self.name} is destroyed; cannot start {argv[0] if argv else 'nothing'}")
        proc = await start_in_pod(
            self.name, argv, self.command(argv, cwd=cwd, uid=uid), env,
            cwd=None if self.mount_ns_path is not None else cwd, mark=mark, stdin=stdin, stdout=stdout, stderr=stderr,
        )
        self.processes.append(proc)
        return proc

    async def destroy(self) -> None:
        """Stop every process in the pod, then remove its NAT table, veth, namespaces; idempotent."""
        async with self._destroying:
            if self.destroyed:
                return
            leftover = await stop_namespace(str(self.netns_path), self.host.stop_grace)
            for proc in self.processes:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5.0)
            errors = [f"processes {leftover} would not stop"] if leftover else []
            for step in (
                self._remove_nat,
                self._remove_veth,
                self._remove_netns,
                self._remove_mount_namespace,
            ):
                try:
                    await step()
                except PodError as exc:
                    errors.append(str(exc))
            self.host.addresses.release(self.addresses.block)
            self.host.pods.pop(self.name, None)
            self.destroyed = True
            if errors:
                raise PodError(f"pod {self.name} was not fully removed: {'; '.join(errors)}")

    async def _remove_nat(self) -> None:
        if self.nat:
            await remove_nat_table(self.pod_name.nft_table)

    async def _remove_veth(self) -> None:
        await _links.delete_link(self.name)

    async def _remove_netns(self) -> None:
        await remove_netns(self.name)

    async def _remove_mount_namespace(self) -> None:
        if self.mount_ns_path is not None:
            await remove_mount_namespace(self.mount_ns_path)


async def remove_nat_table(table: str) -> None:
    try:
        await load_nft(release_ruleset(table), what=f"removal of NAT table {table}")
    except CaptureError as exc:
        raise PodError(str(exc)) from None


async def remove_netns(name: str) -> None:
    if (NETNS_DIR / name).exists():
        await run(["ip", "netns", "delete", name], what=f"pod {name}: network namespace removal")


async def remove_mount_namespace(path: Path) -> None:
    if not path.exists():
        return
    if is_mount_point(path):
        await run(["umount", str(path)], what=f"pod {path.name}: mount namespace removal")
    path.unlink(missing_ok=True)


def _forwarding(interface: str) -> bool | None:
    try:
        return Path(f"/proc/sys/net/ipv4/conf/{interface}/forwarding").read_text().strip() == "1"
    except OSError:
        return None


def _primary_gid(uid: int) -> int:
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid  # a bare uid with no passwd entry: use the same number as its group
