"""Credential wire shape, RFC 3339 times, and the parsers (examples, then hypothesis fuzzing)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.credentials import (
    Credential,
    CredentialError,
    error_json,
    parse_dotenv,
    parse_exec_output,
    parse_json_document,
    render,
)

FUZZ = settings(max_examples=300, deadline=None)


def test_wire_shape_round_trips_with_utc_rfc3339() -> None:
    expiry = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    credential = Credential({"token": "s3cret"}, expiry)
    wire = json.loads(credential.to_json())
    assert wire == {"values": {"token": "s3cret"}, "expiration": "2030-01-02T01:04:05Z"}
    assert Credential.from_json(credential.to_json()) == credential


def test_no_expiration_is_null_and_repr_hides_values() -> None:
    credential = Credential({"token": "s3cret"})
    assert json.loads(credential.to_json())["expiration"] is None
    assert "s3cret" not in repr(credential)
    assert json.loads(error_json("it broke")) == {"error": "it broke"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "expected a JSON object"),
        ("{", "invalid JSON"),
        ('{"values": {}}', "'values' is empty"),
        ('{"values": {"a": 1}}', "'values.a' must be a string"),
        ('{"values": {"a": "b"}, "extra": 1}', "unexpected field(s) 'extra'"),
        ('{"values": {"a": "b"}, "expiration": "tomorrow"}', "not an RFC 3339 time"),
        ('{"values": {"a": "b"}, "expiration": "2030-01-01T00:00:00"}', "has no time zone"),
        ('{"expiration": null}', "missing field 'values'"),
    ],
)
def test_bad_wire_documents_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(CredentialError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Credential.from_json(text)


def test_json_documents_may_be_flat_objects() -> None:
    assert parse_json_document('{"user": "u", "password": "p"}').values == {"user": "u", "password": "p"}
    wire = parse_json_document('{"values": {"a": "b"}, "expiration": "2030-01-01T00:00:00Z"}')
    assert wire.expiration == datetime(2030, 1, 1, tzinfo=UTC)


def test_exec_output_raw_and_json() -> None:
    assert parse_exec_output(b"tok\n", "token").values == {"token": "tok"}
    assert parse_exec_output(b"tok\r\n", "token").values == {"token": "tok"}
    assert parse_exec_output(b'{"values": {"a": "b"}}').values == {"a": "b"}
    with pytest.raises(CredentialError, match="output is empty"):
        parse_exec_output(b"\n", "token")
    with pytest.raises(CredentialError, match="not UTF-8"):
        parse_exec_output(b"\xff", "token")
    with pytest.raises(CredentialError, match="invalid JSON"):
        parse_exec_output(b"tok")


def test_dotenv_grammar() -> None:
    text = (
        "# a comment\n"
        "export PLAIN=abc\n"
        "SINGLE='a b $c \\n'\n"
        'DOUBLE="line\\nnext \\"q\\" \\$x"\n'
        "JOINED='it'\"'\"'s'\n"
        "HASH=abc#def  # trailing comment\n"
        "EMPTY=\n"
        "SPACED = # only a comment\n"
        "MULTI='one\n"
        "two'\n"
    )
    assert parse_dotenv(text) == {
        "PLAIN": "abc",
        "SINGLE": "a b $c \\n",
        "DOUBLE": 'line\nnext "q" $x',
        "JOINED": "it's",
        "HASH": "abc#def",
        "EMPTY": "",
        "SPACED": "",
        "MULTI": "one\ntwo",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("A=1\nnot an assignment\n", "line 2: expected KEY=VALUE"),
        ("A=1\nB=two words\n", "line 2: unexpected 'words' after the value of B"),
        ("A='open\n", "line 1: unterminated single quote"),
        ('\n\nA="open\n', "line 3: unterminated double quote"),
        ("1A=x\n", "line 1: expected KEY=VALUE"),
    ],
)
def test_dotenv_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(CredentialError, match=message):
        parse_dotenv(text)


# -- fuzzing: any input gives a result or the module's one error type ---------------------------------

_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_DOCUMENTS = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    _JSONISH.map(lambda obj: json.dumps(obj).encode()),
    st.fixed_dictionaries(
        {"values": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)},
        optional={"expiration": st.text(max_size=40) | st.datetimes().map(str)},
    ).map(lambda obj: json.dumps(obj).encode()),
)


@FUZZ
@given(_DOCUMENTS)
def test_fuzz_json_document(data: bytes) -> None:
    try:
        credential = parse_json_document(data)
    except CredentialError:
        return
    assert credential.values and all(isinstance(v, str) for v in credential.values.values())


@FUZZ
@given(_DOCUMENTS, st.sampled_from([None, "value"]))
def test_fuzz_exec_output(data: bytes, raw_key: str | None) -> None:
    try:
        credential = parse_exec_output(data, raw_key)
    except CredentialError:
        return
    assert Credential.from_json(credential.to_json()) == credential


_DOTENV_PIECES = st.sampled_from(
    ["A", "b_2", "=", "'", '"', "\\", "#", " ", "\t", "\n", "\r", "export ", "x", "$"]
)


@FUZZ
@given(st.text(max_size=200) | st.lists(_DOTENV_PIECES, max_size=40).map("".join))
def test_fuzz_dotenv(text: str) -> None:
    try:
        values = parse_dotenv(text)
    except CredentialError as exc:
        assert str(exc).startswith("line ")
        return
    assert all(isinstance(key, str) and key for key in values)


_ENV_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
_VALUES = st.text(st.characters(blacklist_characters="\0", blacklist_categories=["Cs"]), max_size=30)


@FUZZ
@given(st.dictionaries(_ENV_KEYS, _VALUES, min_size=1, max_size=5))
def test_env_format_round_trips_through_the_dotenv_parser(values: dict[str, str]) -> None:
    assert parse_dotenv(render(Credential(values), "env").decode()) == values
