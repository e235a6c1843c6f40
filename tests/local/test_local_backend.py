"""The local backend end to end: a real server deploying into real pods, the caller's session in this
process, curl as the workload. Proves the egress promise: bytes routed ``client`` leave from the
caller's side, which the pod itself cannot reach."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cornus_core.caller import CallerSession
from cornus_core.events import Event, Log, Status
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec
from server.app import CornusServer
from server.backends.local import Pod, PodHost
from server.backends.local.backend import CARETAKER_MARK, LocalBackend
from server.backends.local.pod import NETNS_DIR

from .backend_support import TOKEN, Deploy, NameProxy, Run, Target, proxied_curl
from .conftest import host_state, needs_root, pid_alive

pytestmark = needs_root()

CRASHING_SERVER = Path(__file__).with_name("crashing_server.py")
PROJECT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def caretaker_argv_as(uid: int) -> list[str] | None:
    """A caretaker command that ``uid`` can run: this interpreter, or else the system's with this
    project and its packages on the path (this interpreter may live where only root can read)."""
    path = f"PYTHONPATH={PROJECT}:{sysconfig.get_paths()['purelib']}"
    for argv in ([sys.executable], ["/usr/bin/env", path, "/usr/bin/python3"]):
        probe = ["nsenter", f"--setgid={uid}", f"--setuid={uid}", "--", *argv, "-c", "import caretaker.main"]
        if subprocess.run(probe, capture_output=True, cwd="/", timeout=30).returncode == 0:
            return [*argv, "-m", "caretaker"]
    return None


def pod_gone(name: str) -> bool:
    """Nothing of pod ``name`` is left on the host: namespace, interface, nft table."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10).stdout
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=10).stdout
    return not (NETNS_DIR / name).exists() and f" {name}:" not in links and name.replace("-", "_") not in tables


# -- proxy mode -----------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["client", "cluster"])
async def test_proxy_mode_client_leaves_from_the_caller_and_cluster_cannot_reach_it(
    deploy: Deploy, target: Target, route: str, tmp_path: Path
) -> None:
    """The target listens only on the host's 127.0.0.1. Routed ``client``, the caller dials it and the
    app gets the body; routed ``cluster``, the caretaker dials it from the pod, whose loopback is its
    own, and the app gets a 502. The app runs with the spec's env and workdir beside the proxy env."""
    url = f"http://127.0.0.1:{target.port}/{route}"
    command = (f'echo "greeting=$GREETING pwd=$(pwd) proxy=$HTTP_PROXY"; {proxied_curl(url)}; '
               f"curl -sS --max-time 5 {url} || echo direct-failed")
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": route}
    spec = {"command": command, "env": {"GREETING": "hi"}, "workdir": str(tmp_path),
            "egress": {"mode": "proxy", "rules": [rule]}}
    run = await deploy(spec)

    assert run.outcome is not None and run.outcome.exit_code == 0, run.events
    assert f"greeting=hi pwd={tmp_path} proxy=http://127.0.0.1:15002" in run.app_lines
    assert "direct-failed" in run.app_lines  # the pod cannot reach the target on its own
    hops = run.hops()
    if route == "client":
        assert "hello from the caller's side" in run.app_lines and "status=200" in run.app_lines
        assert {hop: hops[hop].route for hop in hops} == {"caretaker": "client", "server": "client",
                                                          "client": "client"}
        assert target.paths == ["/client"]
        assert target.seen[0].peer == "127.0.0.1"  # it came from this machine's own loopback: the caller
    else:
        assert "status=502" in run.app_lines
        assert set(hops) == {"caretaker"} and hops["caretaker"].route == "cluster"
        assert target.seen == []
    assert pod_gone(run.pod[0])


# -- transparent mode -----------------------------------------------------------------------------


@pytest.fixture
async def site(pod_host: PodHost) -> AsyncIterator[tuple[Pod, Target]]:
    """A target on the host end of another test namespace's veth: an address of this machine that is
    not loopback. The pod under test could reach it straight (packets to any of the host's own addresses
    are delivered locally), so a capture that lets traffic by would show; the caller reaches it too."""
    other = await Pod.create(pod_host)
    t = await Target("the site").start(*filter(None, (other.host_ip, other.host_ip6)))
    try:
        yield other, t
    finally:
        await t.close()


