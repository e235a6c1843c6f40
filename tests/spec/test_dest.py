"""Destination arguments of `cornus-tui route`."""

from __future__ import annotations

import pytest

from cornus_core.spec import SpecError, parse_dest


@pytest.mark.parametrize(
    ("text", "host", "ip", "port"),
    [
        ("example.com", "example.com", None, 443),
        ("example.com:80", "example.com", None, 80),
        ("Example.COM.:8443", "Example.COM.", None, 8443),
        ("localhost", "localhost", None, 443),
        ("10.1.2.3", None, "10.1.2.3", 443),
        ("10.1.2.3:5432", None, "10.1.2.3", 5432),
        ("[2001:db8::1]:80", None, "2001:db8::1", 80),
        ("[2001:DB8:0::1]", None, "2001:db8::1", 443),
        ("::1", None, "::1", 443),
        ("db.internal:5432@10.0.3.7", "db.internal", "10.0.3.7", 5432),
        ("db.internal@10.0.3.7", "db.internal", "10.0.3.7", 443),
        ("v6.internal:80@[2001:db8::2]", "v6.internal", "2001:db8::2", 80),
        ("v6.internal:80@2001:db8::2", "v6.internal", "2001:db8::2", 80),
        ("10.0.0.1:22@10.0.0.1", None, "10.0.0.1", 22),
        ("_svc._tcp.example", "_svc._tcp.example", None, 443),
    ],
)
def test_parse_dest(text: str, host: str | None, ip: str | None, port: int) -> None:
    dest = parse_dest(text)
    assert (dest.text, dest.host, dest.ip, dest.port) == (text, host, ip, port)
    assert dest.destination().port == port


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        (":443", "empty"),
        ("example.com:0", "port '0'"),
        ("example.com:65536", "port '65536'"),
        ("example.com:https", "port 'https'"),
        ("example.com:", "port ''"),
        ("[2001:db8::1", "unterminated"),
        ("[2001:db8::1]x", "after ']'"),
        ("[10.0.0.1]:80", "not an IPv6"),
        ("[example.com]:80", "not an IPv6"),
        ("2001:db8::zz", "not an IP address"),
        ("db@nowhere", "after '@'"),
        ("10.0.0.1@10.0.0.2", "disagree"),
        ("exa mple.com", "not a host name"),
        ("*.example.com", "not a host name"),
        ("-bad.example", "not a host name"),
    ],
)
def test_parse_dest_errors_name_the_argument(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_dest(text)
    assert info.value.source == f"destination {text!r}" or text in info.value.source
    assert message in info.value.message
