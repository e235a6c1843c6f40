"""The rule pattern grammar (SPEC 1.3): every form, every compile error, matching, and fuzzing."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.policy import Destination, PolicyError, parse_pattern


def dest(host: str | None, ip: str | None = None, port: int = 443) -> Destination:
    return Destination(host, ip, port)


# ---- every grammar row -------------------------------------------------------------------------

GRAMMAR = [
    # (pattern, kind, port, network-or-glob)
    ("example.com", "glob", None, "example.com"),
    ("*.corp.example", "glob", None, "*.corp.example"),
    ("*.corp.example:8443", "glob", 8443, "*.corp.example"),
    ("10.0.0.0/8", "net", None, "10.0.0.0/8"),
    ("10.0.0.0/8:22", "net", 22, "10.0.0.0/8"),
    ("192.0.2.7", "net", None, "192.0.2.7/32"),
    ("192.0.2.7:80", "net", 80, "192.0.2.7/32"),
    ("[2001:db8::1]", "net", None, "2001:db8::1/128"),
    ("[2001:db8::/32]", "net", None, "2001:db8::/32"),
    ("[2001:db8::1]:443", "net", 443, "2001:db8::1/128"),
    ("[fd00::/8]:53", "net", 53, "fd00::/8"),
    ("2001:db8::1", "net", None, "2001:db8::1/128"),  # two or more colons: IPv6 without a port
    ("fd00::/8", "net", None, "fd00::/8"),
    ("::1", "net", None, "::1/128"),
    ("[192.0.2.1]:443", "net", 443, "192.0.2.1/32"),
    ("*:443", "any", 443, None),
    (":443", "any", 443, None),
    ("*", "any", None, None),
    ("db?.corp", "glob", None, "db?.corp"),
    ("[ab]*.example", "glob", None, "[ab]*.example"),
    ("host[!0-9].example", "glob", None, "host[!0-9].example"),
    ("Example.COM.", "glob", None, "example.com"),  # one trailing dot dropped, case folded
    ("  spaced.example  ", "glob", None, "spaced.example"),
    ("10.0.0.1/8", "net", None, "10.0.0.0/8"),  # host bits are dropped, as Go's ParseCIDR does
]


@pytest.mark.parametrize(("text", "kind", "port", "part"), GRAMMAR)
def test_every_grammar_row_parses(text: str, kind: str, port: int | None, part: str | None) -> None:
    pattern = parse_pattern(text)
    assert pattern.kind == kind
    assert pattern.port == port
    assert pattern.text == text
    if kind == "net":
        assert pattern.network == ipaddress.ip_network(part)
    elif kind == "glob":
        assert pattern.glob == part


BAD = [
    ("", "empty pattern"),
    ("   ", "empty pattern"),
    ("example.com:", "missing port"),
    (":", "missing port"),
    ("example.com:0", "must be 1..65535"),
    ("example.com:65536", "must be 1..65535"),
    ("example.com:http", "must be a number"),
    ("example.com:-1", "must be a number"),
    ("*:４４３", "must be a number"),  # full-width digits are not a port
    ("10.0.0.0/33", "bad CIDR"),
    ("10.0.0.0/x", "bad CIDR"),
    ("10.0.0.0/", "bad CIDR"),
    ("[2001:db8::/129]", "bad CIDR"),
    ("10.0.0.256", "not a valid IP address"),
    ("1.2.3", "not a valid IP address"),
    ("2001:db8::zz", "not a valid IPv6 address"),
    ("a:b:c", "not a valid IPv6 address"),
    ("[2001:db8::1", "unterminated '['"),
    ("[2001:db8::1]x", "unexpected 'x' after ']'"),
    ("[2001:db8::1]:99999", "must be 1..65535"),
    ("[not-an-ip.example]", "not a valid IP address"),
    ("a[bc.example", "unterminated '['"),
    ("[ab.example", "unterminated '['"),
    ("x!y.example", "only allowed inside [...]"),
    ("x]y.example", "only allowed inside [...]"),
    ("[z-a].example", "reversed range"),
    ("bad host.example", "character ' '"),
    ("bad/host", "bad CIDR"),
    ("user@host", "character '@'"),
    (".corp.example", "leading dot"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD)
def test_compile_errors_name_the_pattern_and_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_pattern(text)
    assert fragment in str(caught.value)
    assert caught.value.pattern == text
    assert repr(text) in str(caught.value)


def test_a_non_string_pattern_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match="must be a string"):
        parse_pattern(443)  # type: ignore[arg-type]


# ---- matching ----------------------------------------------------------------------------------

MATCHES = [
    # pattern, destination, expected
    ("*.corp.example", dest("db.corp.example"), True),
    ("*.corp.example", dest("a.b.corp.example"), True),  # '*' spans dots
    ("*.corp.example", dest("corp.example"), False),
    ("*.corp.example", dest("DB.Corp.Example."), True),  # case and one trailing dot
    ("*.corp.example", dest("db.corp.example.."), False),  # only one trailing dot
    ("*.corp.example", dest("db.corp.example.evil"), False),
    ("db?.corp", dest("db1.corp"), True),
    ("db?.corp", dest("db12.corp"), False),
    ("[ab]*.example", dest("alpha.example"), True),
    ("[ab]*.example", dest("charlie.example"), False),
    ("host[!0-9].example", dest("hostx.example"), True),
    ("host[!0-9].example", dest("host7.example"), False),
    ("example.com", dest("example.com"), True),
    ("example.com", dest("www.example.com"), False),
    ("example.com:8080", dest("example.com", port=8080), True),
    ("example.com:8080", dest("example.com", port=8081), False),
    # CIDR and IP patterns: the destination IP or an IP-literal host, never a resolved name
    ("10.0.0.0/8", dest("internal.example", "10.1.2.3"), True),
    ("10.0.0.0/8", dest("10.1.2.3"), True),
    ("10.0.0.0/8", dest(None, "10.1.2.3"), True),
    ("10.0.0.0/8", dest("internal.example"), False),  # the name is not resolved
    ("10.0.0.0/8", dest("internal.example", "192.0.2.1"), False),
    ("10.0.0.0/8", dest("x", "::ffff:10.0.0.9"), True),  # IPv4-mapped IPv6 compares as IPv4
    ("10.0.0.0/8:22", dest(None, "10.0.0.1", 22), True),
    ("10.0.0.0/8:22", dest(None, "10.0.0.1", 23), False),
    ("192.0.2.7", dest(None, "192.0.2.7"), True),
    ("192.0.2.7", dest(None, "192.0.2.8"), False),
    ("[2001:db8::/32]", dest(None, "2001:db8:1::5"), True),
    ("[2001:db8::/32]", dest("2001:db8::9"), True),
    ("[2001:db8::/32]", dest("[2001:db8::9]"), True),
    ("[2001:db8::/32]", dest(None, "2001:db9::1"), False),
    ("[2001:db8::1]:443", dest(None, "2001:db8::1", 443), True),
    ("[2001:db8::1]:443", dest(None, "2001:db8::1", 80), False),
    ("2001:db8::1", dest(None, "2001:db8::1", 1), True),
    ("fd00::/8", dest(None, "fd12::1"), True),
    ("[::ffff:10.0.0.0/104]", dest(None, "10.9.9.9"), True),
    # any host on a port
    ("*:443", dest("anything.example", None, 443), True),
    ("*:443", dest(None, "192.0.2.1", 443), True),
    ("*:443", dest("anything.example", None, 80), False),
    (":443", dest(None, "2001:db8::1", 443), True),
    ("*", dest(None, "192.0.2.1", 1), True),
    # a glob sees the address text when no name is known
    ("10.0.*", dest(None, "10.0.3.4"), True),
]


@pytest.mark.parametrize(("text", "destination", "expected"), MATCHES)
def test_matching(text: str, destination: Destination, expected: bool) -> None:
    assert parse_pattern(text).matches(destination) is expected


@pytest.mark.timeout(60)
def test_glob_matching_stays_linear_on_adversarial_hosts() -> None:
    # A plain regex translation (one '.*' per star) backtracks as n**11 here and never finishes;
    # atomic stars answer at once. A regression shows up as this test timing out.
    pattern = parse_pattern("*a*a*a*a*a*a*a*a*a*a*a*b")
    assert not pattern.matches(dest("a" * 5000))
    assert pattern.matches(dest("a" * 5000 + "b"))


# ---- fuzzing -----------------------------------------------------------------------------------

PATTERN_ALPHABET = "abcz09.-_*?[]!:/ @"


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=PATTERN_ALPHABET, max_size=24)))
def test_any_text_is_a_pattern_or_a_policy_error(text: str) -> None:
    try:
        pattern = parse_pattern(text)
    except PolicyError as exc:
        assert str(exc)
        return
    assert pattern.matches(dest("host.example", "192.0.2.1")) in (True, False)
    assert parse_pattern(pattern.text) == pattern  # deterministic


hosts = st.one_of(
    st.none(),
    st.text(alphabet="abcxyz019.-*?[", max_size=20),
    st.ip_addresses().map(str),
)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=PATTERN_ALPHABET, min_size=1, max_size=16),
    hosts,
    st.one_of(st.none(), st.ip_addresses().map(str), st.text(max_size=8)),
    st.integers(min_value=-1, max_value=70000),
)
def test_matching_any_destination_never_crashes(
    text: str, host: str | None, ip: str | None, port: int
) -> None:
    try:
        pattern = parse_pattern(text)
    except PolicyError:
        return
    assert pattern.matches(Destination(host, ip, port)) in (True, False)
