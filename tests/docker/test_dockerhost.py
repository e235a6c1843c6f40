"""The dockerhost backend on a real Docker engine: busybox containers with no network of their own, so
whatever they reach beyond their loopback came through the caretaker and the relay."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cornus_core.caller import CallerSession, Outcome
from cornus_core.events import Event, HopDecision, Log
from cornus_core.mountinfo import mounted_under
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec
from server.app import CornusServer
from server.backends.docker import DockerBackend
from tests.local.backend_support import NameProxy, Target

from .conftest import IMAGE, IMAGE_WITH_CMD, TOKEN, Server, docker_api, dockerhost_server


async def _run(server: CornusServer, spec: dict[str, Any], proxies: ProxySettings | None = None,
               ) -> tuple[Outcome, list[Event]]:
    events: list[Event] = []
    session = CallerSession(server.url, TOKEN, DeploySpec.model_validate(spec), on_event=events.append,
                            proxies=proxies or ProxySettings())
    outcome = await asyncio.wait_for(session.run(), 90)
    return outcome, events


def _left_in_run(backend: DockerBackend) -> list[str]:
    """What this server run's directory holds besides its lock: every deployment cleans up after itself."""
    return sorted(p.name for p in (backend.run_dir / backend.run_id).iterdir() if p.name != ".lock")


def _app(events: list[Event]) -> list[str]:
    return [e.line for e in events if isinstance(e, Log) and e.source == "app"]


@pytest.fixture
async def caller_side() -> Any:
    """A service only this side reaches (the host's loopback), known by a name only this side's proxy
    resolves."""
    target = await Target("the caller's side").start()
    proxy = NameProxy({"target.test": "127.0.0.1"})
    proxies = ProxySettings(all_proxy=await proxy.start())
    yield target, proxies
    await target.close()
    await proxy.close()


async def test_proxy_mode_relays_from_the_callers_side(docker_server: Server, caller_side: Any) -> None:
    server, backend = docker_server
    target, proxies = caller_side
    url = f"http://target.test:{target.port}/"
    spec = {"image": IMAGE, "command": f"wget -q -O- {url}; wget -q -O- http://denied.test/ || echo denied",
            "egress": {"mode": "proxy", "default": "deny", "rules": [{"pattern": "target.test", "route": "client"}]}}
    outcome, events = await _run(server, spec, proxies)
    assert outcome.exit_code == 0, events
    assert _app(events)[:1] == ["hello from the caller's side"] and "denied" in _app(events), events
    hops = {(e.hop, str(e.route)) for e in events if isinstance(e, HopDecision) and e.host == "target.test"}
    assert hops == {("caretaker", "client"), ("server", "client"), ("client", "client")}
    assert await backend.engine.containers("cornus.backend=cornustest") == []  # removed at teardown
    assert _left_in_run(backend) == []


async def test_transparent_mode_captures_an_app_that_ignores_proxies(docker_server: Server, caller_side: Any) -> None:
    """The container has no network: its DNS question is answered with a stand-in (the name is relayed),
    its connection captured and relayed by name; the caller's proxy knows the name."""
    server, _ = docker_server
    target, proxies = caller_side
    command = f"env | grep -i _proxy || echo no-proxy-variables; wget -q -O- http://target.test:{target.port}/"
    spec = {"image": IMAGE, "command": command,
            "egress": {"mode": "transparent", "default": "deny",
                       "rules": [{"pattern": "target.test", "route": "client"}]}}
    outcome, events = await _run(server, spec, proxies)
    assert outcome.exit_code == 0, events
    assert _app(events) == ["no-proxy-variables", "hello from the caller's side"], events
    [first] = [e for e in events if isinstance(e, HopDecision) and e.hop == "caretaker"]
    assert (first.host, first.ip, str(first.route)) == ("target.test", None, "client")


async def test_mounts_show_the_callers_directory_and_take_writes(docker_server: Server, tmp_path: Path) -> None:
    server, backend = docker_server
    source = tmp_path / "src"
    source.mkdir()
    (source / "hello.txt").write_text("from the caller\n")
    spec = {"image": IMAGE, "command": "cat /data/hello.txt && echo from the container > /data/out.txt",
            "mounts": [{"source": str(source), "target": "/data"}]}
    outcome, events = await _run(server, spec)
    assert outcome.exit_code == 0, events
    assert "from the caller" in _app(events)
    assert (source / "out.txt").read_text() == "from the container\n"
    # Teardown unmounted the 9P mount and the shared bind beneath it, and removed the run directory.
    assert mounted_under(backend.run_dir) == [] and _left_in_run(backend) == []


