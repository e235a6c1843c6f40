"""Whole-spec checks: policy compilation, detached deployments, what a session needs up front."""

from __future__ import annotations

from pathlib import Path

import pytest

from cornus_core.policy import Destination
from cornus_core.spec import (
    DeploySpec,
    EgressFlags,
    SpecError,
    check_deployable,
    compile_spec_policy,
    detach_check,
    empty_spec,
    fold_egress_flags,
    load_spec_text,
)

GOOD_PAC = 'function FindProxyForURL(url, host) { return "DIRECT"; }\n'


def _spec(data: dict[str, object]) -> DeploySpec:
    return DeploySpec.model_validate(data)


def test_detach_is_fine_without_client_routes_credentials_or_local_mounts() -> None:
    assert detach_check(_spec({"image": "x"})) is None
    spec = _spec(
        {
            "image": "x",
            "mounts": [{"source": "cache", "target": "/cache"}],
            "egress": {
                "mode": "proxy",
                "default": "gateway",
                "rules": [{"pattern": "*.internal", "route": "cluster"}],
            },
        }
    )
    assert detach_check(spec) is None


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        ({"egress": {"default": "client"}}, "route to 'client'"),
        ({"egress": {"rules": [{"pattern": "*.corp.example", "route": "client"}]}}, "route to 'client'"),
        ({"egress": {"script": GOOD_PAC}}, "route to 'client'"),  # any script could
        ({"credentials": {"sources": [{"name": "aws", "backend": "env"}]}}, "credentials (aws)"),
        ({"mounts": [{"source": "/srv/src", "target": "/src"}]}, "mounts directories of this machine (/src)"),
    ],
)
def test_detach_is_refused_with_a_reason(data: dict[str, object], phrase: str) -> None:
    reason = detach_check(_spec({"image": "x", **data}))
    assert reason is not None and phrase in reason


def test_detach_reason_lists_every_cause() -> None:
    spec = _spec(
        {
            "image": "x",
            "egress": {"default": "client"},
            "credentials": {"sources": [{"name": "npm", "backend": "env"}]},
            "mounts": [{"source": "/a", "target": "/a"}],
        }
    )
    reason = detach_check(spec)
    assert reason is not None
    assert "'client'" in reason and "npm" in reason and "/a" in reason


def test_no_egress_block_routes_everything_to_cluster() -> None:
    policy = compile_spec_policy(empty_spec())
    assert str(policy.route(Destination("example.com", None, 443)).route.value) == "cluster"


def test_pac_syntax_error_in_a_yaml_block_names_the_file_line_and_column() -> None:
    text = (
        "egress:\n"
        "  mode: proxy\n"
        "  script: |\n"
        "    function FindProxyForURL(url, host) {\n"
        "      return 'DIRECT' +;\n"
        "    }\n"
    )
    with pytest.raises(SpecError) as info:
        compile_spec_policy(load_spec_text(text, name="app.yaml"))
    assert info.value.source == "app.yaml:5:24"  # the ';'
    assert info.value.message.startswith("egress.script does not compile: ")


def test_pac_error_in_a_quoted_yaml_script_names_the_value_and_the_script_line() -> None:
    text = 'egress:\n  script: "function FindProxyForURL(u, h) {\\n  return +; }"\n'
    with pytest.raises(SpecError) as info:
        compile_spec_policy(load_spec_text(text, name="app.yaml"))
    assert info.value.source == "app.yaml:2:11"
    assert "script line 2" in info.value.message


def test_pac_error_in_a_compose_block_names_the_compose_key() -> None:
    text = (
        "services:\n  web:\n    image: x\n    x-cornus-egress:\n      script: |\n"
        "        function FindProxyForURL(u, h) { return +; }\n"
    )
    with pytest.raises(SpecError) as info:
        compile_spec_policy(load_spec_text(text, name="compose.yaml"))
    assert info.value.source == "compose.yaml:6:50"
    assert info.value.message.startswith("services.web.x-cornus-egress.script does not compile")


def test_pac_file_errors_name_the_pac_file(tmp_path: Path) -> None:
    pac = tmp_path / "broken.pac"
    pac.write_text("function FindProxyForURL(url, host) {\n  return 'DIRECT' +;\n}\n")
    with pytest.raises(SpecError) as info:
        compile_spec_policy(fold_egress_flags(empty_spec(), EgressFlags(pac=str(pac))))
    assert info.value.source == f"{pac}:2:20"
    assert f"--egress-pac {pac} does not compile" in info.value.message
    pac.write_text("function NotTheEntryPoint(url, host) { return 'DIRECT'; }\n")
    with pytest.raises(SpecError) as info:
        compile_spec_policy(fold_egress_flags(empty_spec(), EgressFlags(pac=str(pac))))
    assert info.value.source == str(pac)
    assert "FindProxyForURL" in info.value.message


def test_check_deployable(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    loaded = load_spec_text(
        "image: x\nmounts: [{source: ./src, target: /src}]\negress: {mode: proxy, default: gateway}\n",
        name="app.yaml",
        base_dir=str(tmp_path),
    )
    policy = check_deployable(loaded)
    assert str(policy.route(Destination("example.com", None, 443)).route.value) == "gateway"
    # Local mounts need a session, so detaching is refused, naming the flag.
    with pytest.raises(SpecError) as info:
        check_deployable(loaded, detach=True)
    assert info.value.source == "--detach"
    assert "/src" in info.value.message


def test_check_deployable_errors_name_their_source(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        check_deployable(load_spec_text("egress: {mode: proxy}\n", name="app.yaml"))
    assert info.value.source == "app.yaml"
    assert "neither 'image' nor 'command'" in info.value.message

    loaded = load_spec_text(
        "image: x\nmounts:\n  - {source: ./missing, target: /m}\n", name="app.yaml", base_dir=str(tmp_path)
    )
    with pytest.raises(SpecError) as info:
        check_deployable(loaded)
    assert info.value.source == "app.yaml:3:5"
    assert "does not exist" in info.value.message

    loaded = load_spec_text("image: x\ndetach: true\negress: {default: client}\n", name="app.yaml")
    with pytest.raises(SpecError) as info:
        check_deployable(loaded)
    assert info.value.source == "app.yaml"
    assert "'client'" in info.value.message
