"""Delivery formats read back by real consumers, the atomic writer, and the file refresher."""

from __future__ import annotations

import asyncio
import configparser
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from credential_support import SettableClock

from cornus_core.credentials import (
    Credential,
    CredentialError,
    FileRefresher,
    aws_keys,
    render,
    write_atomic,
)

AWS = Credential({"AccessKeyId": "AKIAEXAMPLE", "SecretAccessKey": "wJalr/secret", "SessionToken": "tok=="})


def test_json_format_is_the_wire_shape() -> None:
    credential = Credential({"a": "1"}, SettableClock().at(0))
    assert json.loads(render(credential, "json")) == json.loads(credential.to_json())


def test_env_format_is_sorted_and_sourced_verbatim_by_the_shell(tmp_path: Path) -> None:
    values = {"Z_LAST": "plain", "A_FIRST": 'it\'s $HOME `id` "q"\nline2', "EMPTY": "", "B": "*"}
    data = render(Credential(values), "env")
    assert [line.split("=")[0] for line in data.decode().splitlines() if "=" in line][:3] == [
        "A_FIRST",
        "B",
        "EMPTY",
    ]
    path = tmp_path / "creds.env"
    path.write_bytes(data)
    for key, expected in values.items():
        out = subprocess.run(
            ["sh", "-c", f'. "$1" && printf %s "${key}"', "sh", str(path)],
            capture_output=True,
            check=True,
            cwd=tmp_path,
        )
        assert out.stdout.decode() == expected


def test_env_format_refuses_keys_the_shell_cannot_hold() -> None:
    with pytest.raises(CredentialError, match="'access-key' is not a valid variable name"):
        render(Credential({"access-key": "x"}), "env")


def test_raw_format_needs_exactly_one_value() -> None:
    assert render(Credential({"token": "abc"}), "raw") == b"abc"
    with pytest.raises(CredentialError, match="exactly one value; the credential has a, b"):
        render(Credential({"a": "1", "b": "2"}), "raw")


def test_aws_credentials_format_reads_back_as_ini() -> None:
    parser = configparser.ConfigParser()
    parser.read_string(render(AWS, "aws-credentials").decode())
    assert dict(parser["default"]) == {
        "aws_access_key_id": "AKIAEXAMPLE",
        "aws_secret_access_key": "wJalr/secret",
        "aws_session_token": "tok==",
    }
    long_lived = Credential({"AccessKeyId": "AKIA", "SecretAccessKey": "s"})
    assert "aws_session_token" not in render(long_lived, "aws-credentials").decode()
    with pytest.raises(CredentialError, match="needs SecretAccessKey; the credential has AccessKeyId"):
        render(Credential({"AccessKeyId": "AKIA"}), "aws-credentials")
    with pytest.raises(CredentialError, match="aws_secret_access_key contains a line break"):
        render(Credential({"AccessKeyId": "AKIA", "SecretAccessKey": "s\n[evil]"}), "aws-credentials")
    assert "wJalr" not in repr(aws_keys(AWS))


