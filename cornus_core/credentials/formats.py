"""Delivery formats, the atomic file writer, and the refresher that keeps a credential file current.

Formats: ``json`` (the wire shape), ``env`` (sorted ``K=V`` lines, shell-quoted), ``raw`` (the one
value), ``aws-credentials`` (an ini ``[default]`` profile from the conventional AWS value names).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cornus_core.credentials.cache import EXPIRY_MARGIN, Clock, fresh_until
from cornus_core.credentials.credential import Credential, CredentialError

log = logging.getLogger(__name__)

FORMATS = ("json", "env", "raw", "aws-credentials")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class AwsKeys:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(repr=False)
    """None for long-lived keys, which have no session token."""


def aws_keys(credential: Credential) -> AwsKeys:
    """AccessKeyId, SecretAccessKey and Token (or SessionToken) from a credential's values."""
    values = credential.values
    missing = [key for key in ("AccessKeyId", "SecretAccessKey") if key not in values]
    if missing:
        raise CredentialError(
            f"AWS delivery needs {' and '.join(missing)}; the credential has {', '.join(sorted(values))}"
        )
    token = values.get("Token") or values.get("SessionToken") or None
    return AwsKeys(values["AccessKeyId"], values["SecretAccessKey"], token)


def render(credential: Credential, fmt: str) -> bytes:
    if fmt == "json":
        return credential.to_json() + b"\n"
    if fmt == "env":
        return render_env(credential)
    if fmt == "raw":
        return render_raw(credential)
    if fmt == "aws-credentials":
        return render_aws_credentials(credential)
    raise CredentialError(f"unknown delivery format {fmt!r}; expected one of {', '.join(FORMATS)}")


def render_env(credential: Credential) -> bytes:
    lines = []
    for key, value in sorted(credential.values.items()):
        if not _ENV_KEY.fullmatch(key):
            raise CredentialError(f"env format: {key!r} is not a valid variable name")
        if "\0" in value:
            raise CredentialError(f"env format: the value of {key} contains a NUL byte")
        lines.append(f"{key}={shlex.quote(value)}\n")
    return "".join(lines).encode()


def render_raw(credential: Credential) -> bytes:
    if len(credential.values) != 1:
        keys = ", ".join(sorted(credential.values))
        raise CredentialError(f"raw format needs exactly one value; the credential has {keys}")
    (value,) = credential.values.values()
    return value.encode()


def render_aws_credentials(credential: Credential) -> bytes:
    keys = aws_keys(credential)
    fields = {
        "aws_access_key_id": keys.access_key_id,
        "aws_secret_access_key": keys.secret_access_key,
        "aws_session_token": keys.session_token,
    }
    lines = ["[default]"]
    for key, value in fields.items():
        if value is None:
            continue
        if any(char in value for char in "\r\n\0"):
            raise CredentialError(f"aws-credentials format: {key} contains a line break or NUL byte")
        lines.append(f"{key} = {value}")
    return ("\n".join(lines) + "\n").encode()


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace path with data: a temp file in the same directory, chmod, fsync, rename, fsync the directory.

    A reader sees the old content or the new one, never a torn or world-readable file.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as exc:
        raise CredentialError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise CredentialError(f"{path}: cannot write: {exc.strerror}") from None


class FileRefresher:
    """Keep a credential file current: rewrite it at min(ttl, expiry - margin), retry with backoff on failure.

    get is usually ``lambda: cache.get(name, "file")``. On failure the old file stays: it may still be valid.
    """

    def __init__(
        self,
        path: str,
        fmt: str,
        get: Callable[[], Awaitable[Credential]],
        ttl: float,
        *,
        mode: int = 0o600,
        clock: Clock = time.time,
        margin: float = EXPIRY_MARGIN,
        min_interval: float = 1.0,
        max_backoff: float = 60.0,
    ) -> None:
        if fmt not in FORMATS:
            raise CredentialError(
                f"file delivery {path}: unknown format {fmt!r}; expected one of {', '.join(FORMATS)}"
            )
        self.path = path
        self.fmt = fmt
        self._get = get
        self._ttl = ttl
        self._mode = mode
        self._clock = clock
        self._margin = margin
        self._min_interval = min_interval
        self._max_backoff = max_backoff

    async def refresh(self) -> float:
        """Write the file once; return the clock time at which it must be rewritten."""
        fetched_at = self._clock()
        credential = await self._get()
        data = render(credential, self.fmt)
        await asyncio.to_thread(write_atomic, self.path, data, self._mode)
        return fresh_until(credential, fetched_at, self._ttl, self._margin)

    async def run(self) -> None:
        """Refresh until cancelled."""
        backoff = self._min_interval
        while True:
            try:
                due = await self.refresh()
            except (CredentialError, OSError) as exc:  # the old file stays: it may still be valid
                log.warning("credential file %s not refreshed: %s", self.path, _describe(exc))
                delay, backoff = backoff, min(backoff * 2, self._max_backoff)
            else:
                # The floor keeps a credential that is already inside its margin from spinning the loop.
                delay, backoff = max(due - self._clock(), self._min_interval), self._min_interval
            await asyncio.sleep(delay)


def _describe(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot write it: {exc.strerror}"
    return str(exc)
