"""PAC builtins against the reference engines' semantics (Netscape's examples, Mozilla, Chromium, pacparser).

Time-dependent builtins run on a pinned clock; the sandbox's local time is UTC, so a "GMT" argument
changes nothing. Where the reference engines are reachable (pacparser, when installed) the common
builtins are also checked against them on random inputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cornus_core.policy import PacError, PacScript

EVALUATOR = PacScript("function FindProxyForURL(url, host) { return JSON.stringify(eval(url)); }")


def js(expr: str, host: str = "client.example", ip: str | None = None, when: str | None = None) -> Any:
    """Evaluate one expression in the PAC sandbox (host/ip are the connection's; when pins the clock)."""
    now_ms = None if when is None else at(when)
    raw = EVALUATOR.find_proxy(expr, host, ip, now_ms=now_ms)
    return None if raw is None else json.loads(raw)


def at(when: str) -> int:
    return int(datetime.fromisoformat(when).replace(tzinfo=UTC).timestamp() * 1000)


# ---- the Netscape set ----------------------------------------------------------------------------

NETSCAPE = [
    ('dnsDomainIs("www.netscape.com", ".netscape.com")', True),
    ('dnsDomainIs("www", ".netscape.com")', False),
    ('dnsDomainIs("www.mcom.com", ".netscape.com")', False),
    ('dnsDomainIs("evilnetscape.com", "netscape.com")', True),  # a plain suffix test, as the references
    ('localHostOrDomainIs("www.netscape.com", "www.netscape.com")', True),
    ('localHostOrDomainIs("www", "www.netscape.com")', True),
    ('localHostOrDomainIs("www.mcom.com", "www.netscape.com")', False),
    ('localHostOrDomainIs("home.netscape.com", "www.netscape.com")', False),
    ('isPlainHostName("www")', True),
    ('isPlainHostName("www.netscape.com")', False),
    ('isPlainHostName("::1")', False),  # an IPv6 literal is not a plain name (Chromium)
    ('dnsDomainLevels("www")', 0),
    ('dnsDomainLevels("www.netscape.com")', 2),
    ('dnsDomainLevels("a.b.c.")', 3),
    ('isValidIpAddress("192.168.1.1")', True),
    ('isValidIpAddress("01.02.03.004")', True),
    ('isValidIpAddress("256.1.1.1")', False),
    ('isValidIpAddress("1.2.3")', False),
    ('isValidIpAddress("1.2.3.4.5")', False),
    ('isValidIpAddress("a.b.c.d")', False),
    ('isValidIpAddress("::1")', False),
    ('convert_addr("104.16.41.2")', 1745889538),
    ('convert_addr("192.168.1.1")', -1062731519),  # a signed 32-bit number, as the references
    ('convert_addr("0.0.0.0")', 0),
    ('isInNet("192.168.1.5", "192.168.1.0", "255.255.255.0")', True),
    ('isInNet("192.168.2.5", "192.168.1.0", "255.255.255.0")', False),
    ('isInNet("192.168.2.5", "192.168.0.0", "255.255.0.0")', True),
    ('isInNet("10.1.2.3", "10.0.0.0", "255.0.0")', False),  # a bad mask is false
    ('isInNet("10.1.2.3", "10.0.0", "255.0.0.0")', False),
    ('isInNet("unknown.example", "10.0.0.0", "255.0.0.0")', False),  # names resolve to nothing
    ('shExpMatch("http://home.netscape.com/people/ari/index.html", "*/ari/*")', True),
    ('shExpMatch("http://home.netscape.com/people/montulli/index.html", "*/ari/*")', False),
    ('shExpMatch("www.corp.example", "*.corp.example")', True),
    ('shExpMatch("a.b.c", "a*c")', True),  # '*' spans dots
    ('shExpMatch("abc", "a?c")', True),
    ('shExpMatch("ac", "a?c")', False),
    ('shExpMatch("ABC", "abc")', False),  # case-sensitive
    ('shExpMatch("axb", "a.b")', False),  # '.' is literal
    ('shExpMatch("", "*")', True),
    ('shExpMatch("", "")', True),
    ('shExpMatch("x", "")', False),
    ('shExpMatch("abc", "abc*")', True),
    ('shExpMatch("*literal", "*literal")', True),
    # the deliberate difference: every other character is literal, never a regex
    ('shExpMatch("a[bc]d", "a[bc]d")', True),
    ('shExpMatch("abd", "a[bc]d")', False),
    ('shExpMatch("a+b", "a+b")', True),
    ('shExpMatch("aab", "a+b")', False),
    ("myIpAddress()", "127.0.0.1"),
]


@pytest.mark.parametrize(("expr", "expected"), NETSCAPE)
def test_netscape_builtins(expr: str, expected: object) -> None:
    assert js(expr) == expected


def test_names_resolve_only_to_the_destination_ip() -> None:
    assert js('dnsResolve("db.corp")', host="db.corp", ip="10.2.3.4") == "10.2.3.4"
    assert js('dnsResolve("DB.Corp.")', host="db.corp", ip="10.2.3.4") == "10.2.3.4"
    assert js('dnsResolve("other.corp")', host="db.corp", ip="10.2.3.4") is None
    assert js('dnsResolve("db.corp")', host="db.corp") is None  # the IP is not known yet
    assert js('dnsResolve("192.0.2.1")') == "192.0.2.1"  # a literal resolves to itself
    assert js('dnsResolve("db.corp")', host="db.corp", ip="2001:db8::1") is None  # dnsResolve is IPv4 only
    assert js('isResolvable("db.corp")', host="db.corp", ip="10.2.3.4") is True
    assert js('isResolvable("db.corp")', host="db.corp") is False
    assert js('isInNet("db.corp", "10.0.0.0", "255.0.0.0")', host="db.corp", ip="10.2.3.4") is True
    assert js('isInNet(host, "10.0.0.0", "255.0.0.0")', host="db.corp", ip="10.2.3.4") is True
    assert js('isInNet(dnsResolve(host), "10.0.0.0", "255.0.0.0")', host="db.corp", ip="192.0.2.9") is False
    assert js("dnsResolve(host)", host="db.corp", ip="::ffff:10.0.0.7") == "10.0.0.7"  # mapped: IPv4


# ---- the Microsoft IPv6 extensions (Chromium's semantics) --------------------------------------------

IPV6_EXTENSIONS = [
    ('isInNetEx("198.95.249.79", "198.95.249.79/32")', True),
    ('isInNetEx("198.95.6.8", "198.95.0.0/16")', True),
    ('isInNetEx("198.96.6.8", "198.95.0.0/16")', False),
    ('isInNetEx("3ffe:8311:ffff:abcd:1234:dead:beef:101", "3ffe:8311:ffff::/48")', True),
    ('isInNetEx("3ffe:8312::1", "3ffe:8311:ffff::/48")', False),
    ('isInNetEx("::ffff:198.95.6.8", "198.95.0.0/16")', True),  # IPv4 promoted to IPv4-mapped
    ('isInNetEx("198.95.6.8", "::ffff:198.95.0.0/112")', True),
    ('isInNetEx("1.2.3.4", "1.2.3.4")', False),  # no prefix length
    ('isInNetEx("1.2.3.4", "1.2.3.0/33")', False),
    ('isInNetEx("host.example", "10.0.0.0/8")', False),  # an address, never a name
    ('isInNetEx("10.0.0.1", "0.0.0.0/0")', True),
    (
        'sortIpAddressList("10.2.3.9;2001:4898:28:3:201:2ff:feea:fc14;::1;10.2.3.17;fe80::5efe:157:9d3b:8b16")',
        "::1;2001:4898:28:3:201:2ff:feea:fc14;fe80::5efe:157:9d3b:8b16;10.2.3.9;10.2.3.17",
    ),
    ('sortIpAddressList(" 10.0.0.2 ;\\t10.0.0.1;;::1")', "::1;10.0.0.1;10.0.0.2"),
    ('sortIpAddressList("10.0.0.1")', "10.0.0.1"),
    ('sortIpAddressList("")', False),
    ('sortIpAddressList(";")', False),
    ('sortIpAddressList("10.0.0.1;bogus")', False),
    ("myIpAddressEx()", "127.0.0.1"),
    ("getClientVersion()", "1.0"),
]


@pytest.mark.parametrize(("expr", "expected"), IPV6_EXTENSIONS)
def test_ipv6_extensions(expr: str, expected: object) -> None:
    assert js(expr) == expected


def test_resolve_ex_answers_both_families() -> None:
    assert js('dnsResolveEx("db.corp")', host="db.corp", ip="2001:db8::1") == "2001:db8::1"
    assert js('dnsResolveEx("db.corp")', host="db.corp", ip="10.2.3.4") == "10.2.3.4"
    assert js('dnsResolveEx("other")', host="db.corp", ip="10.2.3.4") == ""
    assert js('dnsResolveEx("2001:db8::7")') == "2001:db8::7"
    assert js('isResolvableEx("db.corp")', host="db.corp", ip="2001:db8::1") is True
    assert js('isResolvableEx("db.corp")', host="db.corp") is False
    assert js('isInNetEx(dnsResolveEx(host), "2001:db8::/32")', host="db.corp", ip="2001:db8::1") is True


# ---- dates and times on the pinned clock ---------------------------------------------------------

# 2024-01-01 is a Monday.
WEEKDAYS = [
    ('weekdayRange("MON", "FRI")', "2024-01-01T00:00:00", True),
    ('weekdayRange("MON", "FRI")', "2024-01-05T23:59:59", True),
    ('weekdayRange("MON", "FRI")', "2024-01-06T12:00:00", False),
    ('weekdayRange("MON", "FRI", "GMT")', "2024-01-03T12:00:00", True),
    ('weekdayRange("SAT")', "2024-01-06T12:00:00", True),
    ('weekdayRange("SAT")', "2024-01-07T12:00:00", False),
    ('weekdayRange("SAT", "GMT")', "2024-01-06T12:00:00", True),
    ('weekdayRange("FRI", "MON")', "2024-01-06T12:00:00", True),  # wraps over the weekend
    ('weekdayRange("FRI", "MON")', "2024-01-08T12:00:00", True),
    ('weekdayRange("FRI", "MON")', "2024-01-03T12:00:00", False),
    ('weekdayRange("mon", "fri")', "2024-01-03T12:00:00", False),  # names are upper case
    ('weekdayRange("XYZ")', "2024-01-03T12:00:00", False),
    ("weekdayRange()", "2024-01-03T12:00:00", False),
]

DATES = [
    ("dateRange(1)", "2024-03-01T00:00:00", True),
    ("dateRange(1)", "2024-03-02T00:00:00", False),
    ('dateRange(1, "GMT")', "2024-03-01T23:00:00", True),
    ("dateRange(1, 15)", "2024-03-10T00:00:00", True),
    ("dateRange(1, 15)", "2024-03-16T00:00:00", False),
    ('dateRange(24, "DEC")', "2024-12-24T18:00:00", True),
    ('dateRange(24, "DEC")', "2024-12-23T23:59:59", False),
    # The engines read (day, month) as a start day and an end month: Dec 24 to the month's end.
    ('dateRange(24, "DEC")', "2024-12-31T12:00:00", True),
    ('dateRange("JAN", "MAR")', "2024-03-31T23:59:59", True),
    ('dateRange("JAN", "MAR")', "2024-04-01T00:00:00", False),
    ('dateRange(1, "JUN", 15, "AUG")', "2024-06-01T00:00:00", True),
    ('dateRange(1, "JUN", 15, "AUG")', "2024-08-15T12:00:00", True),
    ('dateRange(1, "JUN", 15, "AUG")', "2024-08-16T00:00:00", False),
    ('dateRange(1, "JUN", 1995, 15, "AUG", 1995)', "1995-07-01T00:00:00", True),
    ('dateRange(1, "JUN", 1995, 15, "AUG", 1995)', "1996-07-01T00:00:00", False),
    ('dateRange("OCT", 1995, "MAR", 1996)', "1995-12-01T00:00:00", True),
    ('dateRange("OCT", 1995, "MAR", 1996)', "1996-03-15T00:00:00", True),
    ('dateRange("OCT", 1995, "MAR", 1996)', "1996-04-01T00:00:00", False),
    ('dateRange("OCT", 1995, "MAR", 1996)', "1995-09-30T23:59:59", False),
    ("dateRange(1995)", "1995-06-15T00:00:00", True),
    ("dateRange(1995)", "1996-06-15T00:00:00", False),
    ("dateRange(1995, 1997)", "1996-06-15T00:00:00", True),
    ("dateRange(1995, 1997)", "1998-01-01T00:00:00", False),
    ('dateRange("MAY")', "2024-05-20T00:00:00", True),
    ('dateRange("MAY")', "2024-06-20T00:00:00", False),
    ('dateRange("DEC", "FEB")', "2024-01-15T00:00:00", True),  # wraps over the new year
    ('dateRange("DEC", "FEB")', "2024-06-15T00:00:00", False),
    ("dateRange()", "2024-06-15T00:00:00", False),
]

TIMES = [
    ("timeRange(12)", "2024-01-01T12:59:59", True),
    ("timeRange(12)", "2024-01-01T13:00:00", False),
    ('timeRange(12, "GMT")', "2024-01-01T12:30:00", True),
    ("timeRange(12, 13)", "2024-01-01T13:59:59", True),
    ("timeRange(12, 13)", "2024-01-01T14:00:00", False),
    ("timeRange(9, 17)", "2024-01-01T09:00:00", True),
    ("timeRange(9, 17)", "2024-01-01T08:59:59", False),
    ("timeRange(9, 17)", "2024-01-01T17:59:59", True),
    ("timeRange(9, 17)", "2024-01-01T18:00:00", False),
    ("timeRange(8, 30, 17, 0)", "2024-01-01T08:30:00", True),
    ("timeRange(8, 30, 17, 0)", "2024-01-01T08:29:59", False),
    ("timeRange(8, 30, 17, 0)", "2024-01-01T17:00:59", True),
    ("timeRange(8, 30, 17, 0)", "2024-01-01T17:01:00", False),
    ("timeRange(0, 0, 0, 0, 0, 30)", "2024-01-01T00:00:30", True),
    ("timeRange(0, 0, 0, 0, 0, 30)", "2024-01-01T00:00:31", False),
    ("timeRange(22, 0, 6, 0)", "2024-01-01T23:00:00", True),  # wraps over midnight
    ("timeRange(22, 0, 6, 0)", "2024-01-01T03:00:00", True),
    ("timeRange(22, 0, 6, 0)", "2024-01-01T12:00:00", False),
    ("timeRange(22, 6)", "2024-01-01T23:00:00", False),  # the two-hour form never wraps
    ("timeRange()", "2024-01-01T23:00:00", False),
]


@pytest.mark.parametrize(("expr", "when", "expected"), WEEKDAYS + DATES + TIMES)
def test_date_and_time_ranges(expr: str, when: str, expected: bool) -> None:
    assert js(expr, when=when) is expected


def test_time_range_with_a_bad_argument_count_throws() -> None:
    with pytest.raises(PacError) as caught:
        js("timeRange(1, 2, 3)", when="2024-01-01T00:00:00")
    assert caught.value.kind == "exception"
    assert "bad number of arguments" in str(caught.value)


def test_the_clock_is_pinned_and_local_time_is_utc() -> None:
    when = "2024-01-02T03:04:05"
    assert js("Date.now()", when=when) == at(when)
    assert js("new Date().getTime()", when=when) == at(when)
    assert js("new Date().toString()", when=when) == "Tue Jan 02 2024 03:04:05 GMT+0000"
    assert js("Date()", when=when) == "Tue Jan 02 2024 03:04:05 GMT+0000"
    assert js("[new Date().getHours(), new Date().getDay(), new Date().getTimezoneOffset()]", when=when) == [
        3,
        2,
        0,
    ]
    assert js("new Date(2024, 0, 2, 3, 4, 5).getTime()") == at(when)  # components are UTC
    assert js('Date.parse("2024-01-02T03:04:05")') == at(when)  # a zone-less date-time is UTC
    assert js('Date.parse("2024-01-02T05:04:05+02:00")') == at(when)
    assert js("new Date(0).toLocaleString()") == "01/01/1970, 12:00:00 AM"
    assert js("new Date() instanceof Date", when=when) is True
    assert js("typeof __date_clock") == "undefined"


def test_evaluations_report_whether_they_read_the_clock() -> None:
    assert EVALUATOR.evaluate("1 + 1", "h").clock_read is False
    assert EVALUATOR.evaluate("timeRange(9, 17)", "h", now_ms=0).clock_read is True
    assert EVALUATOR.evaluate("new Date(5).getTime()", "h").clock_read is False


def test_math_random_is_deterministic_per_destination() -> None:
    script = PacScript(
        "function FindProxyForURL(u, h) { return String(Math.random()) + ' ' + Math.random(); }"
    )
    other = PacScript(
        "function FindProxyForURL(u, h) { return String(Math.random()) + ' ' + Math.random(); }"
    )
    first = script.find_proxy("tcp://a.example:443/", "a.example")
    assert first == script.find_proxy("tcp://a.example:443/", "a.example")
    assert first == other.find_proxy("tcp://a.example:443/", "a.example")  # every hop draws the same
    assert first != script.find_proxy("tcp://b.example:443/", "b.example")
    assert first is not None
    a, b = (float(x) for x in first.split())
    assert 0 <= a < 1 and 0 <= b < 1 and a != b


def test_alerts_are_captured_per_evaluation() -> None:
    script = PacScript(
        "function FindProxyForURL(url, host) {\n"
        "  alert('checking ' + host);\n"
        "  for (var i = 0; i < 100; i++) alert(i);\n"
        "  alert('never seen');\n"
        "  return 'DIRECT';\n"
        "}\n"
    )
    result = script.evaluate("tcp://a.example:1/", "a.example")
    assert result.value == "DIRECT"
    assert result.alerts[0] == "checking a.example"
    assert len(result.alerts) == 64  # the first 64; the rest are counted, not kept
    assert script.alerts == result.alerts
    assert script.evaluate("tcp://b.example:1/", "b.example").alerts[0] == "checking b.example"


# ---- against pacparser, where it is installed --------------------------------------------------------


@pytest.fixture(scope="module")
def pacparser() -> Iterator[Any]:
    module = pytest.importorskip("pacparser")
    module.init()
    module.enable_microsoft_extensions()
    # dnsResolve is overridden so pacparser never asks the real DNS (our sandbox has none).
    module.parse_pac_string(
        "function dnsResolve(h) { return null; }\n"
        "function FindProxyForURL(url, host) { return JSON.stringify(eval(url)); }\n"
    )
    yield module
    module.cleanup()


def reference(pacparser: Any, expr: str) -> Any:
    return json.loads(pacparser.find_proxy(expr, "client.example"))


labels = st.text(alphabet="abcxyz019-", min_size=1, max_size=6)
names = st.lists(labels, min_size=1, max_size=4).map(".".join)
globs = st.text(alphabet="abc.*?", max_size=8)
octets = st.integers(0, 255)
ipv4 = st.tuples(octets, octets, octets, octets).map(lambda t: ".".join(map(str, t)))
masks = st.integers(0, 32).map(
    lambda n: ".".join(str((((0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF) >> s) & 255) for s in (24, 16, 8, 0))
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.tuples(names, globs).map(lambda a: f"shExpMatch({json.dumps(a[0])}, {json.dumps(a[1])})"),
        st.tuples(names, names).map(lambda a: f"dnsDomainIs({json.dumps(a[0])}, {json.dumps('.' + a[1])})"),
        st.tuples(names, names).map(lambda a: f"localHostOrDomainIs({json.dumps(a[0])}, {json.dumps(a[1])})"),
        names.map(lambda a: f"isPlainHostName({json.dumps(a)})"),
        names.map(lambda a: f"dnsDomainLevels({json.dumps(a)})"),
        ipv4.map(lambda a: f"convert_addr({json.dumps(a)})"),
        st.tuples(ipv4, ipv4, masks).map(lambda a: "isInNet({}, {}, {})".format(*map(json.dumps, a))),
        # /0 is left out: pacparser's JavaScript isInNetEx shifts by 32 there (Chromium matches everything)
        st.tuples(ipv4, ipv4, st.integers(1, 32)).map(
            lambda a: f"isInNetEx({json.dumps(a[0])}, '{a[1]}/{a[2]}')"
        ),
    )
)
def test_common_builtins_agree_with_pacparser(pacparser: Any, expr: str) -> None:
    assert js(expr) == reference(pacparser, expr), expr
