"""Gateway, the caller's own proxy, teardown order and redial, with real processes and sockets."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from relay_support import Target, curl

from cornus_core.events import Log
from cornus_core.policy import compile_policy
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import EgressSpec
from server.gateway import Gateway


def _spec(command: str, rules: list[dict[str, str]]) -> dict[str, object]:
    return {"command": command, "egress": {"mode": "proxy", "rules": rules}}


async def test_gateway_with_opt_in_dials_from_the_server(server, deploy, target: Target) -> None:
    server.registry.gateway = Gateway(enabled=True, ceiling=compile_policy(EgressSpec.model_validate(
        {"rules": [{"pattern": f"127.0.0.1:{target.port}", "route": "gateway"}], "default": "deny"})))
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "gateway"}
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"), [rule]))
    assert "hello from target" in run.app_lines
    assert run.ends["server"].outcome == "ok" and "client" not in run.hops()


async def test_gateway_ceiling_deny_is_refused(server, deploy, target: Target) -> None:
    server.registry.gateway = Gateway(enabled=True, ceiling=compile_policy(EgressSpec.model_validate(
        {"rules": [{"pattern": "127.0.0.1", "route": "deny"}]})))
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"),
                             [{"pattern": f"127.0.0.1:{target.port}", "route": "gateway"}]))
    assert "status=403" in run.app_lines
    assert "operator ceiling" in run.ends["server"].reason
    assert target.requests == 0


async def test_gateway_refuses_loopback_unless_the_ceiling_names_it(server, deploy, target: Target) -> None:
    server.registry.gateway = Gateway(enabled=True)
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"),
                             [{"pattern": f"127.0.0.1:{target.port}", "route": "gateway"}]))
    assert "status=403" in run.app_lines
    assert "loopback" in run.ends["server"].reason
    assert target.requests == 0


class ConnectProxy:
    """A small real HTTP CONNECT proxy standing in for a corporate proxy; records what it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.auth: list[str] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        request_line, *headers = head.split("\r\n")
        self.seen.append(request_line)
        self.auth += [h.split(":", 1)[1].strip() for h in headers if h.lower().startswith("proxy-authorization")]
        host, port = request_line.split()[1].rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


async def test_caller_dials_through_its_own_proxy(deploy, target: Target) -> None:
    corp = ConnectProxy()
    port = await corp.start()
    proxies = ProxySettings(http_proxy=f"http://alice:s3cret@127.0.0.1:{port}")
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "client"}
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"), [rule]), proxies=proxies)
    assert "hello from target" in run.app_lines
    assert corp.seen == [f"CONNECT 127.0.0.1:{target.port} HTTP/1.1"]
    assert corp.auth and corp.auth[0].startswith("Basic ")


async def test_no_proxy_bypasses_the_callers_proxy(deploy, target: Target) -> None:
    corp = ConnectProxy()
    port = await corp.start()
    proxies = ProxySettings(http_proxy=f"http://127.0.0.1:{port}", no_proxy="127.0.0.1")
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "client"}
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"), [rule]), proxies=proxies)
    assert "hello from target" in run.app_lines
    assert corp.seen == []


async def test_workload_is_stopped_before_its_caretaker(live, target: Target) -> None:
    # On SIGTERM the workload makes one more request through the caretaker: it only succeeds when
    # the caretaker is still there, i.e. when the workload is deleted first.
    command = (f"trap '{curl(f'http://127.0.0.1:{target.port}/last')}; exit 0' TERM; "
               "echo started; while :; do sleep 0.1; done")
    session = await live(_spec(command, []))
    for _ in range(300):
        if any(isinstance(e, Log) and e.line == "started" for e in session.events):
            break
        await asyncio.sleep(0.05)
    run = await session.finish()
    assert "hello from target" in run.app_lines
    states = [e.state for e in run.events if e.type == "status"]
    assert states.index("stopping") < states.index("deleted")
    assert run.events[-1].type == "done"


