"""Parsers for what sources read: JSON documents, dotenv files and exec output.

Pure functions, text or bytes in, a Credential (or a mapping) out; anything malformed raises
CredentialError saying what was wrong and where (line numbers for dotenv).
"""

from __future__ import annotations

import re

from cornus_core.credentials.credential import (
    Credential,
    CredentialError,
    credential_from_wire,
    load_json_object,
    string_map,
)

# A dotenv assignment: optional `export`, the key, `=`, and the spaces after it.
_ASSIGNMENT = re.compile(r"(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)[ \t]*=([ \t]*)")
_DOUBLE_QUOTE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "$": "$", "`": "`"}
_BLANKS = " \t\r\n"


def parse_json_document(data: bytes | str) -> Credential:
    """A JSON file: the wire shape (``{"values": {...}, "expiration": ...}``) or a flat object of strings."""
    obj = load_json_object(data)
    if isinstance(obj.get("values"), dict):
        return credential_from_wire(obj)
    return Credential(string_map(obj, "document"))


def parse_exec_output(stdout: bytes, raw_key: str | None = None) -> Credential:
    """A command's stdout: the wire shape, or with raw_key the whole output (one trailing newline dropped)."""
    if raw_key is None:
        return credential_from_wire(load_json_object(stdout))
    try:
        text = stdout.decode()
    except UnicodeDecodeError as exc:
        raise CredentialError(f"output is not UTF-8 (byte {exc.start})") from None
    value = text.removesuffix("\n").removesuffix("\r")
    if not value:
        raise CredentialError("output is empty")
    return Credential({raw_key: value})


def parse_dotenv(text: str) -> dict[str, str]:
    """``KEY=value`` lines with shell-word values: bare, '...' (literal) or "..." (escapes), concatenated.

    Comments start with ``#`` at the start of a line or after a blank; ``export`` is allowed;
    in double quotes ``\\n``, ``\\r``, ``\\t`` are also understood, as dotenv tools do.
    """
    values: dict[str, str] = {}
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in _BLANKS:
            pos += 1
        if pos >= end:
            break
        if text[pos] == "#":
            pos = _end_of_line(text, pos)
            continue
        match = _ASSIGNMENT.match(text, pos)
        if match is None:
            raise CredentialError(
                f"line {_line_of(text, pos)}: expected KEY=VALUE, got {_excerpt(text, pos)}"
            )
        key, start, pos = match[1], match.start(), match.end()
        if match[2] and text.startswith("#", pos):
            value = ""  # `KEY= # note`: a "#" after a blank starts a comment, as in the shell
        else:
            value, pos = _read_word(text, pos, start)
        while pos < end and text[pos] in " \t":
            pos += 1
        if text.startswith("#", pos):
            pos = _end_of_line(text, pos)
        elif pos < end and text[pos] not in "\r\n":
            raise CredentialError(
                f"line {_line_of(text, pos)}: unexpected {_excerpt(text, pos)} after the value of {key}; "
                "quote values that contain blanks"
            )
        values[key] = value
    return values


def _read_word(text: str, pos: int, start: int) -> tuple[str, int]:
    parts: list[str] = []
    end = len(text)
    while pos < end and text[pos] not in _BLANKS:
        char = text[pos]
        if char == "'":
            close = text.find("'", pos + 1)
            if close < 0:
                raise CredentialError(f"line {_line_of(text, start)}: unterminated single quote")
            parts.append(text[pos + 1 : close])
            pos = close + 1
        elif char == '"':
            pos = _read_double_quoted(text, pos + 1, start, parts)
        elif char == "\\" and pos + 1 < end:
            parts.append(text[pos + 1])
            pos += 2
        else:
            parts.append(char)
            pos += 1
    return "".join(parts), pos


def _read_double_quoted(text: str, pos: int, start: int, parts: list[str]) -> int:
    end = len(text)
    while pos < end:
        char = text[pos]
        if char == '"':
            return pos + 1
        if char == "\\" and pos + 1 < end and text[pos + 1] in _DOUBLE_QUOTE_ESCAPES:
            parts.append(_DOUBLE_QUOTE_ESCAPES[text[pos + 1]])
            pos += 2
        else:
            parts.append(char)
            pos += 1
    raise CredentialError(f"line {_line_of(text, start)}: unterminated double quote")


def _end_of_line(text: str, pos: int) -> int:
    newline = text.find("\n", pos)
    return len(text) if newline < 0 else newline


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _excerpt(text: str, pos: int) -> str:
    return repr(text[pos : _end_of_line(text, pos)][:40])
