from __future__ import annotations

import pytest

from cornus_core.netguard import CLIENT_REFUSED, GATEWAY_REFUSED, AddressClass, classify, parse_ip, refusal


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("127.0.0.1", AddressClass.LOOPBACK),
        ("::1", AddressClass.LOOPBACK),
        ("::ffff:127.0.0.1", AddressClass.LOOPBACK),
        ("169.254.169.254", AddressClass.LINK_LOCAL),
        ("[fe80::1%eth0]", AddressClass.LINK_LOCAL),
        ("10.1.2.3", AddressClass.PRIVATE),
        ("172.31.0.1", AddressClass.PRIVATE),
        ("192.168.1.1", AddressClass.PRIVATE),
        ("100.64.0.1", AddressClass.PRIVATE),
        ("fd00::1", AddressClass.PRIVATE),
        ("0.0.0.0", AddressClass.UNSPECIFIED),
        ("224.0.0.1", AddressClass.MULTICAST),
        ("93.184.216.34", AddressClass.PUBLIC),
        ("2001:4860::8888", AddressClass.PUBLIC),
    ],
)
def test_classify(text: str, cls: AddressClass) -> None:
    ip = parse_ip(text)
    assert ip is not None
    assert classify(ip) is cls


def test_not_ip() -> None:
    assert parse_ip("example.com") is None
    assert parse_ip(None) is None


def test_terminus_rules() -> None:
    lan, meta, public = parse_ip("192.168.1.5"), parse_ip("169.254.169.254"), parse_ip("1.1.1.1")
    assert lan and meta and public
    assert refusal(lan, CLIENT_REFUSED) == "192.168.1.5 is a private address"
    assert refusal(lan, GATEWAY_REFUSED) is None
    assert refusal(meta, GATEWAY_REFUSED) is not None
    assert refusal(public, CLIENT_REFUSED) is None


def test_is_loopback_host() -> None:
    from cornus_core.netguard import is_loopback_host

    assert is_loopback_host("localhost") and is_loopback_host("127.0.0.2") and is_loopback_host("[::1]")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("example.com")
