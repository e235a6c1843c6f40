"""The three-hop egress relay end to end: curl in the workload -> caretaker -> server -> caller -> target."""

from __future__ import annotations

from relay_support import Deploy, Target, curl


def _spec(command: str, rules: list[dict[str, str]], default: str = "cluster") -> dict[str, object]:
    return {"command": command, "egress": {"mode": "proxy", "default": default, "rules": rules}}


async def test_client_route_reaches_target_through_all_hops(deploy: Deploy, target: Target) -> None:
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "client"}
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/x"), [rule]))
    assert run.outcome.exit_code == 0, run.events
    assert "hello from target" in run.app_lines
    assert "status=200" in run.app_lines
    hops = run.hops()
    assert {h: hops[h].route for h in ("caretaker", "server", "client")} == {
        "caretaker": "client", "server": "client", "client": "client"}
    assert len({hops[h].conn for h in hops}) == 1
    assert run.ends["client"].outcome == "ok"
    assert run.ends["client"].bytes_down > 0
    assert target.requests == 1


async def test_socks5_client_route(deploy: Deploy, target: Target) -> None:
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "client"}
    command = f'curl -sS --noproxy "" --socks5-hostname "${{ALL_PROXY#socks5h://}}" http://127.0.0.1:{target.port}/'
    run = await deploy(_spec(command, [rule]))
    assert run.outcome.exit_code == 0, run.events
    assert "hello from target" in run.app_lines


async def test_deny_gives_403_and_never_leaves_the_pod(deploy: Deploy, target: Target) -> None:
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "deny"}
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"), [rule]))
    assert "status=403" in run.app_lines
    assert target.requests == 0
    assert set(run.hops()) == {"caretaker"}


async def test_cluster_route_dials_from_the_pod(deploy: Deploy, target: Target) -> None:
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"), []))
    assert "hello from target" in run.app_lines
    hops = run.hops()
    assert set(hops) == {"caretaker"} and hops["caretaker"].route == "cluster"


async def test_caller_refuses_its_loopback_unless_a_rule_names_it(deploy: Deploy, target: Target) -> None:
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"), [], default="client"))
    assert "status=403" in run.app_lines
    assert target.requests == 0
    assert run.hops()["client"].route == "client"
    assert "loopback" in run.ends["client"].reason


async def test_gateway_without_opt_in_is_refused(deploy: Deploy, target: Target) -> None:
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "gateway"}
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"), [rule]))
    assert "status=403" in run.app_lines
    assert "CORNUS_EGRESS_GATEWAY" in run.ends["server"].reason
    assert target.requests == 0


async def test_refused_dial_gives_502(deploy: Deploy, target: Target) -> None:
    await target.close()
    rule = {"pattern": f"127.0.0.1:{target.port}", "route": "client"}
    run = await deploy(_spec(curl(f"http://127.0.0.1:{target.port}/"), [rule]))
    assert "status=502" in run.app_lines
    assert run.ends["client"].outcome == "refused"


async def test_workload_exit_code_ends_the_session(deploy: Deploy) -> None:
    run = await deploy({"command": ["sh", "-c", "echo bye; exit 7"]})
    assert run.outcome.exit_code == 7
    assert "bye" in run.app_lines
    assert run.outcome.reason == "workload exited"


async def test_caller_refuses_a_name_that_resolves_to_its_loopback(deploy: Deploy, target: Target) -> None:
    # "localhost" is no IP literal: the caller resolves it itself and still refuses its own loopback.
    command = curl(f"http://localhost:{target.port}/")
    run = await deploy(_spec(command, [], default="client"))
    assert "status=403" in run.app_lines
    assert target.requests == 0
    assert "loopback" in run.ends["client"].reason