def test_aws_credentials_file_is_read_by_botocore(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    write_atomic(str(path), render(AWS, "aws-credentials"))
    probe = "import botocore.session; c = botocore.session.get_session().get_credentials(); print(c.method, c.access_key, c.token)"
    env = _clean_aws_env(AWS_SHARED_CREDENTIALS_FILE=str(path), AWS_CONFIG_FILE=str(tmp_path / "none"))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.split() == ["shared-credentials-file", "AKIAEXAMPLE", "tok=="], out.stderr


def _clean_aws_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", **extra)
    return env


def test_unknown_format() -> None:
    with pytest.raises(CredentialError, match="unknown delivery format 'yaml'"):
        render(AWS, "yaml")


def test_atomic_write_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    old = os.umask(0)
    try:
        write_atomic(str(path), b"one")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    write_atomic(str(path), b"two")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"]
    write_atomic(str(path), b"three", mode=0o640)  # e.g. shared with the app's group
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_atomic_write_replaces_readers_never_see_a_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "creds"
    contents = [b"a" * 200_000, b"b" * 300_000]
    write_atomic(str(path), contents[0])
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(path.read_bytes())

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(60):
            write_atomic(str(path), contents[i % 2])
    finally:
        stop.set()
        thread.join(timeout=20)
    assert seen <= set(contents) and seen


def test_atomic_write_failure_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "is-a-directory"
    (target / "child").mkdir(parents=True)
    with pytest.raises(CredentialError, match="is-a-directory: cannot write"):
        write_atomic(str(target), b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["is-a-directory"]
    with pytest.raises(CredentialError, match="cannot write"):
        write_atomic(str(tmp_path / "missing-dir" / "f"), b"x")


async def test_refresher_rewrites_before_expiry_not_only_every_ttl(tmp_path: Path) -> None:
    path = tmp_path / "token"
    calls = 0

    async def get() -> Credential:
        nonlocal calls
        calls += 1
        # Expires 30.2 s from now: with the 30 s margin the file is due again in 0.2 s, long before the ttl.
        return Credential({"token": f"v{calls}"}, datetime.now(UTC) + timedelta(seconds=30.2))

    refresher = FileRefresher(str(path), "raw", get, ttl=3600, min_interval=0.05)
    task = asyncio.create_task(refresher.run())
    try:
        await _until(lambda: path.exists() and path.read_bytes() not in (b"", b"v1"))
    finally:
        task.cancel()
    assert path.read_bytes().startswith(b"v") and calls >= 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_refresher_keeps_the_old_file_and_retries_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "creds.json"
    attempts = 0

    async def get() -> Credential:
        nonlocal attempts
        attempts += 1
        if attempts in (2, 3):
            raise CredentialError("caller offline")
        return Credential({"n": str(attempts)})

    clock = SettableClock()
    refresher = FileRefresher(str(path), "json", get, ttl=300, clock=clock)
    due = await refresher.refresh()
    assert due == clock.now + 300 and json.loads(path.read_bytes())["values"] == {"n": "1"}
    with pytest.raises(CredentialError):
        await refresher.refresh()
    assert json.loads(path.read_bytes())["values"] == {"n": "1"}
    retrying = FileRefresher(str(path), "json", get, ttl=300, min_interval=0.01)
    task = asyncio.create_task(retrying.run())
    try:
        await _until(lambda: json.loads(path.read_bytes())["values"] == {"n": "4"})
    finally:
        task.cancel()


async def test_refresher_survives_a_directory_that_disappears(tmp_path: Path) -> None:
    # The write fails (ENOENT) while the directory is gone; the refresher keeps retrying and writes the
    # file again once the directory is back.
    folder = tmp_path / "creds"
    folder.mkdir()
    path = folder / "token"
    calls = 0

    async def get() -> Credential:
        nonlocal calls
        calls += 1
        return Credential({"token": f"v{calls}"})

    refresher = FileRefresher(str(path), "raw", get, ttl=0.05, min_interval=0.02, max_backoff=0.05)
    task = asyncio.create_task(refresher.run())
    try:
        await _until(path.exists)
        path.unlink()
        folder.rmdir()
        failed_from = calls
        await _until(lambda: calls >= failed_from + 3)  # several failed rounds, each a fresh fetch
        assert not task.done()
        folder.mkdir()
        await _until(path.exists)
    finally:
        task.cancel()
    assert path.read_bytes().startswith(b"v")


def test_refresher_refuses_unknown_formats(tmp_path: Path) -> None:
    async def get() -> Credential:
        return AWS

    with pytest.raises(CredentialError, match="unknown format 'ini'"):
        FileRefresher(str(tmp_path / "f"), "ini", get, ttl=1)


async def _until(condition: Callable[[], bool], bound: float = 20.0) -> None:
    """Wait for condition() to hold, polling; fail after a generous bound."""
    async with asyncio.timeout(bound):
        while not condition():
            await asyncio.sleep(0.02)
