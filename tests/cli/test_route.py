"""`cornus-tui route`: how the policy routes destinations (in-process main(argv))."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cornus_tui.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["route", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _routes(out: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in out.splitlines()}


def test_flags_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(
        capsys,
        "--egress-route",
        "*.corp.example=client",
        "--egress-route",
        "10.0.0.0/8=deny",
        "--egress-default",
        "gateway",
        "wiki.corp.example",
        "10.1.2.3:22",
        "db.internal:5432@10.0.3.7",
        "pypi.org:443",
    )
    assert (code, err) == (0, "")
    assert _routes(out) == {
        "wiki.corp.example": "client",
        "10.1.2.3:22": "deny",
        "db.internal:5432@10.0.3.7": "deny",  # a CIDR rule matches the known IP of a name
        "pypi.org:443": "gateway",
    }


def test_session_egress_flags_paste_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "--egress", "proxy", "--egress-route", "*.corp.example=client", "a.corp.example"
    )
    assert (code, _routes(out)) == (0, {"a.corp.example": "client"})
    code, _, err = _run(capsys, "--egress", "sideways", "a.corp.example")
    assert code == 2 and "--egress sideways" in err


def test_columns_are_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "--egress-route", "a.example=client", "a.example", "a-much-longer-name.example:8443"
    )
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    route_columns = {line.index(line.split()[1], len(line.split()[0])) for line in lines}
    reason_columns = {
        line.index(line.split()[2], line.index(line.split()[1]) + len(line.split()[1])) for line in lines
    }
    assert len(route_columns) == 1 and len(reason_columns) == 1


def test_without_a_policy_everything_goes_to_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "example.com", "[2001:db8::1]:80", "192.0.2.1")
    assert code == 0
    assert set(_routes(out).values()) == {"cluster"}


def test_spec_file_with_cli_routes_taking_precedence(capsys: pytest.CaptureFixture[str]) -> None:
    spec = EXAMPLES / "policy.yaml"
    code, out, _ = _run(
        capsys, "-f", str(spec), "wiki.corp.example", "pypi.org", "169.254.169.254:80", "x.svc.cluster.local"
    )
    assert code == 0
    assert _routes(out) == {
        "wiki.corp.example": "client",
        "pypi.org": "gateway",
        "169.254.169.254:80": "deny",
        "x.svc.cluster.local": "cluster",
    }
    # The same destination, now overridden by a flag: the flag's rule is tried first.
    code, out, _ = _run(
        capsys, "-f", str(spec), "--egress-route", "wiki.corp.example=deny", "wiki.corp.example"
    )
    assert code == 0
    assert _routes(out) == {"wiki.corp.example": "deny"}


def test_compose_service_selection(capsys: pytest.CaptureFixture[str]) -> None:
    compose = EXAMPLES / "compose.yaml"
    code, out, _ = _run(capsys, "-f", str(compose), "--service", "api", "wiki.corp.example", "pypi.org")
    assert code == 0
    assert _routes(out) == {"wiki.corp.example": "client", "pypi.org": "cluster"}
    # worker's own block replaces the project's: no client rule, default deny.
    code, out, _ = _run(capsys, "-f", str(compose), "--service", "worker", "wiki.corp.example", "pypi.org")
    assert code == 0
    assert _routes(out) == {"wiki.corp.example": "deny", "pypi.org": "gateway"}


def test_pac_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys,
        "--egress-pac",
        str(EXAMPLES / "corp.pac"),
        "--now",
        "2025-03-01T12:00:00Z",  # a Saturday
        "wiki.corp.example",
        "build:8080",
        "git.internal@10.20.0.5",
        "169.254.169.254:80",
        "pypi.org",
        "cdn.video.example",
        "example.com",
    )
    assert code == 0
    assert _routes(out) == {
        "wiki.corp.example": "client",
        "build:8080": "cluster",
        "git.internal@10.20.0.5": "client",
        "169.254.169.254:80": "deny",
        "pypi.org": "gateway",
        "cdn.video.example": "client",  # PROXY proxy.corp.example:8080 is a real proxy: the caller applies it
        "example.com": "cluster",
    }
    code, out, _ = _run(
        capsys,
        "--egress-pac",
        str(EXAMPLES / "corp.pac"),
        "--now",
        "2025-03-03T09:30:00Z",
        "cdn.video.example",
    )
    assert (code, _routes(out)) == (0, {"cdn.video.example": "deny"})  # Monday, office hours


def test_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "--json", "--egress-route", "*.corp.example=client", "a.corp.example:80", "db@10.0.0.9"
    )
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert [set(r) for r in records] == [{"dest", "host", "ip", "port", "route", "reason", "version"}] * 2
    first, second = records
    assert (first["dest"], first["host"], first["ip"], first["port"], first["route"]) == (
        "a.corp.example:80",
        "a.corp.example",
        None,
        80,
        "client",
    )
    assert (second["host"], second["ip"], second["port"], second["route"]) == (
        "db",
        "10.0.0.9",
        443,
        "cluster",
    )
    assert first["reason"] and first["version"] == second["version"]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["example.com:99999"], "destination example.com:99999"),
        (["[::1"], "destination '[::1'"),
        (["--egress-route", "*.x=somewhere", "a.x"], "--egress-route '*.x=somewhere'"),
        (["--egress-route", "nope", "a.x"], "--egress-route nope"),
        (["--egress-default", "direct", "a.x"], "--egress-default direct"),
        (["--egress-pac", "/nonexistent/corp.pac", "a.x"], "--egress-pac /nonexistent/corp.pac"),
        (["-f", "/nonexistent/app.yaml", "a.x"], "/nonexistent/app.yaml"),
        (["--service", "web", "a.x"], "--service web"),
        (["--now", "yesterday", "a.x"], "--now yesterday"),
    ],
)
def test_bad_input_exits_2_naming_the_argument(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert named in err


def test_bad_spec_file_names_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "app.yaml"
    spec.write_text("egress:\n  rules:\n    - {pattern: '*.x', route: clinet}\n")
    code, _, err = _run(capsys, "-f", str(spec), "a.x")
    assert code == 2
    assert f"{spec}:3:31: egress.rules[0].route: unknown route 'clinet'" in err


def test_pac_that_does_not_compile_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pac = tmp_path / "broken.pac"
    pac.write_text("function FindProxyForURL(url, host) {\n  return 'DIRECT'\n")
    code, _, err = _run(capsys, "--egress-pac", str(pac), "a.example")
    assert code == 2
    assert f"{pac}:3:1" in err or f"{pac}:2:" in err
    assert f"--egress-pac {pac} does not compile" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys)
    assert code == 2 and "DEST" in err
    code, _, err = _run(capsys, "--bogus", "a.example")
    assert code == 2 and "--bogus" in err


def test_help_documents_grammar_and_precedence(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--help")
    assert code == 0
    assert "host:port@IP" in out and "443" in out and "before the file's rules" in out
