"""The deploy spec as pydantic models; unknown keys are errors everywhere (``extra="forbid"``).

Routes are checked against the policy's own ``Route`` values and rule patterns with the policy's own
pattern parser, so a spec that validates here compiles to the same policy at all three hops.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cornus_core.policy import PolicyError, Route
from cornus_core.policy.patterns import parse_pattern

ROUTES: tuple[str, ...] = tuple(route.value for route in Route)
DEFAULT_ROUTE = "cluster"
DEFAULT_LISTEN_PORT = 15002
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_CREDENTIAL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")

NonEmptyStr = Annotated[str, Field(min_length=1)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_route(value: object) -> str:
    """A route name (case-insensitive), returned in its canonical lower-case spelling."""
    if not isinstance(value, str):
        raise ValueError(f"a route must be a string, got {type(value).__name__}")
    return Route.parse(value).value


def check_pattern(value: object) -> str:
    """A rule pattern that the policy's pattern grammar accepts."""
    if not isinstance(value, str):
        raise ValueError(f"a pattern must be a string, got {type(value).__name__}")
    try:
        parse_pattern(value)
    except PolicyError as exc:
        # Say the pattern once, whether or not the policy's message already names it.
        detail = exc.message.removeprefix(f"pattern {value!r}: ").removeprefix(f"{value!r}: ")
        raise ValueError(f"bad pattern {value!r}: {detail}") from None
    return value


class RuleSpec(_Model):
    """One egress rule: destinations matching ``pattern`` take ``route``; first match wins."""

    pattern: str
    route: str

    @field_validator("pattern", mode="before")
    @classmethod
    def _pattern(cls, value: object) -> str:
        return check_pattern(value)

    @field_validator("route", mode="before")
    @classmethod
    def _route(cls, value: object) -> str:
        return check_route(value)


