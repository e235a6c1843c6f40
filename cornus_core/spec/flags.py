"""Command-line flags folded on top of a loaded spec.

Precedence, from strongest:

* ``--egress-route PATTERN=ROUTE`` rules come *before* the file's rules, in flag order; since the
  first matching rule wins, a flag always beats the file for the destinations it names.
* ``--egress-pac FILE`` replaces the file's ``script`` (and, like any script, supersedes all rules).
* ``--egress MODE`` and ``--egress-default ROUTE`` replace the file's ``mode`` and ``default``.
* ``--local-mount SRC:DST[:ro]`` adds client-local mounts after the file's ``mounts``.

Any egress flag enables egress when the file has no egress block. Every error names the flag and
its value.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .errors import SpecError, flag_source
from .load import LoadedSpec, ScriptOrigin, resolve_source
from .models import EgressSpec, MountSpec, RuleSpec, check_pattern, check_route

MODES = ("env", "proxy", "transparent")


@dataclass(frozen=True)
class EgressFlags:
    """The egress flags as given (raw strings; parsed and checked when folded)."""

    mode: str | None = None
    routes: tuple[str, ...] = ()
    default: str | None = None
    pac: str | None = None

    def any(self) -> bool:
        return self.mode is not None or bool(self.routes) or self.default is not None or self.pac is not None


def parse_mode_flag(text: str) -> str:
    """``--egress MODE``: env, proxy or transparent (any case)."""
    if text.lower() not in MODES:
        raise SpecError(flag_source("--egress", text), f"unknown egress mode (expected {', '.join(MODES)})")
    return text.lower()


def parse_default_flag(text: str) -> str:
    """``--egress-default ROUTE``."""
    try:
        return check_route(text)
    except ValueError as exc:
        raise SpecError(flag_source("--egress-default", text), str(exc)) from None


def parse_route_flag(text: str) -> RuleSpec:
    """``--egress-route PATTERN=ROUTE``; the last ``=`` separates them (routes never contain one)."""
    source = flag_source("--egress-route", text)
    pattern, sep, route = text.rpartition("=")
    if not sep:
        raise SpecError(source, "expected PATTERN=ROUTE, for example '*.corp.example=client'")
    try:
        return RuleSpec(pattern=check_pattern(pattern), route=check_route(route))
    except ValueError as exc:
        raise SpecError(source, str(exc)) from None


def read_pac_file(path: str) -> str:
    """The text of ``--egress-pac FILE``; an unreadable, non-UTF-8 or empty file is an error."""
    source = flag_source("--egress-pac", path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise SpecError(source, f"cannot read the PAC file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(source, f"the PAC file is not UTF-8 text (bad byte at offset {exc.start})") from None
    if not text.strip():
        raise SpecError(source, "the PAC file is empty")
    return text


def fold_egress_flags(loaded: LoadedSpec, flags: EgressFlags) -> LoadedSpec:
    """The spec with the egress flags applied (see the module docstring for precedence)."""
    if not flags.any():
        return loaded
    egress = loaded.spec.egress or EgressSpec()
    update: dict[str, object] = {}
    if flags.mode is not None:
        update["mode"] = parse_mode_flag(flags.mode)
    if flags.default is not None:
        update["default"] = parse_default_flag(flags.default)
    if flags.routes:
        update["rules"] = [*(parse_route_flag(text) for text in flags.routes), *egress.rules]
    script_origin = loaded.script_origin
    if flags.pac is not None:
        update["script"] = read_pac_file(flags.pac)
        script_origin = ScriptOrigin(flags.pac, flag_source("--egress-pac", flags.pac), file=flags.pac)
    # Each value was validated on its own above, so the copy needs no second validation.
    spec = loaded.spec.model_copy(update={"egress": egress.model_copy(update=update)})
    return LoadedSpec(spec, loaded.origin, script_origin, loaded.mount_origins, loaded.service)


def parse_local_mount(text: str, *, cwd: str | None = None) -> MountSpec:
    """``--local-mount SRC:DST[:ro]`` (or ``:rw``); SRC is a path on this machine, relative to ``cwd``."""
    source = flag_source("--local-mount", text)
    parts = text.split(":")
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        read_only = parts[2] == "ro"
    elif len(parts) == 2:
        read_only = False
    else:
        raise SpecError(source, "expected SRC:DST or SRC:DST:ro (paths cannot contain ':')")
    src, dst = parts[0], parts[1]
    if not src or not dst:
        raise SpecError(source, f"the {'local source' if not src else 'target'} path is empty")
    # A bare name here is a directory next to us, not a backend volume: make it a path.
    local = resolve_source(src if src.startswith(("/", ".", "~")) else "./" + src, cwd or os.getcwd())
    try:
        return MountSpec(source=local, target=dst, read_only=read_only)
    except ValidationError as exc:
        messages = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise SpecError(source, messages) from None


def fold_local_mounts(loaded: LoadedSpec, texts: Sequence[str], *, cwd: str | None = None) -> LoadedSpec:
    """The spec with ``--local-mount`` flags appended to its mounts; two mounts on one target are an error."""
    if not texts:
        return loaded
    mounts = list(loaded.spec.mounts)
    origins = list(loaded.mount_origins)
    for text in texts:
        mount = parse_local_mount(text, cwd=cwd)
        for index, other in enumerate(mounts):
            if other.target.rstrip("/") == mount.target.rstrip("/"):
                raise SpecError(
                    flag_source("--local-mount", text),
                    f"target {mount.target!r} is already mounted (by {origins[index] if index < len(origins) else loaded.origin})",
                )
        mounts.append(mount)
        origins.append(flag_source("--local-mount", text))
    spec = loaded.spec.model_copy(update={"mounts": mounts})
    return LoadedSpec(spec, loaded.origin, loaded.script_origin, tuple(origins), loaded.service)
