"""The dns role's pure parts and the UDP rules compiled from a policy (no namespaces needed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from dnslib import AAAA, QTYPE, RR, A, DNSRecord
from hypothesis import given
from hypothesis import strategies as st

from caretaker.roles.dns import (
    NameMap,
    UpstreamError,
    parse_upstream,
    resolv_conf_upstreams,
    servfail_for,
    stand_in_reply,
    upstreams_from,
)
from cornus_core.proxy.transparent import capture_ruleset, udp_policy


def answer(name: str, *records: tuple[str, str, int]) -> bytes:
    reply = DNSRecord.question(name).reply()
    for kind, ip, ttl in records:
        rdata = A(ip) if kind == "A" else AAAA(ip)
        reply.add_answer(RR(name, getattr(QTYPE, kind), rdata=rdata, ttl=ttl))
    return bytes(reply.pack())


def test_answers_name_their_addresses_until_the_ttl_and_grace_pass() -> None:
    now = [100.0]
    names = NameMap(grace=5, clock=lambda: now[0])
    assert names.remember_answer(answer("Corp.Test.", ("A", "10.0.0.2", 10), ("AAAA", "fd00::2", 10))) == [
        ("10.0.0.2", "corp.test"), ("fd00::2", "corp.test")]
    assert names.name_for("10.0.0.2") == "corp.test" and names.name_for("::ffff:10.0.0.2") == "corp.test"
    now[0] = 116.0
    assert names.name_for("fd00::2") is None and len(names) == 1


def test_the_name_map_is_bounded() -> None:
    names = NameMap(size=2)
    for i in range(3):
        names.remember(f"10.0.0.{i}", f"n{i}", 60)
    assert names.name_for("10.0.0.0") is None and names.name_for("10.0.0.2") == "n2"


def test_servfail_answers_a_query_and_nothing_else() -> None:
    query = DNSRecord.question("x.test", "AAAA")
    reply = DNSRecord.parse(servfail_for(bytes(query.pack())) or b"")
    assert reply.header.id == query.header.id and reply.header.rcode == 2 and reply.header.qr == 1
    assert servfail_for(answer("x.test")) is None


@given(st.binary(max_size=600))
def test_any_bytes_record_nothing_or_answers(data: bytes) -> None:
    NameMap().remember_answer(data)
    result = servfail_for(data)
    assert result is None or isinstance(result, bytes)


def _query(name: str, kind: str = "A") -> bytes:
    return bytes(DNSRecord.question(name, kind).pack())


def _nxdomain(query: bytes) -> bytes:
    reply = DNSRecord.parse(query).reply()
    reply.header.rcode = 3
    return bytes(reply.pack())


def relayed(name: str) -> bool:
    return name.endswith(".vpn")


def test_a_relayed_name_the_cluster_cannot_resolve_gets_a_stable_stand_in() -> None:
    names = NameMap()
    query = _query("Git.VPN.")
    reply = DNSRecord.parse(stand_in_reply(query, _nxdomain(query), names, relayed) or b"")
    [record] = reply.rr
    assert reply.header.id == DNSRecord.parse(query).header.id and reply.header.rcode == 0
    assert str(record.rdata) == "198.18.0.1" and names.name_for("198.18.0.1") == "git.vpn"
    again = DNSRecord.parse(stand_in_reply(query, servfail_for(query), names, relayed) or b"")
    assert str(again.rr[0].rdata) == "198.18.0.1"  # stable while in use; SERVFAIL counts as unresolved
    assert NameMap.is_stand_in("198.18.0.1") and not NameMap.is_stand_in("10.0.0.1")
    # AAAA: an empty answer, so the app takes the IPv4 stand-in.
    aaaa = _query("git.vpn", "AAAA")
    empty = DNSRecord.parse(stand_in_reply(aaaa, _nxdomain(aaaa), names, relayed) or b"")
    assert empty.header.rcode == 0 and empty.rr == []


def test_the_cluster_answer_stands_for_resolvable_or_unrelayed_names() -> None:
    names = NameMap()
    resolvable = _query("git.vpn")
    assert stand_in_reply(resolvable, answer("git.vpn", ("A", "10.1.2.3", 60)), names, relayed) is None
    unrelayed = _query("nowhere.test")
    assert stand_in_reply(unrelayed, _nxdomain(unrelayed), names, relayed) is None
    mx = _query("git.vpn", "MX")
    assert stand_in_reply(mx, _nxdomain(mx), names, relayed) is None
    assert len(names) == 0 and names.name_for("198.18.0.1") is None


def test_stand_ins_are_recycled_least_recently_asked_first() -> None:
    names = NameMap(max_stand_ins=2)
    a, b = names.stand_in("a.vpn"), names.stand_in("b.vpn")
    assert names.stand_in("a.vpn") == a  # a is now the most recently asked
    c = names.stand_in("c.vpn")
    assert c == b and names.name_for(b) == "c.vpn" and names.name_for(a) == "a.vpn"


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_stand_in_replies_survive_any_bytes(query: bytes, upstream: bytes) -> None:
    result = stand_in_reply(query, upstream, NameMap(), lambda name: True)
    assert result is None or DNSRecord.parse(result).header.qr == 1


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.1", ("10.0.0.1", 53)), ("10.0.0.1:5353", ("10.0.0.1", 5353)),
    ("fd00::1", ("fd00::1", 53)), ("[fd00::1]:54", ("fd00::1", 54)), ("[fd00::1]", ("fd00::1", 53)),
])
def test_upstreams_parse(text: str, expected: tuple[str, int]) -> None:
    assert parse_upstream(text) == expected


@given(st.text(max_size=60))
def test_any_upstream_text_parses_or_says_what_is_wrong(text: str) -> None:
    try:
        parse_upstream(text)
    except UpstreamError as exc:
        assert repr(text) in str(exc)


def test_resolv_conf_leaves_out_loopback_resolvers() -> None:
    text = "# c\nnameserver 127.0.0.53\nnameserver 10.1.1.1 # x\nnameserver fe80::1%eth0\nsearch x\nnameserver bad\n"
    assert resolv_conf_upstreams(text) == [("10.1.1.1", 53), ("fe80::1", 53)]


def test_a_systemd_resolved_stub_leads_to_the_real_resolvers(tmp_path: Path) -> None:
    stub, real = tmp_path / "resolv.conf", tmp_path / "resolved.conf"
    stub.write_text("nameserver 127.0.0.53\noptions edns0\n")
    real.write_text("nameserver 192.0.2.53\nnameserver 2001:db8::53\n")
    assert upstreams_from([], (stub, real)) == [("192.0.2.53", 53), ("2001:db8::53", 53)]
    assert upstreams_from([], (real, stub)) == [("192.0.2.53", 53), ("2001:db8::53", 53)]
    assert upstreams_from([], (stub, tmp_path / "absent")) == []
    assert upstreams_from(["10.0.0.1:5353"], (real,)) == [("10.0.0.1", 5353)]  # configured ones win


def rules(*pairs: tuple[str, str]) -> list[SimpleNamespace]:
    return [SimpleNamespace(pattern=p, route=r) for p, r in pairs]


def test_udp_policy_follows_rule_order_and_the_default() -> None:
    compiled = udp_policy(rules(("10.0.0.5", "deny"), ("10.0.0.0/8", "cluster"), ("192.168.0.0/16", "cluster"),
                                ("[fd00::1]:53", "cluster"), ("*:5353", "client")), "deny", None)
    assert compiled == ["ip daddr { 10.0.0.5 } drop", "ip daddr { 10.0.0.0/8, 192.168.0.0/16 } accept",
                        "ip6 daddr fd00::1 udp dport 53 accept", "udp dport 5353 drop", "drop"]
    assert udp_policy([], None, None) == ["accept"]  # the default route is cluster


def test_udp_policy_stops_at_names_and_scripts() -> None:
    assert udp_policy(rules(("10.0.0.0/8", "cluster"), ("*.corp", "deny"), ("10.1.0.0/16", "cluster")),
                      "cluster", None) == ["ip daddr { 10.0.0.0/8 } accept", "drop"]
    assert udp_policy(rules(("10.0.0.0/8", "cluster")), "cluster", "function FindProxyForURL(){}") == ["drop"]


def test_capture_ruleset_sends_dns_to_the_resolver_before_tcp_capture() -> None:
    text = capture_ruleset(15002, exempt_mark=7, dns_port=15053, udp=["drop"])
    assert text.index("udp dport 53 redirect to :15053") < text.index("meta l4proto tcp redirect to :15002")
    assert "tcp dport 53 redirect to :15053" in text and "chain udp_output" in text
    assert "udp_output" not in capture_ruleset(15002, exempt_mark=7)
