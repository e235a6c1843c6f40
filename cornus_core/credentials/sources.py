"""Credential sources on the caller: where a secret is minted at fetch time.

Backends: ``static`` (values inline, or a file read once), ``env`` (the caller's environment, read
at each fetch), ``exec`` (a command printing the wire shape, or one raw value), ``file`` (a JSON or
dotenv file re-read at each fetch). A SourceSet fetches by name, collapsing concurrent fetches of
one source into one call; nothing is written to disk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from cornus_core.credentials.credential import (
    Credential,
    CredentialError,
    UnknownCredentialError,
    parse_rfc3339,
    string_map,
)
from cornus_core.credentials.parsers import parse_dotenv, parse_exec_output, parse_json_document
from cornus_core.credentials.singleflight import SingleFlight

log = logging.getLogger(__name__)

BACKENDS = ("static", "env", "exec", "file")
DEFAULT_EXEC_TIMEOUT = 30.0
MAX_EXEC_TIMEOUT = 600.0
MAX_DOCUMENT_BYTES = 1 << 20
MAX_STDERR_BYTES = 16 << 10
STDERR_IN_MESSAGE = 1000


class Source(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def backend(self) -> str: ...

    async def fetch(self) -> Credential: ...


class SourceDecl(Protocol):
    """What a declared source needs to provide (the spec model's `credentials.sources[]` entry)."""

    @property
    def name(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def config(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class StaticSource:
    name: str
    credential: Credential = field(repr=False)
    backend: ClassVar[str] = "static"

    async def fetch(self) -> Credential:
        return self.credential


@dataclass(frozen=True)
class EnvSource:
    """Output key -> name of a variable of the caller's environment, read at each fetch."""

    name: str
    variables: Mapping[str, str]
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False, compare=False)
    backend: ClassVar[str] = "env"

    async def fetch(self) -> Credential:
        missing = sorted(var for var in self.variables.values() if var not in self.environ)
        if missing:
            raise _error(self, f"environment variable(s) {', '.join(missing)} not set")
        return Credential({key: self.environ[var] for key, var in self.variables.items()})


@dataclass(frozen=True)
class FileSource:
    """A JSON or dotenv file, re-read at each fetch."""

    name: str
    path: str
    format: str | None = None
    backend: ClassVar[str] = "file"

    async def fetch(self) -> Credential:
        try:
            return read_document(self.path, self.format)
        except CredentialError as exc:  # the message already names the path
            raise _error(self, str(exc)) from None


@dataclass(frozen=True)
class ExecSource:
    """A command (argv, no shell) printing the wire shape, or with raw_key one value."""

    name: str
    command: Sequence[str]
    timeout: float = DEFAULT_EXEC_TIMEOUT
    raw_key: str | None = None
    backend: ClassVar[str] = "exec"

    async def fetch(self) -> Credential:
        code, stdout, stderr = await _run(self.command, self.timeout, self)
        said = _stderr_note(stderr)
        if code is None:
            raise _error(self, f"timed out after {self.timeout:g}s{said}")
        if code != 0:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            raise _error(self, f"{how}{said}")
        try:
            return parse_exec_output(stdout, self.raw_key)
        except CredentialError as exc:
            raise _error(self, f"bad output: {exc}{said}") from None


def make_source(
    name: str, backend: str, config: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> Source:
    """Build a source from its declaration; a bad config raises CredentialError naming the source."""
    try:
        if not name:
            raise CredentialError("empty name")
        if not isinstance(config, Mapping):
            raise CredentialError("config must be a mapping")
        cfg = _Config(config)
        source: Source
        if backend == "static":
            source = _static(name, cfg)
        elif backend == "env":
            source = EnvSource(name, cfg.strings("vars"), os.environ if environ is None else environ)
        elif backend == "file":
            source = FileSource(name, cfg.string("path"), cfg.format())
        elif backend == "exec":
            source = _exec(name, cfg)
        else:
            raise CredentialError(f"unknown backend; expected one of {', '.join(BACKENDS)}")
        cfg.finish()
        return source
    except CredentialError as exc:
        raise CredentialError(f"credential {name!r} ({backend}): {exc}") from None


def _static(name: str, cfg: _Config) -> StaticSource:
    if "path" in cfg.raw:
        return StaticSource(name, read_document(cfg.string("path"), cfg.format()))
    values = cfg.strings("values")
    expiration: str | None = cfg.take("expiration", str, None)
    return StaticSource(name, Credential(values, None if expiration is None else parse_rfc3339(expiration)))


def _exec(name: str, cfg: _Config) -> ExecSource:
    command = cfg.take("command", list)
    if not command or not all(isinstance(arg, str) and arg for arg in command):
        raise CredentialError("'command' must be a non-empty argv list of strings")
    timeout = cfg.take("timeout", (int, float), DEFAULT_EXEC_TIMEOUT)
    if not 0 < timeout <= MAX_EXEC_TIMEOUT:
        raise CredentialError(f"'timeout' must be in (0, {MAX_EXEC_TIMEOUT:g}] seconds")
    raw = cfg.take("raw", bool, False)
    key = cfg.take("key", str, "value") if raw else None
    return ExecSource(name, tuple(command), float(timeout), key)


class SourceSet:
    """The caller's declared sources, fetched by name; concurrent fetches of one source share one call."""

    def __init__(self, sources: Iterable[Source]) -> None:
        self._sources: dict[str, Source] = {}
        for source in sources:
            if source.name in self._sources:
                raise CredentialError(f"credential {source.name!r} is declared twice")
            self._sources[source.name] = source
        self._flight: SingleFlight[str, Credential] = SingleFlight()

    @classmethod
    def from_config(
        cls, decls: Iterable[SourceDecl], *, environ: Mapping[str, str] | None = None
    ) -> SourceSet:
        return cls(make_source(d.name, d.backend, d.config, environ=environ) for d in decls)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._sources)

    async def fetch(self, name: str) -> Credential:
        source = self._sources.get(name)
        if source is None:
            raise UnknownCredentialError(f"credential {name!r} is not declared")
        return await self._flight.run(name, lambda: _fetch(source))


async def _fetch(source: Source) -> Credential:
    try:
        return await source.fetch()
    except CredentialError:
        raise
    except Exception as exc:  # a defect in a source still reaches the caller as a CredentialError
        log.exception("credential %r (%s) failed unexpectedly", source.name, source.backend)
        raise _error(source, f"unexpected failure: {exc!r}") from exc


def read_document(path: str, fmt: str | None = None) -> Credential:
    """Read a JSON (wire shape or flat object) or dotenv file; fmt None sniffs a leading "{"."""
    data = _read_regular_file(os.path.expanduser(path))
    if fmt is None:
        fmt = "json" if data.lstrip().startswith(b"{") else "dotenv"
    try:
        if fmt == "json":
            return parse_json_document(data)
        return Credential(parse_dotenv(data.decode()))
    except UnicodeDecodeError as exc:
        raise CredentialError(f"{path}: not UTF-8 (byte {exc.start})") from None
    except CredentialError as exc:
        raise CredentialError(f"{path}: {exc}") from None


def _read_regular_file(path: str) -> bytes:
    try:
        # O_NONBLOCK: opening a FIFO by mistake must not hang the fetch.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CredentialError(f"{path}: cannot open: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CredentialError(f"{path}: not a regular file")
        data = handle.read(MAX_DOCUMENT_BYTES + 1)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise CredentialError(f"{path}: larger than {MAX_DOCUMENT_BYTES} bytes")
    return data


async def _run(argv: Sequence[str], timeout: float, source: Source) -> tuple[int | None, bytes, bytes]:
    """Run argv to completion or the deadline; the exit code is None when the deadline killed it."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, so a deadline kills its children too
        )
    except OSError as exc:
        raise _error(source, f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = _Capture(MAX_DOCUMENT_BYTES), _Capture(MAX_STDERR_BYTES)
    readers = [asyncio.create_task(stdout.drain(proc.stdout)), asyncio.create_task(stderr.drain(proc.stderr))]
    code: int | None = None
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*readers)
            code = await proc.wait()
    except TimeoutError:
        pass
    finally:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
        for reader in readers:
            reader.cancel()
    if stdout.overflow:
        raise _error(source, f"output is larger than {MAX_DOCUMENT_BYTES} bytes")
    return code, bytes(stdout.data), bytes(stderr.data)


class _Capture:
    """Keep up to limit bytes of a stream, draining the rest so the writer never blocks."""

    def __init__(self, limit: int) -> None:
        self.data = bytearray()
        self.limit = limit
        self.overflow = False

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            room = self.limit - len(self.data)
            self.overflow = self.overflow or len(chunk) > room
            self.data += chunk[: max(room, 0)]


def _stderr_note(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    if not text:
        return ""
    if len(text) > STDERR_IN_MESSAGE:
        text = "…" + text[-STDERR_IN_MESSAGE:]
    return f"; stderr: {text!r}"


def _error(source: Source, cause: str) -> CredentialError:
    detail = f" {source.command[0]}" if isinstance(source, ExecSource) else ""
    return CredentialError(f"credential {source.name!r} ({source.backend}{detail}): {cause}")


class _Config:
    """Typed reads of a source's config mapping; leftover keys are an error (a typo must not pass)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.raw = dict(config)
        self._used: set[str] = set()

    def take(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        self._used.add(key)
        if key not in self.raw:
            if default is ...:
                raise CredentialError(f"config needs {key!r}")
            return default
        value = self.raw[key]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise CredentialError(f"config {key!r} has the wrong type ({type(value).__name__})")
        return value

    def string(self, key: str) -> str:
        value: str = self.take(key, str)
        if not value:
            raise CredentialError(f"config {key!r} is empty")
        return value

    def strings(self, key: str) -> dict[str, str]:
        return string_map(self.take(key, dict), key)

    def format(self) -> str | None:
        fmt: str | None = self.take("format", str, None)
        if fmt not in (None, "json", "dotenv"):
            raise CredentialError(f"config 'format' must be json or dotenv, not {fmt!r}")
        return fmt

    def finish(self) -> None:
        unknown = sorted(set(self.raw) - self._used)
        if unknown:
            raise CredentialError(f"unknown config key(s) {', '.join(map(repr, unknown))}")
