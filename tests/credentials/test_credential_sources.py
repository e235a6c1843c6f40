"""Caller-side sources with real files, real environments and real subprocesses."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from credential_support import write_script

from cornus_core.credentials import (
    CredentialError,
    SourceSet,
    UnknownCredentialError,
    make_source,
)

BOUND = 20.0  # generous bound for anything that must not hang


async def test_static_inline_values_and_expiration() -> None:
    source = make_source("db", "static", {"values": {"password": "pw"}, "expiration": "2030-01-01T00:00:00Z"})
    credential = await source.fetch()
    assert credential.values == {"password": "pw"}
    assert credential.expiration == datetime(2030, 1, 1, tzinfo=UTC)


async def test_static_file_is_read_once(tmp_path: Path) -> None:
    path = tmp_path / "static.json"
    path.write_text('{"token": "first"}')
    source = make_source("api", "static", {"path": str(path)})
    path.write_text('{"token": "second"}')
    assert (await source.fetch()).values == {"token": "first"}


async def test_env_is_read_at_each_fetch() -> None:
    environ = {"GH_TOKEN": "one"}
    source = make_source("gh", "env", {"vars": {"token": "GH_TOKEN"}}, environ=environ)
    assert (await source.fetch()).values == {"token": "one"}
    environ["GH_TOKEN"] = "two"
    assert (await source.fetch()).values == {"token": "two"}
    del environ["GH_TOKEN"]
    with pytest.raises(
        CredentialError, match=r"credential 'gh' \(env\): environment variable\(s\) GH_TOKEN not set"
    ):
        await source.fetch()


async def test_env_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORNUS_TEST_SECRET", "from-process")
    source = make_source("p", "env", {"vars": {"v": "CORNUS_TEST_SECRET"}})
    assert (await source.fetch()).values == {"v": "from-process"}


async def test_file_json_and_dotenv_are_re_read(tmp_path: Path) -> None:
    path = tmp_path / "creds"
    path.write_text('{"values": {"k": "v1"}, "expiration": "2031-05-06T07:08:09Z"}')
    source = make_source("f", "file", {"path": str(path)})
    first = await source.fetch()
    assert first.values == {"k": "v1"} and first.expiration == datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    path.write_text("K='v 2'\n")
    assert (await source.fetch()).values == {"K": "v 2"}
    forced = make_source("g", "file", {"path": str(path), "format": "json"})
    with pytest.raises(CredentialError, match=r"credential 'g' \(file\): .*creds: invalid JSON"):
        await forced.fetch()


async def test_file_errors_name_source_and_path(tmp_path: Path) -> None:
    missing = make_source("m", "file", {"path": str(tmp_path / "nope.env")})
    with pytest.raises(CredentialError, match=r"credential 'm' \(file\): .*nope.env: cannot open"):
        await missing.fetch()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(CredentialError, match="not a regular file"):
        await asyncio.wait_for(make_source("q", "file", {"path": str(fifo)}).fetch(), BOUND)
    bad = tmp_path / "bad.env"
    bad.write_text("A=1\nB=two words\n")
    with pytest.raises(CredentialError, match=r"bad.env: line 2"):
        await make_source("b", "file", {"path": str(bad)}).fetch()


async def test_exec_json_output(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "mint",
        'printf \'{"values": {"token": "%s"}, "expiration": "2030-01-01T00:00:00Z"}\' "$1"\n',
    )
    source = make_source("x", "exec", {"command": [script, "abc"]})
    credential = await source.fetch()
    assert credential.values == {"token": "abc"} and credential.expiration is not None


async def test_exec_raw_output_under_the_configured_key(tmp_path: Path) -> None:
    script = write_script(tmp_path, "raw", "echo raw-token\n")
    source = make_source("r", "exec", {"command": [script], "raw": True, "key": "password"})
    assert (await source.fetch()).values == {"password": "raw-token"}
    default_key = make_source("r", "exec", {"command": [script], "raw": True})
    assert (await default_key.fetch()).values == {"value": "raw-token"}


async def test_exec_failure_includes_stderr(tmp_path: Path) -> None:
    script = write_script(tmp_path, "fail", "echo 'token expired, run login' >&2\nexit 3\n")
    source = make_source("x", "exec", {"command": [script]})
    with pytest.raises(CredentialError) as info:
        await source.fetch()
    message = str(info.value)
    assert message.startswith("credential 'x' (exec ")
    assert "exited with status 3" in message and "token expired, run login" in message


async def test_exec_bad_output_includes_stderr(tmp_path: Path) -> None:
    script = write_script(tmp_path, "bad", "echo 'note' >&2\necho 'not json'\n")
    with pytest.raises(CredentialError, match=r"bad output: invalid JSON.*stderr: 'note'"):
        await make_source("x", "exec", {"command": [script]}).fetch()


async def test_exec_timeout_kills_the_command_and_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # The child keeps stdout open; without killing the process group the fetch would wait for it.
    script = write_script(
        tmp_path, "slow", f"echo 'waiting for MFA' >&2\nsleep 60 &\necho $! > {pidfile}\nsleep 60\n"
    )
    source = make_source("x", "exec", {"command": [script], "timeout": 1.0})
    with pytest.raises(CredentialError) as info:
        await asyncio.wait_for(source.fetch(), BOUND)
    assert "timed out after 1s" in str(info.value) and "waiting for MFA" in str(info.value)
    child = int(pidfile.read_text())
    for _ in range(200):
        if not _alive(child):
            break
        await asyncio.sleep(0.05)
    assert not _alive(child), "the command's child outlived the deadline"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_exec_missing_command_is_an_error() -> None:
    source = make_source("x", "exec", {"command": ["/nonexistent/mint"]})
    with pytest.raises(CredentialError, match=r"cannot run '/nonexistent/mint': No such file"):
        await source.fetch()


@pytest.mark.parametrize(
    ("backend", "config", "message"),
    [
        ("vault", {}, "unknown backend"),
        ("static", {"values": {"a": "b"}, "valeus": {}}, "unknown config key\\(s\\) 'valeus'"),
        ("static", {}, "config needs 'values'"),
        ("static", {"values": {"a": 1}}, "'values.a' must be a string"),
        ("env", {"vars": "TOKEN"}, "config 'vars' has the wrong type"),
        ("exec", {"command": "aws sts get-session-token"}, "config 'command' has the wrong type"),
        ("exec", {"command": []}, "non-empty argv list"),
        ("exec", {"command": ["x"], "timeout": 0}, "'timeout' must be in"),
        ("exec", {"command": ["x"], "timeout": True}, "config 'timeout' has the wrong type"),
        ("exec", {"command": ["x"], "key": "k"}, "unknown config key\\(s\\) 'key'"),
        ("file", {"path": "x", "format": "yaml"}, "must be json or dotenv"),
        ("file", {"path": ""}, "config 'path' is empty"),
    ],
)
def test_bad_config_names_the_source(backend: str, config: dict[str, object], message: str) -> None:
    with pytest.raises(CredentialError, match=rf"^credential 'src' \({backend}\): .*{message}"):
        make_source("src", backend, config)


async def test_source_set_single_flight_with_a_real_command(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    script = write_script(
        tmp_path, "mint", f'echo call >> {calls}\nsleep 0.3\necho \'{{"values": {{"t": "v"}}}}\'\n'
    )
    decls = [SimpleNamespace(name="t", backend="exec", config={"command": [script]})]
    sources = SourceSet.from_config(decls)
    results = await asyncio.wait_for(asyncio.gather(*(sources.fetch("t") for _ in range(100))), BOUND)
    assert {r.values["t"] for r in results} == {"v"}
    assert calls.read_text().splitlines() == ["call"]
    await sources.fetch("t")  # a later fetch is a new call: nothing is kept
    assert calls.read_text().splitlines() == ["call", "call"]


async def test_source_set_refuses_undeclared_and_duplicate_names() -> None:
    sources = SourceSet([make_source("a", "static", {"values": {"k": "v"}})])
    assert sources.names == {"a"}
    with pytest.raises(UnknownCredentialError, match="credential 'b' is not declared"):
        await sources.fetch("b")
    with pytest.raises(CredentialError, match="declared twice"):
        SourceSet([make_source("a", "static", {"values": {"k": "v"}})] * 2)


async def test_source_set_wraps_unexpected_failures() -> None:
    class Broken:
        name = "broken"
        backend = "custom"

        async def fetch(self) -> object:
            raise RuntimeError("boom")

    with pytest.raises(CredentialError, match=r"credential 'broken' \(custom\): unexpected failure"):
        await SourceSet([Broken()]).fetch("broken")  # type: ignore[list-item]
