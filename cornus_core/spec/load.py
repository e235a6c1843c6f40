"""Load a deploy spec from a spec YAML file or a Compose file, remembering where things came from."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from . import compose
from .errors import SpecError, flag_source
from .models import DeploySpec, is_local_path
from .validation import Translate, format_path, same, validate
from .yamldoc import Path, YamlDocument, load_yaml

COMMAND_LINE = "<command line>"


@dataclass(frozen=True)
class ScriptOrigin:
    """Where ``egress.script`` was written, so that a PAC error at script line:column names a file position.

    ``where`` is the script as a whole (``app.yaml:3:11``, ``--egress-pac corp.pac``); ``file`` is set
    when script lines are lines of that file (a PAC file, or a YAML ``|`` block), with the file line
    of script line 1 and the indentation to add to script columns.
    """

    where: str
    label: str
    file: str | None = None
    first_line: int = 1
    indent: int = 0

    def locate(self, line: int | None, column: int | None) -> str | None:
        """``file:line:column`` of a script position, or None when it cannot be told."""
        if self.file is None or line is None:
            return None
        return f"{self.file}:{self.first_line + line - 1}:{self.indent + (column or 1)}"


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec plus the sources that later errors (compile, detach, mounts) must name.

    ``origin`` is the file (or ``<command line>``); ``script_origin`` says where ``egress.script`` was
    written; ``mount_origins[i]`` says where ``spec.mounts[i]`` was written.
    """

    spec: DeploySpec
    origin: str = COMMAND_LINE
    script_origin: ScriptOrigin | None = None
    mount_origins: tuple[str, ...] = field(default_factory=tuple)
    service: str | None = None


def empty_spec() -> LoadedSpec:
    """The spec used when no file is given: no workload, no egress block (everything routes cluster)."""
    return LoadedSpec(DeploySpec())


def load_spec_file(
    path: str | os.PathLike[str], *, service: str | None = None, environ: Mapping[str, str] | None = None
) -> LoadedSpec:
    """Load a spec YAML file, or a Compose file (detected by its top-level ``services:`` key).

    Relative mount sources are taken relative to the file's directory.
    """
    name = os.fspath(path)
    try:
        raw = FsPath(name).read_bytes()
    except OSError as exc:
        raise SpecError(name, f"cannot read the spec: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(name, f"not UTF-8 text (bad byte at offset {exc.start})") from None
    base_dir = os.path.dirname(os.path.abspath(name))
    return load_spec_text(text, name=name, base_dir=base_dir, service=service, environ=environ)


def load_spec_text(
    text: str,
    *,
    name: str = "<spec>",
    base_dir: str = ".",
    service: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> LoadedSpec:
    """Like :func:`load_spec_file`, for text already read; ``name`` is used in error messages."""
    doc = load_yaml(text, name)
    data = {} if doc.data is None else doc.data
    if not isinstance(data, dict):
        raise SpecError(doc.where(()), f"a spec must be a mapping of keys, got a {_kind(data)}")
    doc.data = data
    if compose.is_compose(data):
        raw, translate, chosen = _from_compose(doc, service, environ)
    elif service is not None:
        raise SpecError(
            flag_source("--service", service), f"{name} is not a Compose file (no 'services:' key)"
        )
    else:
        raw, translate, chosen = data, same, None
    raw = _resolve_mount_sources(raw, base_dir)
    spec = validate(DeploySpec, raw, doc, translate)
    return LoadedSpec(
        spec=spec,
        origin=name,
        script_origin=_script_origin(doc, translate) if spec.egress and spec.egress.script else None,
        mount_origins=tuple(_where(doc, translate, ("mounts", i)) for i in range(len(spec.mounts))),
        service=chosen,
    )


def _from_compose(
    doc: YamlDocument, service: str | None, environ: Mapping[str, str] | None
) -> tuple[Mapping[Any, object], Translate, str | None]:
    selection = compose.select(doc, service, environ)
    origins = selection.origins
    chosen = selection.service

    def translate(loc: Path) -> Path:
        # Fields taken from the service (or the project's x-cornus-egress) map back to their keys.
        if loc and isinstance(loc[0], str) and loc[0] in origins:
            return (*origins[loc[0]], *loc[1:])
        return ("services", chosen) if chosen is not None else ()

    return selection.data, translate, chosen


def _script_origin(doc: YamlDocument, translate: Translate) -> ScriptOrigin:
    path = translate(("egress", "script"))
    where = doc.where(path)
    label = format_path(path)
    block = doc.literal_blocks.get(path)
    if block is None:
        return ScriptOrigin(where, label)
    return ScriptOrigin(where, label, doc.name, first_line=block[0], indent=block[1])


def _where(doc: YamlDocument, translate: Translate, loc: Path) -> str:
    return doc.where(translate(loc))


def _resolve_mount_sources(data: Mapping[Any, object], base_dir: str) -> Mapping[Any, object]:
    """Local paths in ``mounts[].source`` become absolute: ``~`` expands, relative means next to the file."""
    mounts = data.get("mounts")
    if not isinstance(mounts, list):
        return data
    resolved: list[object] = []
    for mount in mounts:
        if isinstance(mount, dict) and isinstance(mount.get("source"), str):
            mount = {**mount, "source": resolve_source(mount["source"], base_dir)}
        resolved.append(mount)
    return {**data, "mounts": resolved}


def resolve_source(source: str, base_dir: str) -> str:
    """A local mount source as an absolute path; a volume name (no ``/``, no leading ``.`` or ``~``)
    is returned unchanged."""
    if not is_local_path(source):
        return source
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(source)))


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
