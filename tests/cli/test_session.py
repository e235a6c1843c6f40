"""The main mode: everything is parsed and validated before a session starts; exit codes say what happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from cornus_tui.cli import SUBCOMMANDS, main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    path = tmp_path / "app.yaml"
    path.write_text("name: app\nimage: python:3.11\ncommand: [\"true\"]\negress:\n  mode: proxy\n")
    return path


def test_unreachable_server_exits_4_with_one_clear_line(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(
        capsys,
        "-f",
        str(spec),
        "--server",
        "http://127.0.0.1:9",
        "--local-mount",
        f"{spec.parent / 'src'}:/app/src:ro",
        "--plain",
        "--json",
        "--egress",
        "transparent",
        "--egress-route",
        "*.corp.example=client",
        "--egress-default",
        "deny",
        "--egress-pac",
        str(EXAMPLES / "corp.pac"),
    )
    assert (code, out) == (4, "")
    assert len(err.splitlines()) == 1
    assert "ws://127.0.0.1:9" in err and "could not connect" in err


def test_session_runs_on_the_embedded_server(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "-f", str(spec), "--plain")
    assert code == 0, err
    assert "ready deployment=" in out and "exit 0" in out
    assert "image 'python:3.11' is not used (the dockerhost backend runs images)" in out  # said, not fatal


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--server", "cornus.example.com"], "--server cornus.example.com"),
        (["--server", "ftp://x"], "--server ftp://x"),
        (["--server", "https://[::1"], "--server 'https://[::1'"),
        (["--server", "https://x:99999"], "--server https://x:99999"),
        (["--local-mount", "/nonexistent-dir-for-test:/x"], "--local-mount /nonexistent-dir-for-test:/x"),
        (["--local-mount", "/tmp"], "--local-mount /tmp"),
        (["--egress", "socks"], "--egress socks"),
        (["--egress-route", "a=b"], "--egress-route a=b"),
        (["--egress-pac", "/nonexistent.pac"], "--egress-pac /nonexistent.pac"),
        (["--service", "web"], "--service web"),
        (["--egress-default", "client", "--detach"], "--detach"),
    ],
)
def test_invalid_input_exits_2_naming_it(
    spec: Path, capsys: pytest.CaptureFixture[str], extra: list[str], named: str
) -> None:
    code, out, err = _run(capsys, "-f", str(spec), *extra)
    assert (code, out) == (2, "")
    assert named in err


def test_detach_is_refused_for_local_mounts(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "-f", str(spec), "--detach", "--local-mount", f"{spec.parent / 'src'}:/src")
    assert code == 2
    assert "--detach" in err and "/src" in err


def test_detach_with_gateway_only_policy_is_valid(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "-f", str(spec), "--detach", "--egress-default", "gateway")
    assert code == 0, err


def test_spec_without_a_workload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "policy-only.yaml"
    path.write_text("egress: {mode: proxy}\n")
    code, _, err = _run(capsys, "-f", str(path))
    assert code == 2 and "neither 'image' nor 'command'" in err


def test_missing_spec_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys)
    assert code == 2
    assert "-f SPEC" in err
    code, _, err = _run(capsys, "--plain")
    assert code == 2


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--version")
    assert code == 0 and out.startswith("cornus-tui ")
    code, out, _ = _run(capsys, "--help")
    assert code == 0
    for name in SUBCOMMANDS:
        assert name in out
    assert "examples:" in out and "BEFORE the file's rules" in out


def test_subcommand_names_are_dispatched_only_in_first_position(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'route' after the options is not a subcommand: the main parser rejects it as an extra argument.
    code, _, err = _run(capsys, "-f", str(spec), "route")
    assert code == 2 and "unrecognized arguments: route" in err


def test_exit_on_ready_is_a_readiness_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sleeper.yaml"
    path.write_text('command: ["sleep", "600"]\n')
    code, out, err = _run(capsys, "-f", str(path), "--exit-on-ready")
    assert code == 0, err
    lines = out.splitlines()
    assert any(" ready deployment=" in line for line in lines)
    assert "done caller asked to tear down" in lines[-1]


def test_a_policy_that_does_not_compile_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text('command: ["true"]\negress:\n  mode: proxy\n  script: |\n    function FindProxyForURL(u, h) {\n'
                    '      return "DIRECT"\n    }}\n')
    code, out, err = _run(capsys, "-f", str(path))
    assert (code, out) == (5, "")
    assert "does not compile" in err and "bad.yaml:" in err