async def test_the_workloads_environment_workdir_and_exit_status(docker_server: Server) -> None:
    server, _ = docker_server
    spec = {"image": IMAGE, "command": ["sh", "-c", "pwd; echo $GREETING; exit 3"], "workdir": "/tmp",
            "env": {"GREETING": "bye"}}
    outcome, events = await _run(server, spec)
    assert outcome.exit_code == 3 and _app(events) == ["/tmp", "bye"], events


async def test_the_images_own_command_or_the_specs_in_its_place(docker_server: Server) -> None:
    server, _ = docker_server
    outcome, events = await _run(server, {"image": IMAGE_WITH_CMD})
    assert outcome.exit_code == 0 and _app(events) == ["from the image itself"], events
    outcome, events = await _run(server, {"image": IMAGE_WITH_CMD, "command": ["echo", "the spec's"]})
    assert outcome.exit_code == 0 and _app(events) == ["the spec's"], events  # not run by the entrypoint


async def test_clear_errors_before_anything_runs(docker_server: Server) -> None:
    server, _ = docker_server
    outcome, _ = await _run(server, {"image": "cornus-test/absent:1", "command": "true"})
    assert outcome.exit_code is None and outcome.reason == "deploy failed"
    assert any("not on the Docker engine" in m and "never pulls" in m for m in outcome.errors), outcome.errors
    outcome, _ = await _run(server, {"command": "true"})
    assert any("set `image`" in m for m in outcome.errors), outcome.errors


def test_the_embedded_server_on_dockerhost(dockerd: str, tmp_path: Path) -> None:
    """`CORNUS_BACKEND=dockerhost cornus-tui --plain`: the user's command line, end to end."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"image: {IMAGE}\ncommand: echo hello from the container\n")
    env = {**os.environ, "CORNUS_BACKEND": "dockerhost", "DOCKER_HOST": dockerd, "CORNUS_DOCKER_NETWORK": "none"}
    done = subprocess.run([str(Path(sys.executable).parent / "cornus-tui"), "-f", str(spec), "--plain"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "app: hello from the container" in done.stdout and "ready deployment=" in done.stdout, done.stdout
    assert "backend=dockerhost" in done.stdout


@pytest.fixture
async def bridged(dockerd: str, tmp_path: Path) -> Any:
    """A Docker bridge network of its own (no NAT: this engine writes no firewall rules), a target on the
    host's end of the bridge, and a dockerhost server whose containers join that network."""
    subnet, gateway = "10.231.7.0/24", "10.231.7.1"
    subprocess.run(["ip", "link", "del", "cornustest0"], capture_output=True)  # what a crashed run left
    with docker_api(dockerd) as api:
        created = api.post("/networks/create", json={
            "Name": "cornustest-net", "Driver": "bridge", "CheckDuplicate": True,
            "Options": {"com.docker.network.bridge.name": "cornustest0"},
            "IPAM": {"Config": [{"Subnet": subnet, "Gateway": gateway}]}}).json()
    target = await Target("the cluster").start(gateway)
    try:
        async with dockerhost_server(dockerd, tmp_path / "run", "cornustest-net") as (server, _):
            yield server, target, gateway
    finally:
        await target.close()
        with docker_api(dockerd) as api:
            api.delete(f"/networks/{created['Id']}")


async def test_on_a_bridge_network_cluster_egress_leaves_from_the_container(bridged: Any, caller_side: Any) -> None:
    server, cluster, gateway = bridged
    target, proxies = caller_side
    command = (f"wget -q -O- http://{gateway}:{cluster.port}/ && "
               f"wget -q -O- http://target.test:{target.port}/")
    spec = {"image": IMAGE, "command": command,
            "egress": {"mode": "transparent", "rules": [{"pattern": "target.test", "route": "client"}]}}
    outcome, events = await _run(server, spec, proxies)
    assert outcome.exit_code == 0, events
    assert _app(events) == ["hello from the cluster", "hello from the caller's side"], events
    # `cluster`: dialed by the caretaker from the container's network (its address on the bridge).
    [seen] = cluster.seen
    assert seen.peer.startswith("10.231.7.") and seen.peer != gateway
    assert target.seen[0].peer == "127.0.0.1"  # `client`: dialed here, on the caller's side
    # The caretaker's resolver asks what the container's resolv.conf names: Docker's embedded DNS (which
    # does not answer on this engine, that writes no firewall rules; the relayed name got its stand-in).
    said = [e.line for e in events if isinstance(e, Log) and e.source == "caretaker"]
    assert any("upstream 127.0.0.11:53 did not answer" in line for line in said), said


