"""The route preview's computation and the PAC editor's starter script (no UI)."""

from __future__ import annotations

from cornus_core.policy import Destination, compile_policy
from cornus_core.spec import EgressSpec
from cornus_tui.screens.pac_editor import starter_script
from cornus_tui.widgets.preview import Probe, compute_preview, draft_source, error_text, source_dict

PAC = 'function FindProxyForURL(url, host) {\n  if (dnsDomainIs(host, ".corp.example")) return "CLIENT";\n  return "DIRECT";\n}\n'
PROBES = [
    Probe("wiki.corp.example:443", Destination("wiki.corp.example", None, 443)),
    Probe("pypi.org:443", Destination("pypi.org", None, 443), "sample"),
    Probe("10.1.2.3:5432", Destination(None, "10.1.2.3", 5432)),
]


def test_routes_under_both_policies_and_names_the_changes() -> None:
    active = {
        "default": "cluster",
        "rules": [{"pattern": "*.corp.example", "route": "client"}],
        "script": None,
    }
    draft = draft_source(active, PAC.replace('"DIRECT"', '"DENY"'))
    preview = compute_preview(draft, active, PROBES)
    assert preview.error is None and preview.draft_version is not None
    assert preview.active_version == compile_policy(active).version
    by_label = {row.probe.label: row for row in preview.rows}
    assert (by_label["wiki.corp.example:443"].active, by_label["wiki.corp.example:443"].draft) == (
        "client",
        "client",
    )
    assert by_label["wiki.corp.example:443"].change == ""
    assert by_label["pypi.org:443"].change == "would change: cluster -> deny"
    assert by_label["pypi.org:443"].reason == 'pac "DENY"'
    assert preview.changes == 2


def test_a_draft_that_does_not_compile_keeps_the_active_routes_and_says_where() -> None:
    active = {"default": "client", "rules": [], "script": None}
    preview = compute_preview(
        draft_source(active, "function FindProxyForURL(url, host) {\n  return 'x' +;\n}"), active, PROBES
    )
    assert preview.error is not None and preview.draft_version is None
    assert error_text(preview.error).startswith("line 2, column ")
    assert [row.active for row in preview.rows] == ["client"] * 3
    assert [row.draft for row in preview.rows] == [""] * 3 and preview.changes == 0


def test_no_active_policy_means_no_change_column() -> None:
    preview = compute_preview(draft_source(source_dict(None), PAC), None, PROBES)
    assert preview.active_version is None
    assert [row.active for row in preview.rows] == ["", "", ""]
    assert [row.draft for row in preview.rows] == ["client", "cluster", "cluster"]
    assert preview.changes == 0


def test_source_dict_reads_specs_mappings_and_nothing() -> None:
    spec = EgressSpec.model_validate({"default": "deny", "rules": [{"pattern": "*.x", "route": "client"}]})
    assert source_dict(spec) == {
        "default": "deny",
        "rules": [{"pattern": "*.x", "route": "client"}],
        "script": None,
    }
    assert source_dict({"script": PAC}) == {"default": None, "rules": [], "script": PAC}
    assert source_dict(None)["rules"] == []
    assert draft_source(source_dict(spec), "  ")["script"] is None  # a blank draft means the rules


def test_the_starter_script_routes_host_globs_like_the_rules_it_came_from() -> None:
    active = {
        "default": "gateway",
        "rules": [
            {"pattern": "*.corp.example", "route": "client"},
            {"pattern": "ads.*", "route": "deny"},
            {"pattern": "10.0.0.0/8", "route": "cluster"},
            {"pattern": "db.internal:5432", "route": "cluster"},
        ],
        "script": None,
    }
    script = starter_script(active)
    assert "// rule 10.0.0.0/8 -> cluster" in script and "// rule db.internal:5432 -> cluster" in script
    rules, pac = compile_policy(active), compile_policy(draft_source(active, script))
    for host in ("wiki.corp.example", "WIKI.Corp.Example", "ads.tracker.example", "pypi.org"):
        dest = Destination(host, None, 443)
        assert pac.route(dest).route == rules.route(dest).route, host
