"""Routes, PAC return mapping (SPEC 1.4 table) and the PAC arguments a destination gives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cornus_core.policy import DEFAULT_ROUTE, Destination, Route, pac_return_to_route


def test_route_names_and_default() -> None:
    assert [route.value for route in Route] == ["client", "gateway", "cluster", "deny"]
    assert DEFAULT_ROUTE is Route.CLUSTER
    assert Route.parse(" Gateway ") is Route.GATEWAY
    with pytest.raises(ValueError, match="unknown route 'relay'"):
        Route.parse("relay")


MAPPING = [
    # every row of the table, with case and whitespace variations
    ("DIRECT", Route.CLUSTER),
    ("direct", Route.CLUSTER),
    ("  DIRECT  ", Route.CLUSTER),
    ("DENY", Route.DENY),
    ("BLOCK", Route.DENY),
    ("block", Route.DENY),
    ("CLIENT", Route.CLIENT),
    ("CLUSTER", Route.CLUSTER),
    ("GATEWAY", Route.GATEWAY),
    ("gateway", Route.GATEWAY),
    ("PROXY client", Route.CLIENT),
    ("PROXY gateway", Route.GATEWAY),
    ("PROXY cluster", Route.CLUSTER),
    ("HTTP client", Route.CLIENT),
    ("HTTPS gateway", Route.GATEWAY),
    ("SOCKS cluster", Route.CLUSTER),
    ("SOCKS4 client", Route.CLIENT),
    ("SOCKS5 gateway", Route.GATEWAY),
    ("proxy CLIENT", Route.CLIENT),
    ("PROXY proxy.corp.example:8080", Route.CLIENT),  # a real proxy: the caller applies it
    ("PROXY 10.0.0.1:3128", Route.CLIENT),
    ("PROXY [2001:db8::1]:3128", Route.CLIENT),
    ("SOCKS5 socks.corp:1080", Route.CLIENT),
    ("HTTPS gateway:443", Route.CLIENT),  # "gateway:443" is a host:port, a real proxy
    # only the first directive counts
    ("PROXY gateway; DIRECT", Route.GATEWAY),
    ("DIRECT; PROXY client", Route.CLUSTER),
    ("DENY;", Route.DENY),
    # empty, null, undefined and unrecognised: the default
    ("", None),
    ("   ", None),
    (";DIRECT", None),
    ("NOPE", None),
    ("PROXY", None),
    ("PROXY a b", None),
    ("DIRECT now", None),
    ("FTP client", None),
    (None, None),
]


@pytest.mark.parametrize(("ret", "route"), MAPPING)
@pytest.mark.parametrize("default", [Route.CLUSTER, Route.DENY])
def test_pac_return_mapping(ret: str | None, route: Route | None, default: Route) -> None:
    assert pac_return_to_route(ret, default) is (route if route is not None else default)


@given(st.one_of(st.none(), st.text()), st.sampled_from(list(Route)))
def test_any_return_maps_to_a_route(ret: str | None, default: Route) -> None:
    assert pac_return_to_route(ret, default) in set(Route)


PAC_ARGUMENTS = [
    (Destination("example.com", None, 443), "tcp://example.com:443/", "example.com"),
    (Destination("example.com", "192.0.2.1", 8080), "tcp://example.com:8080/", "example.com"),
    (Destination(None, "192.0.2.1", 22), "tcp://192.0.2.1:22/", "192.0.2.1"),
    (Destination(None, "2001:db8::1", 443), "tcp://[2001:db8::1]:443/", "2001:db8::1"),
    (Destination(None, "10.0.0.53", 53, "udp"), "udp://10.0.0.53:53/", "10.0.0.53"),
    (
        Destination("example.com", None, 443, url="https://example.com/"),
        "https://example.com/",
        "example.com",
    ),
    (
        Destination("example.com", None, 80, url="http://example.com/a?b=c"),
        "http://example.com/a?b=c",
        "example.com",
    ),
]


@pytest.mark.parametrize(("destination", "url", "host"), PAC_ARGUMENTS)
def test_pac_arguments(destination: Destination, url: str, host: str) -> None:
    assert destination.pac_url() == url
    assert destination.pac_host() == host
