"""The credential value, its one error type, and its JSON wire shape.

Wire shape: ``{"values": {"KEY": "secret", ...}, "expiration": "2030-01-01T00:00:00Z" | null}``;
an error travels as ``{"error": "what went wrong"}``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any


class CredentialError(Exception):
    """A credential could not be fetched, parsed, cached or delivered; the message says what and where."""


class UnknownCredentialError(CredentialError):
    """The name was not declared for this session, so nothing is fetched for it."""


@dataclass(frozen=True)
class Credential:
    # repr=False: a logged or printed credential shows its expiration, never its values.
    values: Mapping[str, str] = field(repr=False)
    expiration: datetime | None = None

    def __post_init__(self) -> None:
        if not self.values:
            raise CredentialError("credential has no values")
        if self.expiration is not None and self.expiration.tzinfo is None:
            raise CredentialError("credential expiration must carry a time zone")
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))

    def to_wire(self) -> dict[str, Any]:
        return {"values": dict(self.values), "expiration": format_rfc3339(self.expiration)}

    def to_json(self) -> bytes:
        return json.dumps(self.to_wire(), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Credential:
        """Parse the wire shape; any other input raises CredentialError."""
        return credential_from_wire(load_json_object(data))


Fetcher = Callable[[str], Awaitable[Credential]]
"""Fetch a credential by name: a SourceSet on the caller, the relay (or the cache) in the pod."""


def error_json(message: str) -> bytes:
    return json.dumps({"error": message}, separators=(",", ":")).encode()


def load_json_object(data: bytes | str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CredentialError(f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise CredentialError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def credential_from_wire(obj: Mapping[str, Any]) -> Credential:
    unknown = sorted(set(obj) - {"values", "expiration"})
    if unknown:
        raise CredentialError(
            f"unexpected field(s) {', '.join(map(repr, unknown))}; expected values, expiration"
        )
    if "values" not in obj:
        raise CredentialError("missing field 'values'")
    values = string_map(obj["values"], "values")
    expiration = obj.get("expiration")
    if expiration is not None and not isinstance(expiration, str):
        raise CredentialError(
            f"'expiration' must be an RFC 3339 string or null, got {type(expiration).__name__}"
        )
    return Credential(values, parse_rfc3339(expiration) if expiration is not None else None)


def string_map(obj: Any, where: str) -> dict[str, str]:
    """A non-empty mapping of non-empty string keys to string values."""
    if not isinstance(obj, dict):
        raise CredentialError(f"'{where}' must be an object of strings, got {type(obj).__name__}")
    if not obj:
        raise CredentialError(f"'{where}' is empty")
    for key, value in obj.items():
        if not isinstance(key, str) or not key:
            raise CredentialError(f"'{where}' has an empty key")
        if not isinstance(value, str):
            raise CredentialError(f"'{where}.{key}' must be a string, got {type(value).__name__}")
    return dict(obj)


def parse_rfc3339(text: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise CredentialError(f"expiration {text[:64]!r} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise CredentialError(f"expiration {text[:64]!r} has no time zone")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise CredentialError(f"expiration {text[:64]!r} is out of range") from None


def format_rfc3339(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
