"""Command-line flags: parsing, precedence over the file, and errors that name the flag."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cornus_core.spec import (
    EgressFlags,
    SpecError,
    empty_spec,
    fold_egress_flags,
    fold_local_mounts,
    load_spec_text,
    parse_default_flag,
    parse_local_mount,
    parse_mode_flag,
    parse_route_flag,
)

FILE = """\
egress:
  mode: proxy
  default: gateway
  rules:
    - {pattern: "*.corp.example", route: client}
    - {pattern: "10.0.0.0/8", route: cluster}
  script: |
    function FindProxyForURL(url, host) { return "DIRECT"; }
"""


def test_route_flag() -> None:
    rule = parse_route_flag("*.corp.example=CLIENT")
    assert (rule.pattern, rule.route) == ("*.corp.example", "client")
    rule = parse_route_flag("[2001:db8::/32]:443=deny")
    assert (rule.pattern, rule.route) == ("[2001:db8::/32]:443", "deny")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("*.corp.example", "expected PATTERN=ROUTE"),
        ("*.corp.example=", "unknown route ''"),
        ("*.corp.example=clinet", "unknown route 'clinet'"),
        ("=client", "bad pattern ''"),
        ("a.example:0=client", "bad pattern 'a.example:0'"),
    ],
)
def test_route_flag_errors_name_the_flag(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_route_flag(text)
    assert info.value.source.startswith("--egress-route ")
    assert text in info.value.source
    assert message in info.value.message


def test_mode_and_default_flags() -> None:
    assert parse_mode_flag("Proxy") == "proxy"
    assert parse_default_flag("DENY") == "deny"
    with pytest.raises(SpecError) as info:
        parse_mode_flag("socks")
    assert info.value.source == "--egress socks"
    assert "env, proxy, transparent" in info.value.message
    with pytest.raises(SpecError) as info:
        parse_default_flag("direct")
    assert info.value.source == "--egress-default direct"


def test_cli_routes_go_first_in_flag_order_and_the_rest_replaces(tmp_path: Path) -> None:
    pac = tmp_path / "corp.pac"
    pac.write_text('function FindProxyForURL(url, host) { return "PROXY client"; }\n')
    loaded = load_spec_text(FILE, name="app.yaml")
    folded = fold_egress_flags(
        loaded,
        EgressFlags(
            mode="transparent",
            routes=("a.corp.example=deny", "*=gateway"),
            default="cluster",
            pac=str(pac),
        ),
    )
    egress = folded.spec.egress
    assert egress is not None
    assert [(r.pattern, r.route) for r in egress.rules] == [
        ("a.corp.example", "deny"),
        ("*", "gateway"),
        ("*.corp.example", "client"),
        ("10.0.0.0/8", "cluster"),
    ]
    assert (egress.mode, egress.default) == ("transparent", "cluster")
    assert egress.script == pac.read_text()
    assert folded.script_origin is not None
    assert (folded.script_origin.where, folded.script_origin.file) == (str(pac), str(pac))
    # The file's own values survive when no flag touches them.
    untouched = fold_egress_flags(loaded, EgressFlags(routes=("x.example=deny",)))
    assert untouched.spec.egress is not None
    assert (untouched.spec.egress.mode, untouched.spec.egress.default) == ("proxy", "gateway")
    assert untouched.script_origin is not None and untouched.script_origin.where == "app.yaml:7:11"


def test_flags_enable_egress_without_a_file_block() -> None:
    assert empty_spec().spec.egress is None
    folded = fold_egress_flags(empty_spec(), EgressFlags(routes=("*.corp.example=client",)))
    assert folded.spec.egress is not None and folded.spec.egress.mode == "env"
    assert fold_egress_flags(empty_spec(), EgressFlags()) == empty_spec()


def test_pac_flag_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pac"
    with pytest.raises(SpecError) as info:
        fold_egress_flags(empty_spec(), EgressFlags(pac=str(missing)))
    assert info.value.source == f"--egress-pac {missing}"
    assert "No such file" in info.value.message
    empty = tmp_path / "empty.pac"
    empty.write_text("\n  \n")
    with pytest.raises(SpecError, match="empty"):
        fold_egress_flags(empty_spec(), EgressFlags(pac=str(empty)))
    binary = tmp_path / "bin.pac"
    binary.write_bytes(b"\xfe\xff")
    with pytest.raises(SpecError, match="not UTF-8"):
        fold_egress_flags(empty_spec(), EgressFlags(pac=str(binary)))


def test_local_mount_flag(tmp_path: Path) -> None:
    mount = parse_local_mount("./src:/app/src:ro", cwd=str(tmp_path))
    assert (mount.source, mount.target, mount.read_only) == (str(tmp_path / "src"), "/app/src", True)
    assert mount.is_local
    # A bare name on the command line is a local directory, not a volume.
    mount = parse_local_mount("data:/data:rw", cwd=str(tmp_path))
    assert (mount.source, mount.read_only) == (str(tmp_path / "data"), False)
    assert parse_local_mount("~/x:/x").source == os.path.expanduser("~/x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/a", "expected SRC:DST"),
        ("/a:/b:rox", "expected SRC:DST"),
        ("/a:/b:ro:x", "expected SRC:DST"),
        (":/b", "empty"),
        ("/a:relative", "absolute"),
        ("/a:", "target path is empty"),
        ("/a:/", "root"),
    ],
)
def test_local_mount_flag_errors(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_local_mount(text, cwd="/")
    assert info.value.source.startswith("--local-mount ")
    assert message in info.value.message


def test_local_mounts_fold_after_the_file_and_clash_by_target(tmp_path: Path) -> None:
    loaded = load_spec_text("mounts: [{source: ./a, target: /a}]\n", name="app.yaml", base_dir=str(tmp_path))
    folded = fold_local_mounts(loaded, ["./b:/b:ro"], cwd=str(tmp_path))
    assert [m.target for m in folded.spec.mounts] == ["/a", "/b"]
    assert folded.mount_origins == ("app.yaml:1:10", "--local-mount ./b:/b:ro")
    with pytest.raises(SpecError) as info:
        fold_local_mounts(loaded, ["./c:/a/"], cwd=str(tmp_path))
    assert info.value.source == "--local-mount ./c:/a/"
    assert "app.yaml:1:10" in info.value.message
