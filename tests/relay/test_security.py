"""Fail closed at every hop: forged caretaker claims, token scopes, session isolation, detach rules."""

from __future__ import annotations

import asyncio

import pytest
from relay_support import TOKEN, Target

from cornus_core.events import decode_event
from cornus_core.streams import TAG_CONTROL, TAG_EGRESS, EgressRequest
from cornus_core.wire import DialError, VerdictKind, dial_websocket, read_verdict, write_header
from server.app import CARETAKER_ATTACH, DEPLOY_ATTACH

SLEEPER = {"command": ["sleep", "60"], "egress": {"mode": "proxy", "rules": []}}


async def test_forged_client_claim_is_refused_at_the_server(live, target: Target) -> None:
    spec = {**SLEEPER, "egress": {"mode": "proxy", "rules": [{"pattern": "127.0.0.1", "route": "deny"}]}}
    session = await live(spec)
    dep = await session.deployment()
    mux = await dial_websocket(dep.server_url, token=dep.caretaker_token)
    try:
        stream = await mux.open_stream()
        forged = EgressRequest(conn="forged-1", host="127.0.0.1", ip="127.0.0.1", port=target.port, route="client")
        await write_header(stream, TAG_EGRESS, forged.to_fields())
        verdict = await read_verdict(stream)
    finally:
        await mux.aclose()
    assert verdict.kind is VerdictKind.DENY
    assert "server policy" in verdict.reason
    assert target.requests == 0
    run = await session.finish()
    assert any(getattr(e, "conn", "") == "forged-1" and e.hop == "server" and e.route == "deny"
               for e in run.events if e.type == "hop")


async def test_caretaker_token_rejected_on_the_caller_endpoint(live, server) -> None:
    session = await live(SLEEPER)
    dep = await session.deployment()
    with pytest.raises(DialError) as err:
        await dial_websocket(server.url + DEPLOY_ATTACH, token=dep.caretaker_token)
    assert err.value.status == 403


async def test_bad_tokens_are_401(server) -> None:
    for url, token in ((DEPLOY_ATTACH, "wrong"), (CARETAKER_ATTACH, "ct1.x.y.z"), (DEPLOY_ATTACH, None)):
        with pytest.raises(DialError) as err:
            await dial_websocket(server.url + url, token=token)
        assert err.value.status == 401


async def test_caretaker_of_session_a_only_reaches_session_a(live, server, target: Target) -> None:
    # Session A denies the target; session B would send it to the caller. A's caretaker token must
    # land in A's policy, whatever it claims.
    a = await live({**SLEEPER, "egress": {"mode": "proxy", "rules": [{"pattern": "127.0.0.1", "route": "deny"}]}})
    b = await live({**SLEEPER, "name": "b",
                    "egress": {"mode": "proxy", "rules": [{"pattern": "127.0.0.1", "route": "client"}]}})
    dep_a, dep_b = await a.deployment(), await b.deployment()
    assert dep_a.id != dep_b.id and dep_a.caretaker_token != dep_b.caretaker_token
    assert dep_a.id not in str(a.session.spec) and server.registry.sessions.keys().isdisjoint({dep_a.id})
    mux = await dial_websocket(dep_a.server_url, token=dep_a.caretaker_token)
    try:
        stream = await mux.open_stream()
        await write_header(stream, TAG_EGRESS, EgressRequest(
            conn="x", host="127.0.0.1", ip="127.0.0.1", port=target.port, route="client").to_fields())
        assert (await read_verdict(stream)).kind is VerdictKind.DENY
    finally:
        await mux.aclose()
    assert target.requests == 0


async def test_caretaker_config_never_holds_the_session_id_or_token(live, server) -> None:
    session = await live(SLEEPER)
    dep = await session.deployment()
    config_text = str(dep.caretaker_config)
    assert dep.caretaker_token not in config_text
    assert all(sid not in config_text for sid in server.registry.sessions)


async def test_detach_with_a_client_route_is_rejected(deploy) -> None:
    spec = {"command": ["true"], "detach": True,
            "egress": {"mode": "proxy", "rules": [{"pattern": "*.corp.example", "route": "client"}]}}
    run = await deploy(spec)
    assert run.outcome.reason == "refused"
    assert any("client" in message for message in run.outcome.errors)


async def test_invalid_spec_is_refused_with_the_field_named(server) -> None:
    mux = await dial_websocket(server.url + DEPLOY_ATTACH, token=TOKEN)
    try:
        control = await mux.open_stream()
        await write_header(control, TAG_CONTROL)
        control.write(b'{"command": ["true"], "egress": {"mode": "bogus"}}\n')
        events = []
        while line := await control.readline():
            events.append(decode_event(line))
    finally:
        await mux.aclose()
    errors = [e.message for e in events if e.type == "error"]
    assert errors and "egress.mode" in errors[0]
    assert events[-1].type == "done" and events[-1].reason == "refused"


async def test_a_pod_cannot_speak_for_other_hops_or_end_the_session(live) -> None:
    from cornus_core.events import Done, HopDecision

    session = await live(SLEEPER)
    dep = await session.deployment()
    mux = await dial_websocket(dep.server_url, token=dep.caretaker_token)
    try:
        stream = await mux.open_stream()
        await write_header(stream, "T")
        forged = [Done(reason="forged"), HopDecision(conn="f", hop="client", route="client", reason="x", version="v"),
                  HopDecision(conn="f", hop="caretaker", route="deny", reason="own hop", version="v")]
        stream.write(b"".join(e.encode() for e in forged))
        await stream.drain()
        for _ in range(100):
            if any(getattr(e, "conn", "") == "f" for e in session.events):
                break
            await asyncio.sleep(0.05)
    finally:
        await mux.aclose()
    seen = [e for e in session.events if getattr(e, "conn", "") == "f"]
    assert [(e.hop, e.route) for e in seen] == [("caretaker", "deny")]
    assert not session.task.done()
    run = await session.finish()
    assert [e.reason for e in run.events if e.type == "done"] == ["caller asked to tear down"]


async def test_plain_processes_refuse_client_local_mounts(deploy, tmp_path) -> None:
    run = await deploy({"command": ["true"], "mounts": [{"source": str(tmp_path), "target": "/etc/cornus-x"}]})
    assert run.outcome.exit_code is None
    assert any("client-local mounts need local pods" in message for message in run.outcome.errors)
