"""End to end through the installed `cornus-tui` console script, as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPT = shutil.which("cornus-tui", path=str(Path(sys.executable).parent)) or shutil.which("cornus-tui")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None, "the cornus-tui console script is not installed"
    return subprocess.run([SCRIPT, *argv], capture_output=True, text=True, timeout=60, check=False)


def test_route_with_the_example_policy() -> None:
    done = _run("route", "-f", str(EXAMPLES / "policy.yaml"), "--json", "build.corp.example", "10.9.8.7:5432")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["dest"], r["route"]) for r in records] == [
        ("build.corp.example", "client"),
        ("10.9.8.7:5432", "client"),
    ]


def test_pac_eval() -> None:
    done = _run(
        "pac", "eval", str(EXAMPLES / "corp.pac"), "--url", "https://pypi.org/simple/", "--host", "pypi.org"
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "PROXY gateway\n", "")


def test_bad_destination_exits_2() -> None:
    done = _run("route", "example.com:http")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "example.com:http" in done.stderr


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["route", "--help"], ["pac", "eval", "--help"]])
def test_informational_flags_exit_0(argv: list[str]) -> None:
    done = _run(*argv)
    assert done.returncode == 0 and done.stdout and done.stderr == ""


def test_session_exit_codes(tmp_path: Path) -> None:
    spec = tmp_path / "fails.yaml"
    spec.write_text('command: "echo working; exit 5"\n')
    done = _run("-f", str(spec))  # stdout is not a terminal: plain mode is chosen
    assert done.returncode == 5
    assert "app: working" in done.stdout
    assert "exited with status 5" in done.stderr
    spec.write_text('command: ["/nonexistent/program"]\n')
    done = _run("-f", str(spec), "--json")
    assert done.returncode == 3
    assert "cannot start workload" in done.stderr