async def test_credentials_reach_the_container_by_file_endpoint_and_env(docker_server: Server) -> None:
    server, _ = docker_server
    command = ("cat /run/secrets/token; echo; ls /run/secrets; echo env=$API_token; "
               'wget -q -O- "$CORNUS_CREDENTIAL_API_URL"')
    spec = {"image": IMAGE, "command": command, "credentials": {"sources": [
        {"name": "api", "backend": "static", "config": {"values": {"token": "s3cret-minted-here"}},
         "deliver": [{"kind": "file", "path": "/run/secrets/token", "format": "raw"},
                     {"kind": "env", "prefix": "API_"}, {"kind": "endpoint"}]}]}}
    outcome, events = await _run(server, spec)
    assert outcome.exit_code == 0, events
    lines = _app(events)
    assert len(lines) == 4 and lines[:3] == ["s3cret-minted-here", "token", "env=s3cret-minted-here"], events
    assert "s3cret-minted-here" in lines[3]  # the endpoint on the container's loopback
    assert not Path("/run/secrets/token").exists()  # written for the container, not on this machine


async def test_a_deploy_that_fails_half_way_leaves_nothing(docker_server: Server) -> None:
    """The caretaker refuses its config after the pod's holder exists: the error says why, and the holder,
    the listener and the run directory are gone."""
    server, backend = docker_server
    backend.dns_upstream = ["not-an-address"]
    spec = {"image": IMAGE, "command": "true", "egress": {"mode": "transparent"}}
    outcome, events = await _run(server, spec)
    assert outcome.reason == "deploy failed" and outcome.exit_code is None
    assert any("caretaker exited before it was ready" in m for m in outcome.errors), outcome
    said = [e.line for e in events if isinstance(e, Log) and e.source == "caretaker"]
    assert any("'not-an-address' is not an IP address" in line for line in said), said
    assert await backend.engine.containers("cornus.backend=cornustest") == []
    assert _left_in_run(backend) == [] and mounted_under(backend.run_dir) == []


async def test_a_new_server_run_clears_a_dead_runs_containers_and_never_a_live_ones(
    docker_server: Server, dockerd: str, tmp_path: Path
) -> None:
    server, backend = docker_server
    events: list[Event] = []
    session = CallerSession(server.url, TOKEN, DeploySpec.model_validate({"image": IMAGE, "command": "sleep 600"}),
                            on_event=events.append)
    task = asyncio.create_task(session.run())
    try:
        async with asyncio.timeout(60):
            while not any(isinstance(e, Log) or getattr(e, "state", "") == "running" for e in events):
                await asyncio.sleep(0.05)
        # A run that crashed: its containers carry its label, its directory's lock is held by nobody.
        dead = backend.run_dir / "deadbeef"
        dead.mkdir()
        (dead / ".lock").touch()
        with docker_api(dockerd) as api:
            orphan = api.post("/containers/create", json={
                "Image": IMAGE, "Cmd": ["true"], "Labels": {"cornus.backend": "cornustest", "cornus.run": "deadbeef"},
                "HostConfig": {"NetworkMode": "none"}}).json()["Id"]
        other = DockerBackend(host=dockerd, run_dir=backend.run_dir, network="none", prefix="cornustest")
        try:
            assert await other.start() == [orphan[:12]]
        finally:
            await other.close()
        assert not dead.exists()
        alive = await backend.engine.containers(f"cornus.run={backend.run_id}")
        assert len(alive) == 2  # the live deployment's holder and workload
    finally:
        await session.down()
        await asyncio.wait_for(task, 60)


async def test_a_single_file_mount_shows_just_that_file(docker_server: Server, tmp_path: Path) -> None:
    server, _ = docker_server
    source = tmp_path / "src"
    source.mkdir()
    (source / "config.ini").write_text("[app]\nmode = dev\n")
    (source / "secret-sibling").write_text("not for the container\n")
    spec = {"image": IMAGE, "command": "cat /etc/app.ini; ls /etc",
            "mounts": [{"source": str(source / "config.ini"), "target": "/etc/app.ini", "read_only": True}]}
    outcome, events = await _run(server, spec)
    assert outcome.exit_code == 0, events
    lines = _app(events)
    assert lines[:2] == ["[app]", "mode = dev"] and "app.ini" in lines and "secret-sibling" not in lines, lines
