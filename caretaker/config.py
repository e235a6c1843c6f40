"""The caretaker's role config: one JSON document, written by the server's backend, never secret.

The caretaker's token is not part of it: it arrives separately (`CORNUS_CARETAKER_TOKEN`, or the file
named by `CORNUS_CARETAKER_TOKEN_FILE`, e.g. a mounted secret).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cornus_core.spec import CredentialSource, EgressSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EgressRoleConfig(_Strict):
    mode: Literal["proxy", "transparent"] = "proxy"
    listen_host: str = "127.0.0.1"  # proxy mode; transparent mode listens on 127.0.0.1 and ::1, where capture lands
    listen_port: int = Field(15002, ge=0, le=65535)
    policy: EgressSpec = EgressSpec()  # the deployment's egress policy (mode and ports ignored here)


class DnsRoleConfig(_Strict):
    """The pod's resolver (transparent mode): forwards to `upstream` (IP, IP:PORT, [IPv6]:PORT), or to the
    nameservers of /etc/resolv.conf when empty, and remembers the answers for the egress role."""

    upstream: list[str] = Field(default_factory=list)
    listen_port: int = Field(default=0, ge=0, le=65535)  # 0: any free port (capture redirects port 53 to it)
    timeout: float = Field(default=2.0, gt=0, le=30)  # per upstream, before the next one or SERVFAIL


class MountConfig(_Strict):
    """One client-local mount: the caller serves `name` over 9P; it appears at `target` in the pod."""

    name: str
    target: str
    read_only: bool = False


class CaretakerConfig(_Strict):
    deployment: str = ""  # for logs only
    egress: EgressRoleConfig | None = None
    dns: DnsRoleConfig | None = None  # transparent egress starts it with defaults when absent
    credentials: list[CredentialSource] = Field(default_factory=list)  # names and deliveries, no config
    mounts: list[MountConfig] = Field(default_factory=list)


class ConfigError(Exception):
    pass


def load_config(env: dict[str, str] | None = None, path: str | None = None) -> tuple[CaretakerConfig, str, str]:
    """(config, server URL, token) from a config file or `CORNUS_CARETAKER_CONFIG`, and the environment."""
    env = dict(os.environ) if env is None else env
    try:
        raw: Any = json.loads(Path(path).read_text() if path else env.get("CORNUS_CARETAKER_CONFIG", "{}"))
        config = CaretakerConfig.model_validate(raw)
    except (OSError, ValueError, ValidationError) as exc:
        where = path or "CORNUS_CARETAKER_CONFIG"
        raise ConfigError(f"bad caretaker config in {where}: {exc}") from None
    server_url = env.get("CORNUS_SERVER_URL", "")
    token = env.get("CORNUS_CARETAKER_TOKEN", "")
    if not token and env.get("CORNUS_CARETAKER_TOKEN_FILE"):
        try:
            token = Path(env["CORNUS_CARETAKER_TOKEN_FILE"]).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read CORNUS_CARETAKER_TOKEN_FILE: {exc.strerror}") from None
    if (config.egress is not None or config.credentials or config.mounts) and (not server_url or not token):
        raise ConfigError("the egress, credential and mount roles need CORNUS_SERVER_URL and a caretaker token")
    return config, server_url, token
