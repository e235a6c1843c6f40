"""User-namespace pods, the local backend's fallback without root: the pod itself, its teardown and
leftovers, and sessions end to end in proxy and transparent mode. The mechanism is the same with or
without root, so these run as root (forcing the rootless kind) and, where an interpreter that an
unprivileged user may run exists, once more as uid nobody."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from cornus_core.events import Error
from cornus_core.ninep.fuse import fuse_unavailable
from cornus_core.proxy.settings import ProxySettings
from server.backends.base import BackendError
from server.backends.choose import rootless_notice
from server.backends.local import PodHost, cleanup_leftovers
from server.backends.local.backend import CARETAKER_MARK, LocalBackend
from server.backends.local.isolation import probe_userns
from server.backends.local.rootless import POD_IPV4, RootlessPod, fuse_unusable, holders_dir

from .backend_support import Deploy, NameProxy, Target, proxied_curl
from .conftest import pid_alive, run_in

PROJECT = Path(__file__).resolve().parents[2]
NOBODY = 65534
TOOLS = ("unshare", "nsenter", "ip", "nft", "curl")


@pytest.fixture(scope="module")
def userns_works() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} on PATH")
    problem = asyncio.run(probe_userns())
    if problem is not None:
        pytest.skip(f"user namespaces with capture do not work here: {problem}")


pytestmark = pytest.mark.usefixtures("userns_works")


def holders_left(run_dir: Path) -> list[str]:
    directory = holders_dir(run_dir)
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """Short, so the pods' unix socket paths fit in sun_path."""
    path = Path(tempfile.mkdtemp(prefix="cnrl-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def rootless_host(prefix: str, run_dir: Path) -> AsyncIterator[PodHost]:
    host = PodHost(prefix=prefix, run_dir=run_dir, stop_grace=2.0)
    try:
        yield host
    finally:
        await host.close()
    assert holders_left(run_dir) == [], "the pod host left something behind"


@pytest.fixture
async def local_backend(prefix: str, run_dir: Path) -> AsyncIterator[LocalBackend]:
    """Replaces the root backend of ``backend_support``: its ``deploy`` then runs user-namespace pods."""
    backend = LocalBackend(prefix=prefix, run_dir=run_dir, stop_grace=2.0, rootless=True,
                           notice="user-namespace pods (test)")
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()
    assert holders_left(run_dir) == [], "the local backend left something behind"


# -- the pod --------------------------------------------------------------------------------------


async def test_a_rootless_pod_has_one_uid_its_own_loopback_and_capture_tools(rootless_host: PodHost) -> None:
    pod = await RootlessPod.create(rootless_host)
    code, out = await run_in(pod, ["sh", "-c", "id -u; ip -br addr show eth0; nft list tables"], cwd="/")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "0"  # this server's uid, mapped to root inside
    assert POD_IPV4 in lines[1]
    assert "table inet cornus_fence" in lines
    # Nothing leaves: an uncaptured connection beyond the pod is refused at once, not left to time out.
    code, out = await run_in(pod, ["curl", "-sS", "--max-time", "10", "http://203.0.113.9:9/"])
    assert code == 7 and "Couldn't connect" in out, out
    with pytest.raises(Exception, match="one uid"):
        await pod.spawn(["true"], uid=NOBODY)
    # The pod's processes share its mount namespace (where the caretaker's FUSE mounts appear).
    code, out = await run_in(pod, ["sh", "-c", "readlink /proc/self/ns/mnt /proc/self/ns/net"])
    assert code == 0 and out.split() == [os.readlink(f"/proc/{pod.holder.pid}/ns/{ns}")  # type: ignore[union-attr]
                                         for ns in ("mnt", "net")]


async def test_destroy_stops_every_process_and_the_holder(rootless_host: PodHost, run_dir: Path) -> None:
    pod = await RootlessPod.create(rootless_host)
    assert pod.holder is not None
    holder = pod.holder.pid
    sleeper = await pod.spawn(["sh", "-c", "sleep 300 & exec sleep 300"])
    assert holders_left(run_dir) == [f"{pod.name}.pid"]
    await pod.destroy()
    await pod.destroy()  # idempotent
    assert not pid_alive(holder) and not pid_alive(sleeper.pid)
    assert holders_left(run_dir) == []


CRASHING_RUN = """
import asyncio, json, os, sys
from server.backends.local import PodHost
from server.backends.local.rootless import RootlessPod

async def main():
    host = PodHost(prefix=sys.argv[1], run_dir=sys.argv[2])
    pod = await RootlessPod.create(host)
    sleeper = await pod.spawn(["sleep", "300"], stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    while os.readlink(f"/proc/{sleeper.pid}/ns/net") != os.readlink(f"/proc/{pod.holder.pid}/ns/net"):
        await asyncio.sleep(0.01)  # nsenter has not joined the pod yet
    print(json.dumps({"name": pod.name, "pids": [pod.holder.pid, sleeper.pid]}), flush=True)
    os._exit(1)

asyncio.run(main())
"""


async def test_cleanup_leftovers_stops_a_crashed_runs_holders(prefix: str, run_dir: Path) -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CRASHING_RUN, prefix, str(run_dir),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1 and out, err.decode()
    leaked = json.loads(out)
    assert all(pid_alive(pid) for pid in leaked["pids"])
    async with PodHost(prefix=prefix, run_dir=run_dir) as live:  # a live run's pods stay
        mine = await RootlessPod.create(live)
        assert await cleanup_leftovers(prefix, run_dir=run_dir) == [leaked["name"]]
        # Out of the namespace already, they may take a moment to finish exiting.
        async with asyncio.timeout(10):
            while any(pid_alive(pid) for pid in leaked["pids"]):
                await asyncio.sleep(0.02)
        assert holders_left(run_dir) == [f"{mine.name}.pid"]
        assert mine.holder is not None and pid_alive(mine.holder.pid)


# -- the backend, end to end ----------------------------------------------------------------------


async def test_proxy_mode_reaches_the_callers_loopback_through_the_unix_socket_link(
    deploy: Deploy, target: Target, run_dir: Path
) -> None:
    """The caretaker's only way to the server is the unix socket; ``client`` reaches the target on the
    host's loopback through the caller, the pod cannot reach it directly, and ``cluster`` gets a 502."""
    client_url = f"http://127.0.0.1:{target.port}/client"
    cluster_url = f"http://127.0.0.2:{target.port}/cluster"
    command = (f"{proxied_curl(client_url)}; {proxied_curl(cluster_url)}; "
               f"curl -sS --max-time 5 {client_url} || echo direct-failed; echo server=$CORNUS_SERVER_URL")
    rules = [{"pattern": f"127.0.0.1:{target.port}", "route": "client"},
             {"pattern": f"127.0.0.2:{target.port}", "route": "cluster"}]
    run = await deploy({"command": command, "egress": {"mode": "proxy", "rules": rules}})

    assert run.outcome is not None and run.outcome.exit_code == 0, run.events
    lines = run.app_lines
    assert "hello from the caller's side" in lines and "status=200" in lines, run.events
    assert "status=502" in lines and "direct-failed" in lines
    assert target.paths == ["/client"] and target.seen[0].peer == "127.0.0.1"
    assert run.pod[1] == POD_IPV4
    notices = [(e.message, e.fatal) for e in run.events if isinstance(e, Error)]
    assert notices == [("user-namespace pods (test)", False)]
    assert holders_left(run_dir) == []  # the pod and its socket went with the session


async def test_transparent_mode_captures_an_app_without_proxy_variables(
    deploy: Deploy, target: Target
) -> None:
    """curl with no proxy settings dials a made-up address; capture hands it to the caretaker (exempt
    by socket mark, its one uid being the app's too), the caller's corporate proxy maps that address to
    the target on the caller's loopback. A ``cluster`` destination beyond the pod fails fast."""
    made_up = "203.0.113.9"
    proxy = NameProxy({made_up: "127.0.0.1"})
    proxies = ProxySettings(all_proxy=await proxy.start())
    commands = [
        "env | grep -i _proxy || echo no-proxy-variables",
        "nft list table inet cornus_capture | grep -o 'meta mark 0x[0-9a-f]*' | sort -u",
        f'curl -sS --max-time 20 -w "captured status=%{{http_code}}\\n" http://{made_up}:{target.port}/captured',
        f'curl -sS --max-time 20 http://203.0.113.10:{target.port}/cluster || echo "cluster exit=$?"',
    ]
    rules = [{"pattern": f"{made_up}:{target.port}", "route": "client"},
             {"pattern": f"203.0.113.10:{target.port}", "route": "cluster"}]
    spec = {"command": "; ".join(commands), "egress": {"mode": "transparent", "default": "deny", "rules": rules}}
    try:
        run = await deploy(spec, proxies=proxies)
    finally:
        await proxy.close()

    lines = run.app_lines
    assert run.outcome is not None and run.outcome.exit_code is not None, run.events
    assert "no-proxy-variables" in lines
    assert f"meta mark {CARETAKER_MARK:#010x}" in lines  # the caretaker's exemption: by mark, never by uid
    assert "hello from the caller's side" in lines and "captured status=200" in lines, run.events
    assert {hop: d.route for hop, d in run.decisions(made_up).items()} == {
        "caretaker": "client", "server": "client", "client": "client"}
    assert any(line.startswith(f"CONNECT {made_up}:") for line in proxy.seen)
    assert any(line.startswith("cluster exit=") for line in lines), lines
    assert target.paths == ["/captured"]


async def test_mounts_are_refused_or_work(deploy: Deploy, tmp_path: Path) -> None:
    """FUSE from inside a user namespace: it works when this server may open /dev/fuse; otherwise the
    session is refused with the reason before any pod is made (fail closed)."""
    if fuse_unavailable():
        pytest.skip(fuse_unavailable() or "")
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello.txt").write_text("written by the caller\n")
    target = Path("/tmp") / f"cornus-rl-{os.getpid()}" / "src"
    run = await deploy({"command": f"cat {target}/hello.txt", "mounts": [{"source": str(src), "target": str(target)}]})
    if fuse_unusable() is None:
        assert run.outcome is not None and run.outcome.exit_code == 0, run.events
        assert "written by the caller" in run.app_lines
        assert str(target) not in Path("/proc/self/mountinfo").read_text()
    else:
        errors = [e.message for e in run.events if isinstance(e, Error) and e.fatal]
        assert any("/dev/fuse" in message for message in errors), run.events


# -- choosing it ----------------------------------------------------------------------------------


def test_rootless_pods_refuse_nat_and_say_what_they_lack() -> None:
    with pytest.raises(BackendError, match="cannot have NAT"):
        LocalBackend(rootless=True, nat=True)
    notice = rootless_notice(("root pods: not running as root",), nat=True)
    assert "not running as root" in notice and "own loopback" in notice and "CORNUS_LOCAL_NAT is ignored" in notice


# -- as an unprivileged user ----------------------------------------------------------------------


UNPRIVILEGED_SESSION = """
import asyncio, json, sys
from cornus_core.caller import CallerSession
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec
from server.app import CornusServer
from server.auth import Authenticator, new_secret
from server.backends.choose import choose_backend, start_backend, stop_backend
from server.gateway import Gateway

async def main(port):
    backend = await choose_backend("auto")
    if backend.name == "local":  # the caretaker gets a clean environment: hand it this project's path
        backend.caretaker_argv = ["/usr/bin/env", "PYTHONPATH=" + ":".join(sys.path[1:]), sys.executable, "-m", "caretaker"]
    server = CornusServer(auth=Authenticator("tok", new_secret()), backend=backend, gateway=Gateway(enabled=False))
    await server.start()
    await start_backend(backend, server)
    url = f"http://127.0.0.1:{port}/as-nobody"
    spec = {"command": f'id -u; curl -sS --max-time 20 --noproxy "" -x "$HTTP_PROXY" {url}; '
                       f"curl -sS --max-time 5 {url} || echo direct-failed",
            "egress": {"mode": "proxy", "rules": [{"pattern": f"127.0.0.1:{port}", "route": "client"}]}}
    lines = []
    session = CallerSession(server.url, "tok", DeploySpec.model_validate(spec), proxies=ProxySettings(),
                            on_event=lambda e: lines.append(getattr(e, "line", None) or getattr(e, "message", "")))
    outcome = await asyncio.wait_for(session.run(), 90)
    # A mount needs FUSE from inside the namespace: refused before any pod when /dev/fuse is closed to us.
    refused = []
    mount = {"command": "true", "mounts": [{"source": "/tmp", "target": "/tmp/cornus-never"}]}
    session = CallerSession(server.url, "tok", DeploySpec.model_validate(mount), proxies=ProxySettings(),
                            on_event=lambda e: refused.append(e.message) if getattr(e, "fatal", False) else None)
    await asyncio.wait_for(session.run(), 90)
    await stop_backend(backend)
    await server.close()
    print(json.dumps({"backend": backend.name, "rootless": getattr(backend, "rootless", None),
                      "exit": outcome.exit_code, "lines": lines,
                      "refused": refused}))

asyncio.run(main(int(sys.argv[1])))
"""


def nobody_python(workdir: Path) -> list[str] | None:
    """An interpreter uid nobody can run with this project importable, or None."""
    env_path = f"PYTHONPATH={PROJECT}:{sysconfig.get_paths()['purelib']}"
    for argv in ([sys.executable], ["/usr/bin/env", env_path, "/usr/bin/python3"]):
        # Through a shell: setpriv itself may start an interpreter that the user could not start again
        # (sys.executable is how the server starts the caretaker and the probe).
        probe = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", "sh", "-c",
                 '"$@" -c "import server.backends.local.rootless, caretaker.main"', "sh", *argv]
        if subprocess.run(probe, capture_output=True, cwd=workdir, timeout=30).returncode == 0:
            return argv
    return None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to become uid nobody")
async def test_an_unprivileged_server_chooses_rootless_pods_and_runs_a_session(target: Target) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="cnrl-nobody-"))
    try:
        os.chown(workdir, NOBODY, NOBODY)
        python = nobody_python(workdir)
        if python is None:
            pytest.skip("no Python interpreter here that uid nobody may import this project with")
        env = {"PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin", "HOME": str(workdir),
               "TMPDIR": str(workdir)}
        proc = await asyncio.create_subprocess_exec(
            "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
            *python, "-c", UNPRIVILEGED_SESSION, str(target.port), cwd=workdir, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 150)
        assert proc.returncode == 0, err.decode()[-3000:]
        result = json.loads(out.decode().strip().splitlines()[-1])
        assert (result["backend"], result["rootless"], result["exit"]) == ("local", True, 0), result
        lines = result["lines"]
        assert "0" in lines and "hello from the caller's side" in lines and "direct-failed" in lines, lines
        assert any("local pods run in user namespaces (root pods: not running as root)" in line for line in lines)
        assert target.paths == ["/as-nobody"]
        assert list((workdir / f"cornus-{NOBODY}" / "userns").glob("*")) == []  # the default run dir
        if os.stat("/dev/fuse").st_mode & 0o006 != 0o006:  # closed to uid nobody
            assert any("client-local mounts are unavailable in user-namespace pods here: /dev/fuse" in m
                       for m in result["refused"]), result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
