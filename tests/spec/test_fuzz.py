"""Any input gives a result or a SpecError, nothing else (hypothesis)."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cornus_core.spec import (
    EgressFlags,
    LoadedSpec,
    SpecError,
    empty_spec,
    fold_egress_flags,
    load_spec_text,
    parse_default_flag,
    parse_dest,
    parse_local_mount,
    parse_mode_flag,
    parse_route_flag,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Words that steer generated documents into the interesting parts of the models.
KEYS = [
    "name", "image", "command", "env", "workdir", "mounts", "egress", "credentials", "detach",
    "mode", "default", "rules", "script", "proxies", "listen_port", "gateway", "pattern", "route",
    "source", "target", "read_only", "sources", "backend", "config", "ttl", "deliver", "kind",
    "provider", "format", "path", "prefix", "services", "x-cornus-egress", "x-cornus-other",
    "environment", "working_dir", "volumes", "type", "HTTP_PROXY", "web",
]  # fmt: skip
WORDS = [
    "client", "gateway", "cluster", "deny", "proxy", "env", "transparent", "*.corp.example", "10.0.0.0/8",
    "[::1]:443", ":443", "a:0", "/data", "./src", "~/x", "cache", "static", "exec", "file", "endpoint",
    "aws-imds", "json", "raw", "./a:/a:ro", "a:b:c:d", "", " ", "function FindProxyForURL(u, h) {}",
]  # fmt: skip

scalars = st.one_of(
    st.sampled_from(WORDS),
    st.text(max_size=12),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
)
documents: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), children, max_size=5),
    ),
    max_leaves=25,
)

word = st.one_of(st.sampled_from(WORDS), st.text(max_size=8))
value = st.one_of(word, scalars, documents)
rule = st.fixed_dictionaries({}, optional={"pattern": word, "route": word, "junk": value})
egress = st.fixed_dictionaries(
    {},
    optional={
        "mode": word,
        "default": word,
        "rules": st.one_of(st.lists(rule, max_size=3), value),
        "script": word,
        "proxies": st.dictionaries(
            st.sampled_from(["HTTP_PROXY", "https_proxy", "FTP_PROXY", "NO_PROXY"]), word
        ),
        "listen_port": st.one_of(st.integers(-2, 70000), value),
        "gateway": word,
    },
)
mount = st.one_of(
    st.fixed_dictionaries({}, optional={"source": word, "target": word, "read_only": value, "type": word}),
    word,
)
delivery = st.fixed_dictionaries(
    {}, optional={k: word for k in ("kind", "provider", "format", "path", "prefix")}
)
source = st.fixed_dictionaries(
    {},
    optional={
        "name": word,
        "backend": word,
        "config": value,
        "ttl": value,
        "deliver": st.lists(delivery, max_size=2),
    },
)
spec = st.fixed_dictionaries(
    {},
    optional={
        "name": word,
        "image": word,
        "command": st.one_of(word, st.lists(word, max_size=3)),
        "env": st.one_of(st.dictionaries(word, value, max_size=3), value),
        "workdir": word,
        "mounts": st.lists(mount, max_size=3),
        "egress": st.one_of(egress, value),
        "credentials": st.fixed_dictionaries({}, optional={"sources": st.lists(source, max_size=2)}),
        "detach": value,
        "extra": value,
    },
)
service = st.fixed_dictionaries(
    {},
    optional={
        "image": word,
        "command": st.one_of(word, st.lists(word, max_size=3)),
        "environment": st.one_of(st.lists(word, max_size=3), st.dictionaries(word, value, max_size=3)),
        "working_dir": word,
        "volumes": st.lists(mount, max_size=3),
        "x-cornus-egress": st.one_of(egress, st.none()),
        "x-cornus-typo": value,
        "ports": value,
    },
)
compose = st.fixed_dictionaries(
    {
        "services": st.one_of(
            st.dictionaries(st.sampled_from(["web", "api", "db"]), service, max_size=3), value
        )
    },
    optional={"x-cornus-egress": st.one_of(egress, value), "x-other": value},
)


def _load(text: str, service: str | None = None) -> None:
    try:
        loaded = load_spec_text(text, name="fuzz.yaml", base_dir="/base", service=service, environ={})
    except SpecError as exc:
        assert exc.source and exc.message and str(exc)
    else:
        assert isinstance(loaded, LoadedSpec)


@FUZZ
@given(st.text(max_size=300))
def test_any_text(text: str) -> None:
    _load(text)


@FUZZ
@given(st.one_of(spec, compose, documents), st.one_of(st.none(), st.sampled_from(["web", "api", ""])))
def test_any_structured_document(data: object, service: str | None) -> None:
    _load(yaml.safe_dump(data, sort_keys=False), service)


@FUZZ
@given(
    st.lists(
        st.sampled_from(["a: &x [1, *x]", "b: *x", "<<: {a: 1}", "? [a]\n: 1", "!!binary x", "- !!set {}"]),
        max_size=3,
    ).map("\n".join)
)
def test_tagged_and_aliased_text(text: str) -> None:
    _load(text)


def _flag(parse: Any, text: str) -> None:
    try:
        parse(text)
    except SpecError as exc:
        assert exc.source and exc.message


@FUZZ
@given(st.text(max_size=60))
def test_flag_parsers(text: str) -> None:
    for parse in (parse_route_flag, parse_local_mount, parse_mode_flag, parse_default_flag, parse_dest):
        _flag(parse, text)


@FUZZ
@given(
    st.text(alphabet="ab.*?[]:/0123456789=[]@%-", max_size=30),
    st.sampled_from(["client", "deny", "CLUSTER", "gw", ""]),
)
def test_route_flag_near_the_grammar(pattern: str, route: str) -> None:
    _flag(parse_route_flag, f"{pattern}={route}")
    _flag(parse_dest, pattern)


@FUZZ
@given(
    st.one_of(st.none(), st.text(max_size=12)),
    st.lists(st.text(max_size=20), max_size=3),
    st.one_of(st.none(), st.text(max_size=12)),
)
def test_fold_any_flags(mode: str | None, routes: list[str], default: str | None) -> None:
    try:
        folded = fold_egress_flags(
            empty_spec(), EgressFlags(mode=mode, routes=tuple(routes), default=default)
        )
    except SpecError as exc:
        assert exc.source.startswith("--egress")
    else:
        assert isinstance(folded, LoadedSpec)