class EgressSpec(_Model):
    """Where the workload's outbound connections leave from (see ``cornus_core.policy``)."""

    mode: Literal["env", "proxy", "transparent"] = "env"
    default: str = DEFAULT_ROUTE
    rules: list[RuleSpec] = Field(default_factory=list)
    script: str | None = None
    proxies: dict[str, str] = Field(default_factory=dict)
    listen_port: int = Field(default=DEFAULT_LISTEN_PORT, ge=1, le=65535, strict=True)
    gateway: str | None = None

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: object) -> object:
        return "env" if value is None or value == "" else value

    @field_validator("default", mode="before")
    @classmethod
    def _default(cls, value: object) -> str:
        return DEFAULT_ROUTE if value is None or value == "" else check_route(value)

    @field_validator("script")
    @classmethod
    def _script(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None

    @field_validator("proxies", mode="before")
    @classmethod
    def _proxies(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        normalised: dict[object, object] = {}
        for key, item in value.items():
            if not isinstance(key, str) or key.upper() not in PROXY_VARIABLES:
                raise ValueError(f"unknown proxy variable {key!r} (expected {', '.join(PROXY_VARIABLES)})")
            if key.upper() in normalised:
                raise ValueError(f"{key.upper()} is set twice (the two spellings mean the same variable)")
            normalised[key.upper()] = item
        return normalised

    @field_validator("gateway")
    @classmethod
    def _gateway(cls, value: str | None) -> None:
        if value:
            raise ValueError(
                "a separate gateway URL is not supported: the server itself is the gateway "
                "(remove 'gateway' and route destinations to 'gateway' instead)"
            )
        return None


class MountSpec(_Model):
    """A bind mount. A path source (``/x``, ``./x``, ``~/x``) lives on the caller's machine and is
    served to the workload over 9P; a bare name is a volume of the deployment backend."""

    source: NonEmptyStr
    target: NonEmptyStr
    read_only: bool = False

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if "\0" in value:
            raise ValueError("a mount source cannot contain NUL")
        if not is_local_path(value) and not _VOLUME_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is neither a path nor a volume name")
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        if not value.startswith("/") or "\0" in value:
            raise ValueError(f"a mount target must be an absolute path in the workload, got {value!r}")
        if value.rstrip("/") == "":
            raise ValueError("a mount target cannot be the root directory")
        return value

    @property
    def is_local(self) -> bool:
        """True when the source is a path on the caller's machine (a client-local mount)."""
        return is_local_path(self.source)


def is_local_path(source: str) -> bool:
    """A mount source that names a path on the caller's machine rather than a backend volume."""
    return "/" in source or source.startswith((".", "~"))


class Delivery(_Model):
    """How a credential reaches the workload.

    ``endpoint``: loopback HTTP (``provider`` generic or aws-imds); ``file``: written at ``path`` in
    ``format`` json, env, raw or aws-credentials; ``env``: environment variables named ``prefix`` +
    the value's key.
    """

    kind: Literal["endpoint", "file", "env"]
    provider: Literal["generic", "aws-imds"] | None = None
    format: Literal["json", "env", "raw", "aws-credentials"] | None = None
    path: str | None = None
    prefix: str | None = None

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> Delivery:
        allowed = {"endpoint": {"provider"}, "file": {"format", "path"}, "env": {"prefix"}}[self.kind]
        for name in ("provider", "format", "path", "prefix"):
            if getattr(self, name) is not None and name not in allowed:
                raise ValueError(f"{name!r} does not apply to a delivery of kind {self.kind!r}")
        if self.kind == "file" and not (self.path and self.path.startswith("/")):
            raise ValueError("a file delivery needs 'path', an absolute path in the workload")
        if self.prefix is not None and not _ENV_NAME.fullmatch(self.prefix):
            raise ValueError(f"env prefix {self.prefix!r} is not a valid variable name start")
        return self

    @property
    def effective_provider(self) -> str:
        return self.provider or "generic"

    @property
    def effective_format(self) -> str:
        return self.format or "json"


JsonValue = Any  # config is free-form and non-secret; it travels as JSON


class CredentialSource(_Model):
    """A credential minted on the caller's machine at fetch time (never stored in the spec)."""

    name: str
    backend: Literal["static", "env", "exec", "file"]
    config: dict[str, JsonValue] = Field(default_factory=dict)
    ttl: int = Field(default=300, ge=1, strict=True)
    deliver: list[Delivery] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _CREDENTIAL_NAME.fullmatch(value):
            raise ValueError(
                f"credential name {value!r} must start with a letter and hold only letters, digits, '-' and '_'"
            )
        return value


class CredentialsSpec(_Model):
    sources: list[CredentialSource] = Field(default_factory=list)

    @field_validator("sources")
    @classmethod
    def _unique(cls, value: list[CredentialSource]) -> list[CredentialSource]:
        seen: set[str] = set()
        for source in value:
            # Names become CORNUS_CREDENTIAL_<NAME>_URL, so compare them as the variable would spell them.
            key = source.name.upper().replace("-", "_")
            if key in seen:
                raise ValueError(f"credential name {source.name!r} is used twice")
            seen.add(key)
        return value


class DeploySpec(_Model):
    """One workload: what runs, what it sees, where its traffic leaves from."""

    name: str | None = None
    image: NonEmptyStr | None = None
    command: list[NonEmptyStr] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    mounts: list[MountSpec] = Field(default_factory=list)
    egress: EgressSpec | None = None
    credentials: CredentialsSpec = Field(default_factory=CredentialsSpec)
    detach: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.fullmatch(value):
            raise ValueError(
                f"name {value!r} must be 1-63 letters, digits, '.', '-' or '_', starting with a letter or digit"
            )
        return value

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: object) -> object:
        # A string is a shell command line, as in Compose.
        if isinstance(value, str):
            return ["sh", "-c", value] if value.strip() else []
        return value

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("command is empty")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: object) -> object:
        # YAML reads `PORT: 8080` and `DEBUG: true` as numbers and booleans; the environment holds strings.
        if not isinstance(value, dict):
            return value
        env: dict[object, object] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, int | float):
                item = str(item)
            env[key] = item
        return env

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"workdir must be an absolute path in the workload, got {value!r}")
        return value

    @field_validator("mounts")
    @classmethod
    def _unique_targets(cls, value: list[MountSpec]) -> list[MountSpec]:
        seen: set[str] = set()
        for mount in value:
            target = mount.target.rstrip("/")
            if target in seen:
                raise ValueError(f"two mounts share the target {mount.target!r}")
            seen.add(target)
        return value

    @property
    def local_mounts(self) -> list[MountSpec]:
        return [mount for mount in self.mounts if mount.is_local]
