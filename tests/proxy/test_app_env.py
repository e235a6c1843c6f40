"""The proxy variables a workload gets, including the destinations its policy surely sends to cluster."""

from __future__ import annotations

from cornus_core.proxy.settings import app_proxy_env, cluster_no_proxy
from cornus_core.spec import EgressSpec


def _rules(*pairs: tuple[str, str]) -> EgressSpec:
    return EgressSpec.model_validate({"rules": [{"pattern": p, "route": r} for p, r in pairs]})


def test_leading_cluster_rules_become_no_proxy_entries() -> None:
    spec = _rules(("*.svc.cluster.local", "cluster"), ("10.96.0.0/12", "cluster"), ("db", "cluster"),
                  ("10.0.0.1", "cluster"), ("*.corp.example", "client"), ("other.internal", "cluster"))
    assert cluster_no_proxy(spec.rules, spec.script) == [".svc.cluster.local", "10.96.0.0/12", "db", "10.0.0.1"]


def test_patterns_no_proxy_cannot_say_are_left_out() -> None:
    spec = _rules(("*.svc:8080", "cluster"), ("api-*.internal", "cluster"), ("[fd00::/8]", "cluster"))
    assert cluster_no_proxy(spec.rules, spec.script) == ["fd00::/8"]


def test_a_script_lists_nothing() -> None:
    assert cluster_no_proxy(_rules(("db", "cluster")).rules, "function FindProxyForURL(u, h) {}") == []


def test_app_env_points_at_the_caretaker_in_both_spellings() -> None:
    env = app_proxy_env(15002, [".svc.cluster.local"])
    assert env["HTTP_PROXY"] == env["http_proxy"] == "http://127.0.0.1:15002"
    assert env["ALL_PROXY"] == "socks5h://127.0.0.1:15002"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1,.svc.cluster.local"