@pytest.mark.parametrize("exemption", ["mark", "uid"])
async def test_transparent_mode_captures_plain_curl_and_recovers_names(
    deploy: Deploy, local_backend: LocalBackend, site: tuple[Pod, Target], exemption: str
) -> None:
    """The app runs curl with no proxy variables or flags. Its connections are captured and routed by the
    policy: by address (``client``), by name to ``cluster`` (the caretaker dials from the pod, uncaptured), by the HTTP Host name of a made-up address (``intranet.test`` at
    10.99.0.1, which only the caller's corporate proxy knows), and denied by name although the address
    itself is reachable from the pod. The default is ``deny``, so without name recovery the second
    request would fail. The caretaker is exempt by socket mark, or by running as a uid of its own."""
    other, t = site
    local_backend.caretaker_user = None
    if exemption == "uid":
        argv = caretaker_argv_as(NOBODY)
        if argv is None:
            pytest.skip("no Python interpreter here that uid nobody may run the caretaker with")
        local_backend.caretaker_user, local_backend.caretaker_argv = "nobody", argv
    ip, port = other.host_ip, t.port
    proxy = NameProxy({"intranet.test": ip})
    proxies = ProxySettings(all_proxy=await proxy.start())

    def curl(label: str, url: str, *extra: str) -> str:
        return (f'curl -sS -g --max-time 20 -w "{label} status=%{{http_code}}\\n" {" ".join(extra)} {url}; '
                f'echo "{label} exit=$?"')

    commands = [
        "env | grep -i _proxy || echo no-proxy-variables",
        "nft list table inet cornus_capture | grep -E 'skuid|mark'",
        curl("by-ip", f"http://{ip}:{port}/by-ip"),
        curl("by-name", f"http://intranet.test:{port}/by-name", "--resolve", f"intranet.test:{port}:10.99.0.1"),
        curl("blocked", f"http://blocked.test:{port}/blocked", "--resolve", f"blocked.test:{port}:{ip}"),
        curl("cluster", f"http://direct.test:{port}/by-cluster", "--resolve", f"direct.test:{port}:{ip}"),
    ]
    rules = [
        {"pattern": "blocked.test", "route": "deny"},
        {"pattern": "direct.test", "route": "cluster"},
        {"pattern": f"{ip}:{port}", "route": "client"},
        {"pattern": "intranet.test", "route": "client"},
    ]
    if other.host_ip6:
        commands.append(curl("by-ipv6", f"http://[{other.host_ip6}]:{port}/by-ipv6"))
        rules.append({"pattern": f"[{other.host_ip6}]:{port}", "route": "client"})
    spec = {"command": "; ".join(commands),
            "egress": {"mode": "transparent", "default": "deny", "rules": rules}}
    try:
        run = await deploy(spec, proxies=proxies)
    finally:
        await proxy.close()

    lines = run.app_lines
    assert run.outcome is not None and run.outcome.exit_code is not None, run.events
    assert "no-proxy-variables" in lines
    exempt = f"meta skuid {NOBODY}" if exemption == "uid" else f"meta mark {CARETAKER_MARK:#010x}"
    assert any(exempt in line for line in lines), lines
    pod_name, pod_ip = run.pod

    # By address: all three hops route it client, and the target saw the caller, not the pod.
    assert "by-ip status=200" in lines, run.events
    by_ip = run.decisions(ip)
    assert {hop: d.route for hop, d in by_ip.items()} == {"caretaker": "client", "server": "client",
                                                          "client": "client"}
    # By name: the policy saw the sniffed name and the original address.
    assert "by-name status=200" in lines, run.events
    by_name = run.decisions("intranet.test")
    assert by_name["caretaker"].ip == "10.99.0.1"
    assert {hop: d.route for hop, d in by_name.items()} == {"caretaker": "client", "server": "client",
                                                            "client": "client"}
    assert any(line.startswith("CONNECT intranet.test:") for line in proxy.seen)
    # Denied by name: the connection is cut before anything is sent on, and only the first hop saw it.
    assert not any(line.startswith("blocked status=200") for line in lines)
    assert "blocked exit=0" not in lines
    assert {hop: d.route for hop, d in run.decisions("blocked.test").items()} == {"caretaker": "deny"}
    # Routed cluster: the caretaker dials the original address from the pod, and its own connection is
    # not captured again (it would loop back into the caretaker).
    assert "cluster status=200" in lines, run.events
    assert {hop: d.route for hop, d in run.decisions("direct.test").items()} == {"caretaker": "cluster"}
    expected = ["/by-ip", "/by-name", "/by-cluster"] + (["/by-ipv6"] if other.host_ip6 else [])
    assert sorted(t.paths) == sorted(expected)
    # Only the cluster request came from the pod; the others left from the caller's side.
    assert {seen.path for seen in t.seen if seen.peer == pod_ip} == {"/by-cluster"}
    assert {seen.host for seen in t.seen if seen.path == "/by-name"} == {f"intranet.test:{port}"}
    if other.host_ip6:
        assert "by-ipv6 status=200" in lines, run.events
    assert pod_gone(pod_name)


