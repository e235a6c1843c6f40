"""Validate loaded YAML against a model; pydantic's errors become one SpecError at file:line:column."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import SpecError
from .yamldoc import Path, PathElem, YamlDocument

M = TypeVar("M", bound=BaseModel)

Translate = Callable[[Path], Path]
"""Maps a model path (``egress.rules[2]``) to where that value sits in the YAML file."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def same(loc: Path) -> Path:
    return loc


def under(prefix: Path) -> Translate:
    """Model paths that sit below ``prefix`` in the file."""
    return lambda loc: (*prefix, *loc)


def validate(model: type[M], data: object, doc: YamlDocument, translate: Translate = same) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, model, doc, translate) from None
    except RecursionError:
        raise SpecError(doc.name, "nested too deeply") from None


def spec_error(
    exc: ValidationError, model: type[BaseModel], doc: YamlDocument, translate: Translate
) -> SpecError:
    problems: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        loc: Path = tuple(error["loc"])
        where = translate(loc)
        kind = error["type"]
        source = doc.where(where, key=kind == "extra_forbidden")
        problems.append((source, f"{format_path(where) or 'top level'}: {_describe(error, model, loc)}"))
    return SpecError(problems[0][0], problems[0][1], more=problems[1:])


def format_path(path: Sequence[PathElem]) -> str:
    """``("egress", "rules", 2, "route")`` -> ``egress.rules[2].route``."""
    out = ""
    for elem in path:
        if isinstance(elem, int):
            out += f"[{elem}]"
        elif _IDENT.fullmatch(elem):
            out += f".{elem}" if out else elem
        else:
            out += f"[{elem!r}]"
    return out


def _describe(error: Any, model: type[BaseModel], loc: Path) -> str:
    kind = error["type"]
    message = str(error["msg"])
    if kind == "extra_forbidden":
        allowed = _fields_at(model, loc[:-1])
        hint = f" (expected one of: {', '.join(allowed)})" if allowed else ""
        return f"unknown key {loc[-1]!r}{hint}"
    if kind == "missing":
        return "required key is missing"
    if message.startswith("Value error, "):
        return message.removeprefix("Value error, ")
    value = error.get("input")
    if isinstance(value, str | int | float | bool) or value is None:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return f"{message}, got {shown}"
    return f"{message}, got a {_kind_name(value)}"


def _kind_name(value: object) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def _fields_at(model: type[BaseModel], loc: Path) -> list[str]:
    """The keys a mapping at ``loc`` may hold, when it is a model."""
    current: Any = model
    for elem in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(elem))
            if field is None:
                return []
            current = field.annotation
        elif typing.get_origin(current) is list and isinstance(elem, int):
            current = typing.get_args(current)[0]
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` and ``X | None`` down to the type that holds the structure."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin is typing.Union or origin is types.UnionType:
            options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation
