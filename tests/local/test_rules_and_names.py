"""The pieces that need no namespace: capture rule text, socket marks, pod names and address blocks."""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cornus_core.proxy.transparent import (
    CaptureError,
    capture_ruleset,
    release_ruleset,
    set_socket_mark,
    socket_mark_from_env,
)
from server.backends.local.addresses import AddressError, AddressPlan
from server.backends.local.naming import NamingError, PodName, parse_pod_name, pod_name


def test_capture_ruleset_exempts_before_it_redirects() -> None:
    text = capture_ruleset(15002, exempt_uid=999, exempt_mark=0x2A, table="cap")
    assert text == (
        "table inet cap\n"
        "delete table inet cap\n"
        "table inet cap {\n"
        "\tchain output {\n"
        "\t\ttype nat hook output priority -100; policy accept;\n"
        "\t\tmeta skuid 999 return\n"
        "\t\tmeta mark 0x0000002a return\n"
        '\t\toifname "lo" return\n'
        "\t\tip daddr 169.254.0.0/16 return\n"
        "\t\tip6 daddr fe80::/10 return\n"
        "\t\tmeta l4proto tcp redirect to :15002\n"
        "\t}\n"
        "}\n"
    )
    assert "skuid" not in capture_ruleset(1, exempt_mark=1)
    assert "meta mark" not in capture_ruleset(65535, exempt_uid=0)
    assert release_ruleset("cap") == "table inet cap\ndelete table inet cap\n"


@pytest.mark.parametrize(
    ("kwargs", "complaint"),
    [
        ({"port": 0, "exempt_mark": 1}, "capture port 0 is outside 1..65535"),
        ({"port": 65536, "exempt_mark": 1}, "capture port 65536"),
        ({"port": 15002}, "needs an exempt uid or socket mark"),
        ({"port": 15002, "exempt_mark": 0}, "exempt mark 0 must be within 1..0xffffffff"),
        ({"port": 15002, "exempt_mark": 2**32}, "exempt mark 4294967296"),
        ({"port": 15002, "exempt_uid": -1}, "exempt uid -1 is not a valid uid"),
        ({"port": 15002, "exempt_uid": 0, "table": "bad-name"}, "nft table name 'bad-name'"),
        ({"port": 15002, "exempt_uid": 0, "table": "x; flush ruleset"}, "nft table name"),
    ],
)
def test_capture_ruleset_refuses_what_would_break_or_loop(
    kwargs: dict[str, int | str], complaint: str
) -> None:
    port = int(kwargs.pop("port"))
    with pytest.raises(CaptureError, match=complaint.replace(".", r"\.")):
        capture_ruleset(port, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "mark"), [("", None), ("  ", None), ("42", 42), ("0x2a", 42), (" 0xFFFFFFFF ", 2**32 - 1)]
)
def test_socket_mark_from_env(text: str, mark: int | None) -> None:
    assert socket_mark_from_env({"CORNUS_SOCKET_MARK": text}) == mark
    assert socket_mark_from_env({}) is None


@given(st.text())
def test_socket_mark_from_env_takes_any_text(text: str) -> None:
    try:
        mark = socket_mark_from_env({"CORNUS_SOCKET_MARK": text})
    except CaptureError as exc:
        assert "CORNUS_SOCKET_MARK=" in str(exc)
    else:
        assert mark is None or 0 < mark < 2**32


def test_set_socket_mark() -> None:
    with socket.socket() as sock:
        with pytest.raises(CaptureError, match="socket mark 0 must be within"):
            set_socket_mark(sock, 0)
        if os.geteuid() == 0:
            set_socket_mark(sock, 0x2A)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_MARK) == 0x2A
        else:
            with pytest.raises(CaptureError, match="needs CAP_NET_ADMIN"):
                set_socket_mark(sock, 0x2A)


def test_pod_names_fit_interface_names_and_parse_back() -> None:
    name = pod_name("cn", "0a1b2c", 7)
    assert (str(name), name.owner, name.nft_table) == ("cn0a1b2c-7", "cn0a1b2c", "cn0a1b2c_7")
    assert len(str(pod_name("abcd", "0a1b2c", 9999))) == 15
    with pytest.raises(NamingError, match="longer than 15"):
        pod_name("abcd", "0a1b2c", 10000)
    for bad_prefix in ("", "Cn", "1c", "abcde", "c-"):
        with pytest.raises(NamingError, match="prefix"):
            pod_name(bad_prefix, "0a1b2c", 0)
    with pytest.raises(NamingError, match="instance id 'XYZ'"):
        pod_name("cn", "XYZ", 0)
    assert parse_pod_name("cn0a1b2c_7", "cn") == name
    for other in ("cn0a1b2c", "cx0a1b2c-7", "cn0a1b2-7", "cn0a1b2c-7x", "eth0", "cncn0a1b2c-7"):
        assert parse_pod_name(other, "cn") is None


@given(
    st.from_regex(r"[a-z][a-z0-9]{0,3}", fullmatch=True),
    st.from_regex(r"[0-9a-f]{6}", fullmatch=True),
    st.integers(0, 99999),
)
def test_pod_names_round_trip(prefix: str, instance: str, number: int) -> None:
    try:
        name = pod_name(prefix, instance, number)
    except NamingError:
        assert len(prefix) + 7 + len(str(number)) > 15
        return
    assert parse_pod_name(str(name), prefix) == name
    assert parse_pod_name(name.nft_table, prefix) == PodName(prefix, instance, number)


def test_address_blocks_skip_what_the_host_already_has() -> None:
    plan = AddressPlan("10.213.0.0/28", "fd00:1::/120")
    first = plan.allocate([])
    assert (first.block, first.host_ip, first.pod_ip) == (0, "10.213.0.1", "10.213.0.2")
    assert (first.host_ip6, first.pod_ip6) == ("fd00:1::1", "fd00:1::2")
    # Block 1 is in use on the host (another run, say), so the next pod gets block 2.
    second = plan.allocate(["127.0.0.1", "10.213.0.6", "fe80::1"])
    assert (second.block, second.host_ip, second.pod_ip6) == (2, "10.213.0.9", "fd00:1::a")
    plan.release(first.block)
    assert plan.allocate([]).block == 0
    assert plan.allocate([]).block == 1
    assert plan.allocate([]).block == 3
    with pytest.raises(AddressError, match=r"no free /30 left in the pod range 10\.213\.0\.0/28"):
        plan.allocate([])
    assert AddressPlan("10.0.0.0/30", None).allocate([]).pod_ip6 is None


@pytest.mark.parametrize(
    ("v4", "v6", "complaint"),
    [
        ("10.0.0.1/16", None, "IPv4 pod range '10.0.0.1/16' is not a network"),
        ("fd00::/64", None, "IPv4 pod range 'fd00::/64' is not an IPv4 network"),
        ("10.0.0.0/31", None, "smaller than one /30"),
        ("10.0.0.0/16", "10.1.0.0/16", "IPv6 pod range '10.1.0.0/16' is not an IPv6 network"),
        ("10.0.0.0/16", "fd00::/127", "smaller than one /126"),
    ],
)
def test_address_ranges_are_checked(v4: str, v6: str | None, complaint: str) -> None:
    with pytest.raises(AddressError, match=complaint.replace(".", r"\.")):
        AddressPlan(v4, v6)