async def test_caretaker_redials_after_losing_the_server(live, target: Target, tmp_path: Path) -> None:
    go = tmp_path / "go"
    url = f"http://127.0.0.1:{target.port}/"
    command = f"{curl(url)}; echo first-done; while [ ! -e {go} ]; do sleep 0.05; done; {curl(url)}"
    session = await live(_spec(command, [{"pattern": f"127.0.0.1:{target.port}", "route": "client"}]))
    dep = await session.deployment()
    for _ in range(600):
        if "first-done" in [e.line for e in session.events if isinstance(e, Log)]:
            break
        await asyncio.sleep(0.05)
    attach = session.server.registry.deployments[dep.id]
    first = attach.caretaker
    await first.aclose(timeout=1)
    go.write_text("")
    outcome = await asyncio.wait_for(session.task, 60)
    lines = [e.line for e in session.events if isinstance(e, Log) and e.source == "app"]
    assert outcome.exit_code == 0, session.events
    assert lines.count("hello from target") == 2
    assert attach.caretaker is not first
    assert target.requests == 2
    json.dumps([e.to_dict() for e in session.events])  # every event stays serialisable


async def test_live_policy_update_reaches_all_three_hops(live, target: Target, tmp_path: Path) -> None:
    go = tmp_path / "go"
    url = f"http://127.0.0.1:{target.port}/"
    command = f"{curl(url)}; echo first-done; while [ ! -e {go} ]; do sleep 0.05; done; {curl(url)}"
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "client"}
    session = await live(_spec(command, [rule]))
    for _ in range(600):
        if "first-done" in [e.line for e in session.events if isinstance(e, Log)]:
            break
        await asyncio.sleep(0.05)
    version = await session.session.apply_policy(EgressSpec.model_validate(
        {"rules": [{"pattern": f"127.0.0.1:{target.port}", "route": "deny"}]}))
    for _ in range(200):
        applied = {e.hop: e.version for e in session.events if e.type == "policy"}
        if len(applied) == 3:
            break
        await asyncio.sleep(0.05)
    assert applied == {"client": version, "server": version, "caretaker": version}
    go.write_text("")
    await asyncio.wait_for(session.task, 60)
    lines = [e.line for e in session.events if isinstance(e, Log) and e.source == "app"]
    assert "hello from target" in lines and "status=403" in lines
    assert target.requests == 1
    last = [e for e in session.events if e.type == "hop"][-1]
    assert (last.hop, last.route, last.version) == ("caretaker", "deny", version)


async def test_a_detached_deployment_outlives_its_caller(server, target: Target, tmp_path: Path) -> None:
    from relay_support import TOKEN

    from cornus_core.wire import dial_websocket, write_header
    from server.app import DEPLOY_ATTACH

    done = tmp_path / "done"
    go = tmp_path / "go"
    # Gateway-free, client-free policy: allowed to run detached. It keeps its cluster egress.
    command = (f"while [ ! -e {go} ]; do sleep 0.05; done; "
               f"{curl(f'http://127.0.0.1:{target.port}/')} > {done}")
    spec = {"command": command, "detach": True, "egress": {"mode": "proxy", "default": "cluster"}}
    mux = await dial_websocket(server.url + DEPLOY_ATTACH, token=TOKEN)
    control = await mux.open_stream()
    await write_header(control, "C")
    control.write(json.dumps(spec).encode() + b"\n")
    while b'"ready"' not in await control.readline():
        pass
    await mux.aclose()  # the caller goes away
    await asyncio.sleep(0.5)
    assert len(server.registry.deployments) == 1  # still deployed
    go.write_text("")
    for _ in range(400):
        if not server.registry.deployments:
            break
        await asyncio.sleep(0.05)
    assert not server.registry.deployments  # it ended when its workload exited
    assert "hello from target" in done.read_text()
