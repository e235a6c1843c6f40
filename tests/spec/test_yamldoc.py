"""The YAML loader keeps positions, rejects what YAML silently collapses, and bounds alias expansion."""

from __future__ import annotations

import pytest

from cornus_core.spec import SpecError
from cornus_core.spec.yamldoc import MAX_EXPANDED_NODES, load_yaml


def test_marks_point_at_values_and_keys() -> None:
    doc = load_yaml(
        "egress:\n  rules:\n    - pattern: a\n      route: client\n    - {pattern: b, route: deny}\n",
        "s.yaml",
    )
    assert doc.data == {
        "egress": {"rules": [{"pattern": "a", "route": "client"}, {"pattern": "b", "route": "deny"}]}
    }
    assert doc.where(("egress", "rules", 0, "route")) == "s.yaml:4:14"
    assert doc.where(("egress", "rules", 1, "route")) == "s.yaml:5:27"
    assert doc.where(("egress", "rules", 0, "route"), key=True) == "s.yaml:4:7"
    # A path that was not written falls back to its closest written ancestor.
    assert doc.where(("egress", "rules", 1, "missing")) == "s.yaml:5:7"
    assert doc.where(("nothing", "here")) == "s.yaml:1:1"


def test_empty_document_is_none() -> None:
    assert load_yaml("", "e.yaml").data is None
    assert load_yaml("# only a comment\n", "e.yaml").data is None


def test_syntax_error_names_line_and_column() -> None:
    with pytest.raises(SpecError) as info:
        load_yaml("egress:\n  mode: proxy\n  rules: [a, b\n", "bad.yaml")
    assert info.value.source.startswith("bad.yaml:4:")
    assert "not valid YAML" in info.value.message


def test_duplicate_keys_are_rejected_at_the_second_one() -> None:
    with pytest.raises(SpecError) as info:
        load_yaml("egress:\n  mode: proxy\n  mode: env\n", "dup.yaml")
    assert info.value.source == "dup.yaml:3:3"
    assert "duplicate key 'mode'" in info.value.message
    assert "line 2" in info.value.message


def test_merge_keys_work_and_own_keys_win() -> None:
    text = "base: &b {mode: proxy, default: deny}\negress:\n  <<: *b\n  default: client\n"
    doc = load_yaml(text, "m.yaml")
    assert doc.data == {
        "base": {"mode": "proxy", "default": "deny"},
        "egress": {"mode": "proxy", "default": "client"},
    }
    assert doc.where(("egress", "default")) == "m.yaml:4:12"


def test_recursive_alias_is_rejected() -> None:
    with pytest.raises(SpecError, match="recursive"):
        load_yaml("a: &x [1, *x]\n", "r.yaml")


def test_alias_bomb_is_rejected() -> None:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"l{level}: &l{level} [{refs}]")
    with pytest.raises(SpecError, match=f"more than {MAX_EXPANDED_NODES}"):
        load_yaml("\n".join(lines) + "\n", "bomb.yaml")


def test_bad_timestamp_and_bad_characters_are_spec_errors() -> None:
    with pytest.raises(SpecError):
        load_yaml("when: 2024-13-45\n", "t.yaml")
    with pytest.raises(SpecError):
        load_yaml("a: \x07\n", "c.yaml")


def test_several_documents_are_rejected() -> None:
    with pytest.raises(SpecError) as info:
        load_yaml("a: 1\n---\nb: 2\n", "two.yaml")
    assert info.value.source.startswith("two.yaml:")


def test_deep_nesting_is_a_spec_error() -> None:
    with pytest.raises(SpecError):
        load_yaml("[" * 5000 + "]" * 5000, "deep.yaml")