async def test_caretaker_redials_through_its_own_capture(
    local_server: CornusServer, local_backend: LocalBackend, site: tuple[Pod, Target], tmp_path: Path
) -> None:
    """The server drops the caretaker's connection after capture is on: the caretaker's new connection
    carries its socket mark, passes the capture rules, and the next captured request is relayed again."""
    other, t = site
    local_backend.caretaker_user = None  # exempt by mark
    go = tmp_path / "go"
    url = f"http://{other.host_ip}:{t.port}"
    curl = 'curl -sS --max-time 20 -w "status=%{http_code}\\n"'
    command = (f"{curl} {url}/first; echo first-done; while [ ! -e {go} ]; do sleep 0.05; done; "
               f"{curl} {url}/second")
    rule = {"pattern": f"{other.host_ip}:{t.port}", "route": "client"}
    spec = {"command": command, "egress": {"mode": "transparent", "default": "deny", "rules": [rule]}}
    events: list[Event] = []
    session = CallerSession(local_server.url, TOKEN, DeploySpec.model_validate(spec), on_event=events.append,
                            proxies=ProxySettings())
    task = asyncio.create_task(session.run())
    try:
        async with asyncio.timeout(60):
            while "first-done" not in Run(None, events).app_lines:
                await asyncio.sleep(0.05)
        assert local_server.registry is not None
        (attach,) = local_server.registry.deployments.values()
        first = attach.caretaker
        assert first is not None
        await first.aclose(timeout=1)
        go.write_text("")
        outcome = await asyncio.wait_for(task, 60)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    assert outcome.exit_code == 0, events
    assert Run(outcome, events).app_lines.count("status=200") == 2, events
    assert attach.caretaker is not first
    assert t.paths == ["/first", "/second"]


# -- teardown and restart -------------------------------------------------------------------------


async def test_teardown_stops_the_workload_before_the_caretaker_and_leaves_nothing(
    local_server: CornusServer, target: Target
) -> None:
    """On SIGTERM the workload still reaches the caller through its caretaker: the caretaker outlives it."""
    url = f"http://127.0.0.1:{target.port}/during-teardown"
    command = f"trap '{proxied_curl(url)}; exit 0' TERM; echo started; sleep 300 & wait"
    spec = {"command": command,
            "egress": {"mode": "proxy", "rules": [{"pattern": f"127.0.0.1:{target.port}", "route": "client"}]}}
    events: list[Event] = []
    session = CallerSession(local_server.url, TOKEN, DeploySpec.model_validate(spec), on_event=events.append,
                            proxies=ProxySettings())
    task = asyncio.create_task(session.run())
    try:
        async with asyncio.timeout(60):
            while "started" not in Run(None, events).app_lines:
                await asyncio.sleep(0.05)
        assert local_server.registry is not None
        (attach,) = local_server.registry.deployments.values()
        assert attach.deployment is not None
        state = attach.deployment.state
        caretaker_pid, app_pid = state["caretaker"].pid, state["app"].pid
        assert local_server.registry.backend.status(attach.deployment) == "running"
        await session.down()
        outcome = await asyncio.wait_for(task, 60)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    run = Run(outcome, events)
    assert outcome.reason == "caller asked to tear down"
    stopping = next(i for i, e in enumerate(events) if isinstance(e, Status) and e.state == "stopping")
    after = [e.line for e in events[stopping:] if isinstance(e, Log) and e.source == "app"]
    assert "status=200" in after, events
    assert target.paths == ["/during-teardown"]
    assert not pid_alive(app_pid) and not pid_alive(caretaker_pid)
    assert local_server.registry.backend.status(attach.deployment) == "deleted"
    assert pod_gone(run.pod[0])


async def test_a_restarted_backend_removes_the_pods_of_a_crashed_server(prefix: str, run_dir: Path) -> None:
    """A server deploying a transparent workload is killed outright; the next backend start cleans up."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CRASHING_SERVER), prefix, str(run_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 1 and out, err.decode()
    leaked = json.loads(out)
    owner, name = leaked["owner"], leaked["pod"]
    before = host_state(owner, run_dir)
    assert before.netns and before.links and before.mount_files
    assert all(pid_alive(pid) for pid in leaked["pids"])

    backend = LocalBackend(prefix=prefix, run_dir=run_dir)
    try:
        assert await backend.start() == [name]
        assert host_state(owner, run_dir).empty
        assert not any(pid_alive(pid) for pid in leaked["pids"])
    finally:
        await backend.close()


# -- the command ----------------------------------------------------------------------------------


async def test_plain_command_on_the_embedded_local_backend(target: Target, tmp_path: Path) -> None:
    """`cornus-tui -f spec --plain` chooses local pods here (root), runs the session and exits 0."""
    spec = tmp_path / "app.yaml"
    spec.write_text(
        "name: e2e\n"
        f"command: {json.dumps(proxied_curl(f'http://127.0.0.1:{target.port}/e2e'))}\n"
        "egress:\n  mode: proxy\n  rules:\n"
        f"    - pattern: '127.0.0.1:{target.port}'\n      route: client\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("CORNUS_", "HTTP", "ALL_", "NO_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from cornus_tui.cli import main; raise SystemExit(main())",
        "-f", str(spec), "--plain", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out_bytes, err_bytes = await asyncio.wait_for(proc.communicate(), 120)
    out, err = out_bytes.decode(), err_bytes.decode()
    assert proc.returncode == 0, out + err
    assert "backend=local" in out
    hops = [line.split()[3:5] for line in out.splitlines() if " conn " in f" {line}" and "[rule" in line]
    assert hops == [["caretaker", "client"], ["server", "client"], ["client", "client"]], out
    assert "app: status=200" in out and "exit 0" in out
    name = next(line.split("(pod ")[1].split()[0] for line in out.splitlines() if "(pod " in line)
    assert pod_gone(name)
    assert target.paths == ["/e2e"]
