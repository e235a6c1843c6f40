"""The lexical regex scan that sends regex-using PAC scripts to the isolated evaluator from the start."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cornus_core.policy._scan import uses_regex


@pytest.mark.parametrize(
    "source",
    [
        "if (/^db[0-9]+\\./.test(host)) return 'DIRECT';",
        "var re = new RegExp('^a+$');",
        "return host.match('a+') ? 'A' : 'B';",
        "return host.search('x') >= 0;",
        "for (const m of url.matchAll(/x/g)) {}",
        "return /x/.exec(host);",
        "x = (/x/);",
        "return [/a/, /b/];",
        "if (a) return /x/.test(h);",
        "var f = function () { return typeof /x/; };",
    ],
)
def test_regex_use_is_seen(source: str) -> None:
    assert uses_regex(source)


@pytest.mark.parametrize(
    "source",
    [
        "function FindProxyForURL(url, host) { return 'DIRECT'; }",
        "var half = total / 2; var third = (a + b) / 3; var x = arr[1] / arr[2];",
        "// RegExp is mentioned only in a comment: /(a+)+$/\nreturn 'DIRECT';",
        "/* new RegExp('x') */ return host.split('.').length / 2;",
        "return 'PROXY match:8080; search'.replace('a', 'b');",
        "return `template with /slashes/ and RegExp`;",
        "var ratio = 10 / 5 / 2;",
    ],
)
def test_plain_scripts_stay_in_process(source: str) -> None:
    assert not uses_regex(source)


@given(st.text())
def test_any_text_scans(source: str) -> None:
    assert uses_regex(source) in (True, False)
