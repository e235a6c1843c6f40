"""Read a deploy spec out of a Compose file.

A file is Compose when it has a top-level ``services:`` key. Cornus reads only its own extension
keys (``x-cornus-egress`` at the project level and per service; the ``x-`` prefix keeps the file
valid for standard Compose tools) plus the chosen service's ``image``, ``command``, ``environment``,
``working_dir`` and ``volumes``. A service's ``x-cornus-egress`` replaces the project's block
entirely: no field is merged, so what a service declares is all it gets.

The service is ``--service NAME``, or the only service when there is exactly one.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import SpecError, flag_source
from .models import EgressSpec
from .validation import under, validate
from .yamldoc import Path, YamlDocument

EGRESS_KEY = "x-cornus-egress"
CORNUS_KEYS = frozenset({EGRESS_KEY})
_CORNUS_PREFIX = "x-cornus-"

# Short-syntax volume options that Compose accepts; only "ro"/"rw" mean anything to a 9P export.
_VOLUME_OPTIONS = frozenset({"ro", "rw", "z", "Z", "cached", "delegated", "consistent", "nocopy"})


@dataclass(frozen=True)
class ComposeSelection:
    """DeploySpec input built from one service, and where each of its fields came from in the file."""

    data: dict[str, object]
    origins: dict[str, Path]
    service: str | None


def is_compose(data: object) -> bool:
    return isinstance(data, dict) and "services" in data


def select(
    doc: YamlDocument, service: str | None, environ: Mapping[str, str] | None = None
) -> ComposeSelection:
    top = doc.data
    assert isinstance(top, dict)
    environ = os.environ if environ is None else environ
    services = top["services"]
    if services is None:
        services = {}
    if not isinstance(services, dict):
        raise SpecError(doc.where(("services",)), "'services' must be a mapping of service names")
    _check_cornus_keys(doc, top, ())
    for name, body in services.items():
        if not isinstance(body, dict):
            raise SpecError(doc.where(("services", name)), f"service {name!r} must be a mapping")
        _check_cornus_keys(doc, body, ("services", name))
    _validate_egress_blocks(doc, top, services)

    by_name = {str(name): name for name in services}
    chosen = _choose(doc, list(by_name), service)
    data: dict[str, object] = {}
    origins: dict[str, Path] = {}
    if EGRESS_KEY in top:
        data["egress"] = top[EGRESS_KEY] or {}
        origins["egress"] = (EGRESS_KEY,)
    if chosen is None:
        return ComposeSelection(data, origins, None)

    body = services[by_name[chosen]]
    at: Path = ("services", chosen)
    data["name"] = str(chosen)
    origins["name"] = at
    if EGRESS_KEY in body:
        data["egress"] = body[EGRESS_KEY] or {}
        origins["egress"] = (*at, EGRESS_KEY)
    for compose_key, spec_key in (("image", "image"), ("working_dir", "workdir")):
        if compose_key in body:
            data[spec_key] = body[compose_key]
            origins[spec_key] = (*at, compose_key)
    if "command" in body:
        data["command"] = _command(doc, body["command"], (*at, "command"))
        origins["command"] = (*at, "command")
    if "environment" in body:
        data["env"] = _environment(doc, body["environment"], (*at, "environment"), environ)
        origins["env"] = (*at, "environment")
    if "volumes" in body:
        data["mounts"] = _volumes(doc, body["volumes"], (*at, "volumes"))
        origins["mounts"] = (*at, "volumes")
    return ComposeSelection(data, origins, str(chosen))


def _check_cornus_keys(doc: YamlDocument, block: dict[object, object], at: Path) -> None:
    for key in block:
        if isinstance(key, str) and key.startswith(_CORNUS_PREFIX) and key not in CORNUS_KEYS:
            raise SpecError(
                doc.where((*at, key), key=True),
                f"unknown Cornus extension {key!r} (known: {', '.join(sorted(CORNUS_KEYS))})",
            )


def _validate_egress_blocks(
    doc: YamlDocument, top: dict[object, object], services: dict[object, object]
) -> None:
    """Every x-cornus-egress block in the file must be valid, even one that the chosen service replaces."""
    blocks: list[tuple[Path, object]] = []
    if EGRESS_KEY in top:
        blocks.append(((EGRESS_KEY,), top[EGRESS_KEY]))
    for name, body in services.items():
        assert isinstance(body, dict)
        if EGRESS_KEY in body:
            blocks.append((("services", str(name), EGRESS_KEY), body[EGRESS_KEY]))
    for at, block in blocks:
        validate(EgressSpec, block or {}, doc, under(at))


def _choose(doc: YamlDocument, names: list[str], service: str | None) -> str | None:
    if service is not None:
        if service not in names:
            listed = ", ".join(names) or "none"
            raise SpecError(
                flag_source("--service", service), f"{doc.name} has no such service (services: {listed})"
            )
        return service
    if len(names) == 1:
        return names[0]
    if not names:
        return None
    raise SpecError(
        doc.where(("services",), key=True),
        f"{len(names)} services ({', '.join(names)}): choose one with --service",
    )


def _command(doc: YamlDocument, value: object, at: Path) -> object:
    # Compose splits a command string into words (no shell); the deploy spec would run it with sh -c.
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise SpecError(doc.where(at), f"command: {exc}") from None
    return value


def _environment(doc: YamlDocument, value: object, at: Path, environ: Mapping[str, str]) -> object:
    """Compose's two forms (mapping, or list of KEY=VALUE); a key without a value comes from the caller."""
    pairs: list[tuple[object, object]] = []
    if isinstance(value, list):
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise SpecError(doc.where((*at, index)), "environment entries must be KEY=VALUE strings")
            name, sep, text = item.partition("=")
            pairs.append((name, text if sep else None))
    elif isinstance(value, dict):
        pairs = list(value.items())
    else:
        return value
    env: dict[object, object] = {}
    for key, val in pairs:
        if val is None:
            if isinstance(key, str) and key in environ:
                env[key] = environ[key]
        else:
            env[key] = val
    return env


def _volumes(doc: YamlDocument, value: object, at: Path) -> object:
    if not isinstance(value, list):
        return value
    mounts: list[object] = []
    for index, item in enumerate(value):
        where: Path = (*at, index)
        if isinstance(item, str):
            mount = _short_volume(doc, item, where)
            if mount is not None:
                mounts.append(mount)
        elif isinstance(item, dict):
            kind = item.get("type", "volume")
            if kind not in ("bind", "volume"):
                raise SpecError(
                    doc.where((*where, "type")), f"volume type {kind!r} is not supported (bind or volume)"
                )
            mounts.append({key: item[key] for key in ("source", "target", "read_only") if key in item})
        else:
            raise SpecError(doc.where(where), "a volume is a 'SOURCE:TARGET[:ro]' string or a mapping")
    return mounts


def _short_volume(doc: YamlDocument, text: str, where: Path) -> dict[str, object] | None:
    parts = text.split(":")
    if len(parts) == 1:
        return None  # an anonymous volume: nothing for the caller to serve
    if len(parts) > 3:
        raise SpecError(doc.where(where), f"volume {text!r}: expected SOURCE:TARGET[:OPTIONS]")
    options = set(parts[2].split(",")) if len(parts) == 3 else set()
    unknown = options - _VOLUME_OPTIONS
    if unknown:
        raise SpecError(doc.where(where), f"volume {text!r}: unknown option(s) {', '.join(sorted(unknown))}")
    return {"source": parts[0], "target": parts[1], "read_only": "ro" in options}
