"""Credentials minted on the caller, relayed through the server, delivered by the caretaker."""

from __future__ import annotations

import json
from pathlib import Path

SECRET = "s3cr3t-value-8472"


def _mint_script(tmp_path: Path) -> Path:
    """An exec source that counts its calls and prints a fresh credential."""
    script = tmp_path / "mint.sh"
    calls = tmp_path / "calls"
    script.write_text(f'#!/bin/sh\necho x >> {calls}\n'
                      f'echo \'{{"values": {{"token": "{SECRET}"}}, "expiration": "2099-01-01T00:00:00Z"}}\'\n')
    script.chmod(0o755)
    return script


def _spec(tmp_path: Path, command: str, deliver: list[dict[str, str]]) -> dict[str, object]:
    return {"command": command, "credentials": {"sources": [
        {"name": "api", "backend": "exec", "config": {"command": [str(_mint_script(tmp_path))]},
         "ttl": 600, "deliver": deliver}]}}


async def test_endpoint_file_and_env_deliveries(deploy, tmp_path: Path) -> None:
    out = tmp_path / "cred.json"
    command = ('curl -sS "$CORNUS_CREDENTIAL_API_URL"; echo; curl -sS "$CORNUS_CREDENTIALS_URL"api; echo; '
               f'cat {out}; echo; echo "env=$API_token"; stat -c %a {out}')
    deliver = [{"kind": "endpoint"}, {"kind": "file", "path": str(out), "format": "json"},
               {"kind": "env", "prefix": "API_"}]
    run = await deploy(_spec(tmp_path, command, deliver))
    assert run.outcome.exit_code == 0, run.events
    lines = run.app_lines
    answers = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(answers) == 3 and all(a["values"]["token"] == SECRET for a in answers)
    assert f"env={SECRET}" in lines and "600" in lines
    # Minted once (then cached): the caretaker's cache served the other three deliveries.
    assert (tmp_path / "calls").read_text().count("x") == 1
    requests = [e for e in run.events if e.type == "credential"]
    assert {r.delivery for r in requests} == {"endpoint", "file", "env"}
    assert {r.cache for r in requests} >= {"fetched", "hit"}
    # The secret is in no event but the workload's own output, and the config never reached the server.
    for event in run.events:
        if event.type != "log":
            assert SECRET not in json.dumps(event.to_dict())


async def test_undeclared_name_is_refused_at_the_server(live, tmp_path: Path) -> None:
    from cornus_core.streams import TAG_CREDENTIAL
    from cornus_core.wire import dial_websocket, write_header

    session = await live(_spec(tmp_path, "sleep 60", [{"kind": "endpoint"}]))
    dep = await session.deployment()
    assert "config" not in json.dumps(dep.caretaker_config)
    assert all(not s.config for s in dep.spec.credentials.sources)  # the server never saw the config
    mux = await dial_websocket(dep.server_url, token=dep.caretaker_token)
    try:
        stream = await mux.open_stream()
        await write_header(stream, TAG_CREDENTIAL, {"name": "other"})
        answer = json.loads(await stream.readline())
    finally:
        await mux.aclose()
    assert "not declared" in answer["error"]


async def test_source_failure_reaches_the_workload_as_an_error(deploy, tmp_path: Path) -> None:
    spec = {"command": 'curl -sS -w "\\nstatus=%{http_code}\\n" "$CORNUS_CREDENTIAL_BROKEN_URL"',
            "credentials": {"sources": [{"name": "broken", "backend": "env", "config": {"vars": {"v": "NO_SUCH_VAR_X"}},
                                         "deliver": [{"kind": "endpoint"}]}]}}
    run = await deploy(spec)
    assert run.outcome.exit_code == 0, run.events
    assert "status=502" in run.app_lines
    assert any("NO_SUCH_VAR_X" in line for line in run.app_lines)


async def test_an_unmodified_aws_sdk_gets_caller_minted_keys(deploy, tmp_path: Path) -> None:
    import sys

    mint = tmp_path / "aws.sh"
    mint.write_text('#!/bin/sh\necho \'{"values": {"AccessKeyId": "AKIDCALLER", "SecretAccessKey": "'
                    + SECRET + '", "Token": "tok"}, "expiration": "2099-01-01T00:00:00Z"}\'\n')
    mint.chmod(0o755)
    probe = ("import botocore.session; c = botocore.session.get_session().get_credentials()"
             ".get_frozen_credentials(); print('key', c.access_key, c.secret_key == '" + SECRET + "')")
    spec = {"command": [sys.executable, "-c", probe],
            "credentials": {"sources": [{"name": "aws", "backend": "exec", "config": {"command": [str(mint)]},
                                         "deliver": [{"kind": "endpoint", "provider": "aws-imds"}]}]}}
    run = await deploy(spec)
    assert run.outcome.exit_code == 0, run.events
    assert "key AKIDCALLER True" in run.app_lines
