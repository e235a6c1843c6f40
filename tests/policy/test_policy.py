"""compile_policy and Policy.route: rules, default, scripts, errors, versions and the decision cache."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.policy import (
    Decision,
    Destination,
    EgressPolicySource,
    PacError,
    Policy,
    PolicyError,
    Route,
    compile_policy,
)


@dataclass(frozen=True)
class RuleSpec:
    pattern: str
    route: str


@dataclass(frozen=True)
class EgressSpec:
    default: str | None = None
    rules: list[RuleSpec] = field(default_factory=list)
    script: str | None = None


def d(host: str | None, ip: str | None = None, port: int = 443, **extra: str) -> Destination:
    return Destination(host, ip, port, **extra)


CORPORATE = EgressSpec(
    default="cluster",
    rules=[
        RuleSpec("*.corp.example", "client"),
        RuleSpec("10.0.0.0/8:22", "deny"),
        RuleSpec("10.0.0.0/8", "gateway"),
        RuleSpec("*:25", "deny"),
        RuleSpec("[2001:db8::/32]", "client"),
        RuleSpec("*.corp.example", "deny"),  # never reached: first match wins
    ],
)


@pytest.mark.parametrize(
    ("destination", "route", "reason"),
    [
        (d("db.corp.example"), Route.CLIENT, "rule 0 '*.corp.example'"),
        (d(None, "10.1.2.3", 22), Route.DENY, "rule 1 '10.0.0.0/8:22'"),
        (d("build.internal", "10.1.2.3"), Route.GATEWAY, "rule 2 '10.0.0.0/8'"),
        (d("mail.example", None, 25), Route.DENY, "rule 3 '*:25'"),
        (d(None, "2001:db8::5"), Route.CLIENT, "rule 4 '[2001:db8::/32]'"),
        (d("example.com", "192.0.2.1"), Route.CLUSTER, "default"),
    ],
)
def test_rules_first_match_wins(destination: Destination, route: Route, reason: str) -> None:
    policy = compile_policy(CORPORATE)
    decision = policy.route(destination)
    assert (decision.route, decision.reason, decision.version) == (route, reason, policy.version)


def test_a_mapping_and_an_object_compile_to_the_same_policy() -> None:
    as_dict = {
        "default": "cluster",
        "rules": [{"pattern": rule.pattern, "route": rule.route} for rule in CORPORATE.rules],
        "script": None,
    }
    assert compile_policy(as_dict).version == compile_policy(CORPORATE).version
    source: EgressPolicySource = CORPORATE  # the dataclass satisfies the protocol
    assert compile_policy(source).default is Route.CLUSTER


def test_the_default_route_is_cluster_unless_set() -> None:
    assert compile_policy({}).route(d("anything.example")).route is Route.CLUSTER
    assert compile_policy({"default": None, "rules": None}).default is Route.CLUSTER
    assert compile_policy({"default": "DENY"}).route(d("x")).route is Route.DENY
    assert compile_policy(EgressSpec(default="client")).route(d("x")) == Decision(
        Route.CLIENT, "default", compile_policy(EgressSpec(default="client")).version
    )


@pytest.mark.parametrize(
    ("spec", "source", "fragment"),
    [
        ({"default": "relay"}, "default", "unknown route 'relay'"),
        ({"default": 3}, "default", "must be text"),
        ({"rules": "x=client"}, "rules", "must be a list"),
        (
            {"rules": [{"pattern": "a", "route": "client"}, {"pattern": "", "route": "client"}]},
            "rules[1]",
            "empty",
        ),
        ({"rules": [{"pattern": "*:99999", "route": "client"}]}, "rules[0]", "must be 1..65535"),
        ({"rules": [{"pattern": "10.0.0.0/40", "route": "client"}]}, "rules[0]", "bad CIDR"),
        ({"rules": [{"pattern": "[::1", "route": "client"}]}, "rules[0]", "unterminated '['"),
        ({"rules": [{"pattern": "a[b", "route": "client"}]}, "rules[0]", "bad glob"),
        ({"rules": [{"pattern": "a.example", "route": "tunnel"}]}, "rules[0]", "unknown route 'tunnel'"),
        ({"rules": [{"route": "client"}]}, "rules[0]", "needs a pattern"),
        ({"script": 42}, "script", "must be text"),
        ({"script": "function FindProxyForURL(u, h) {\n return 'a' +;\n}"}, "script", "syntax error"),
        ({"script": "var nothing = 1;"}, "script", "no function FindProxyForURL"),
        # a script supersedes the rules, but the rules must still compile
        (
            {"rules": [{"pattern": "x:0", "route": "client"}], "script": "function FindProxyForURL(){}"},
            "rules[0]",
            "must be 1..65535",
        ),
    ],
)
def test_compile_errors_name_their_source(spec: dict[str, object], source: str, fragment: str) -> None:
    with pytest.raises(PolicyError) as caught:
        compile_policy(spec)
    assert caught.value.source == source
    assert fragment in str(caught.value)
    assert str(caught.value).startswith(source)


def test_a_rule_error_carries_index_and_pattern() -> None:
    with pytest.raises(PolicyError) as caught:
        compile_policy(
            {"rules": [{"pattern": "ok.example", "route": "client"}, {"pattern": "*:0", "route": "deny"}]}
        )
    assert (caught.value.rule_index, caught.value.pattern) == (1, "*:0")
    assert str(caught.value) == "rules[1]: pattern '*:0': bad port '0': must be 1..65535"


def test_a_script_error_carries_line_column_and_the_pac_error() -> None:
    with pytest.raises(PolicyError) as caught:
        compile_policy({"script": "function FindProxyForURL(u, h) {\n  return 'a' +;\n}"})
    assert (caught.value.line, caught.value.column) == (2, 15)
    assert isinstance(caught.value.__cause__, PacError)


SCRIPTED = """
function FindProxyForURL(url, host) {
  alert(url);
  if (host === "slow.example") for (;;) {}
  if (host === "broken.example") return undefinedVariable;
  if (dnsDomainIs(host, ".corp.example")) return "PROXY client";
  if (isInNet(host, "10.0.0.0", "255.0.0.0")) return "PROXY gateway; DIRECT";
  if (host === "proxy.example") return "PROXY proxy.corp.example:3128";
  if (host === "blocked.example") return "BLOCK";
  if (host === "nothing.example") return null;
  return "DIRECT";
}
"""


@pytest.mark.parametrize(
    ("destination", "route", "reason"),
    [
        (d("a.corp.example"), Route.CLIENT, 'pac "PROXY client"'),
        (d("build", "10.9.9.9"), Route.GATEWAY, 'pac "PROXY gateway; DIRECT"'),
        (d("proxy.example"), Route.CLIENT, 'pac "PROXY proxy.corp.example:3128"'),
        (d("blocked.example"), Route.DENY, 'pac "BLOCK"'),
        (d("nothing.example"), Route.DENY, "pac null"),  # null: the default, here deny
        (d("example.com"), Route.CLUSTER, 'pac "DIRECT"'),
        (d("broken.example"), Route.DENY, "pac error: exception"),
        (d("slow.example"), Route.DENY, "pac error: timeout"),
    ],
)
def test_a_script_supersedes_the_rules(destination: Destination, route: Route, reason: str) -> None:
    policy = compile_policy(
        {"default": "deny", "rules": [{"pattern": "*", "route": "client"}], "script": SCRIPTED}
    )
    decision = policy.route(destination)
    assert (decision.route, decision.reason) == (route, reason)
    assert decision.alerts == (destination.pac_url(),)


def test_the_pac_url_is_the_better_url_when_known_and_cut_to_its_origin_when_huge() -> None:
    policy = compile_policy({"script": SCRIPTED})
    assert policy.route(d("e.example", port=443, url="https://e.example/")).alerts == ("https://e.example/",)
    huge = "http://e.example:8080/" + "a" * 10000
    assert policy.route(d("e.example", port=8080, url=huge)).alerts == ("http://e.example:8080/",)


@pytest.mark.parametrize(
    "destination",
    [d("x", port=0), d("x", port=70000), d("x", ip="not-an-ip"), d("bad host"), d("nul\0.example")],
)
@pytest.mark.parametrize("spec", [CORPORATE, {"script": SCRIPTED}])
def test_a_malformed_destination_is_denied(destination: Destination, spec: object) -> None:
    decision = compile_policy(spec).route(destination)  # type: ignore[arg-type]
    assert decision.route is Route.DENY
    assert decision.reason.startswith("invalid destination")


def test_could_route_to_client() -> None:
    assert not compile_policy({}).could_route_to_client()
    assert not compile_policy({"rules": [{"pattern": "*", "route": "gateway"}]}).could_route_to_client()
    assert compile_policy({"default": "client"}).could_route_to_client()
    assert compile_policy({"rules": [{"pattern": "a", "route": "CLIENT"}]}).could_route_to_client()
    assert compile_policy(
        {"script": "function FindProxyForURL() { return 'DIRECT'; }"}
    ).could_route_to_client()


def test_the_version_names_the_normalised_spec() -> None:
    base = compile_policy(CORPORATE).version
    assert len(base) == 12 and all(c in "0123456789abcdef" for c in base)
    assert compile_policy(CORPORATE).version == base
    assert (
        compile_policy(EgressSpec(default=None, rules=CORPORATE.rules)).version == base
    )  # None means cluster
    assert compile_policy(EgressSpec(default="deny", rules=CORPORATE.rules)).version != base
    assert compile_policy(EgressSpec(rules=CORPORATE.rules[:-1])).version != base
    reordered = [CORPORATE.rules[1], CORPORATE.rules[0], *CORPORATE.rules[2:]]
    assert compile_policy(EgressSpec(rules=reordered)).version != base
    assert (
        compile_policy(EgressSpec(rules=CORPORATE.rules, script="function FindProxyForURL(){}")).version
        != base
    )


# ---- the decision cache --------------------------------------------------------------------------


def test_decisions_are_cached_per_destination() -> None:
    policy = compile_policy({"script": SCRIPTED})
    first = policy.route(d("a.corp.example"))
    assert policy.route(d("a.corp.example")) is first
    assert policy.route(d("a.corp.example", port=8443)) is not first
    assert policy.route(d("a.corp.example", url="https://a.corp.example/")) is not first


def test_rules_ignore_the_url_so_their_cache_does_too() -> None:
    policy = compile_policy(CORPORATE)
    first = policy.route(d("a.corp.example"))
    assert policy.route(d("a.corp.example", url="https://a.corp.example/x")) is first


def test_the_cache_is_bounded() -> None:
    policy = compile_policy(CORPORATE, cache_size=2)
    first = policy.route(d("a.example"))
    policy.route(d("b.example"))
    assert policy.route(d("a.example")) is first
    policy.route(d("c.example"))
    policy.route(d("d.example"))
    assert policy.route(d("a.example")) is not first
    assert policy.route(d("a.example")) == first


def test_timeouts_are_not_cached() -> None:
    policy = compile_policy({"script": SCRIPTED})
    first = policy.route(d("slow.example"))
    assert first.reason == "pac error: timeout"
    assert policy.route(d("slow.example")) is not first


TIMED = "function FindProxyForURL(url, host) { return timeRange(9, 17) ? 'PROXY client' : 'DIRECT'; }"
NINE_AM = 1704099600000  # 2024-01-01T09:00:00Z
NIGHT = NINE_AM + 12 * 3600 * 1000


def test_a_decision_that_read_the_clock_holds_only_for_that_time() -> None:
    policy = compile_policy({"script": TIMED})
    assert policy.route(d("a.example"), now_ms=NINE_AM).route is Route.CLIENT
    assert policy.route(d("a.example"), now_ms=NIGHT).route is Route.CLUSTER
    assert policy.route(d("a.example"), now_ms=NINE_AM).route is Route.CLIENT
    pinned = compile_policy({"script": TIMED}, now_ms=NIGHT)
    assert pinned.route(d("a.example")).route is Route.CLUSTER
    assert pinned.route(d("a.example")) is pinned.route(d("a.example"))
    assert pinned.route(d("a.example"), now_ms=NINE_AM).route is Route.CLIENT  # the connection's stamp wins


def test_a_new_version_never_sees_old_decisions() -> None:
    old = compile_policy({"rules": [{"pattern": "*.example", "route": "client"}]})
    new = compile_policy({"rules": [{"pattern": "*.example", "route": "deny"}]})
    before = old.route(d("a.example"))
    after = new.route(d("a.example"))
    assert (before.route, before.version) == (Route.CLIENT, old.version)
    assert (after.route, after.version) == (Route.DENY, new.version)
    assert old.version != new.version
    assert old.route(d("a.example")) is before


def test_threads_route_together() -> None:
    policy = compile_policy({"default": "deny", "rules": CORPORATE.rules, "script": SCRIPTED}, cache_size=64)
    hosts = [f"h{i}.corp.example" if i % 2 else f"h{i}.example" for i in range(400)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        routes = list(pool.map(lambda host: policy.route(d(host)).route, hosts))
    assert routes == [Route.CLIENT if i % 2 else Route.CLUSTER for i in range(400)]


# ---- fuzzing -------------------------------------------------------------------------------------

destinations = st.builds(
    Destination,
    st.one_of(st.none(), st.text(max_size=40), st.from_regex(r"[a-z0-9.\-]{1,30}", fullmatch=True)),
    st.one_of(st.none(), st.ip_addresses().map(str), st.text(max_size=12)),
    st.integers(min_value=-5, max_value=70000),
    st.sampled_from(["tcp", "udp", ""]),
    st.one_of(st.none(), st.text(max_size=60)),
)

RULES_POLICY = compile_policy(CORPORATE)
SCRIPT_POLICY = compile_policy({"script": SCRIPTED.replace("for (;;) {}", "return 'DENY';")})


@settings(max_examples=300, deadline=None)
@given(destinations, st.one_of(st.none(), st.integers(min_value=-(2**50), max_value=2**50)))
def test_any_destination_gets_a_decision(destination: Destination, now_ms: int | None) -> None:
    for policy in (RULES_POLICY, SCRIPT_POLICY):
        decision = policy.route(destination, now_ms=now_ms)
        assert isinstance(decision, Decision)
        assert decision.route in set(Route)
        assert decision.version == policy.version


def test_policy_repr() -> None:
    assert repr(compile_policy(CORPORATE)).startswith("<Policy ")
    assert isinstance(compile_policy({}), Policy)


def test_relays_name_asks_ports_80_443_and_those_rules_name() -> None:
    policy = compile_policy(EgressSpec(default="cluster", rules=[
        RuleSpec("10.0.0.0/8", "cluster"),  # an address rule cannot match a name without an address
        RuleSpec("*.corp.example", "client"),
        RuleSpec("db.vpn:5432", "gateway"),
        RuleSpec("*:25", "deny"),
    ]))
    assert policy.relays_name("git.corp.example") and policy.relays_name("db.vpn")
    assert not policy.relays_name("svc.cluster.local") and not policy.relays_name("mail.example")
    everything = compile_policy(EgressSpec(default="client"))
    assert everything.relays_name("anything.example")
    pac = compile_policy(EgressSpec(script='function FindProxyForURL(url, host) {'
                                           ' return url.substring(0, 6) == "https:" ? "PROXY p:1" : "DIRECT"; }'))
    assert pac.relays_name("secure.example")  # relayed for https on 443
