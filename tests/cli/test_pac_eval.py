"""`cornus-tui pac eval`: one FindProxyForURL call, its raw return printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cornus_tui.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CORP = str(EXAMPLES / "corp.pac")


def _eval(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["pac", "eval", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _pac(tmp_path: Path, body: str) -> str:
    path = tmp_path / "test.pac"
    path.write_text(body)
    return str(path)


def test_prints_the_raw_return(capsys: pytest.CaptureFixture[str]) -> None:
    assert _eval(capsys, CORP, "--url", "https://wiki.corp.example/", "--host", "wiki.corp.example") == (
        0,
        "PROXY client\n",
        "",
    )
    assert _eval(capsys, CORP, "--url", "https://x/", "--host", "git.internal", "--ip", "10.20.0.5")[:2] == (
        0,
        "CLIENT\n",
    )
    assert _eval(capsys, CORP, "--url", "https://x/", "--host", "git.internal")[:2] == (0, "DIRECT\n")


def test_now_pins_the_clock(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--url", "https://cdn.video.example/", "--host", "cdn.video.example")
    assert _eval(capsys, CORP, *args, "--now", "2025-03-03T09:30:00Z")[:2] == (0, "DENY\n")
    assert _eval(capsys, CORP, *args, "--now", "2025-03-03T20:00:00+00:00")[:2] == (
        0,
        "PROXY proxy.corp.example:8080\n",
    )
    # A time without a zone is UTC: the same answer as the Z form.
    assert _eval(capsys, CORP, *args, "--now", "2025-03-03T09:30:00")[:2] == (0, "DENY\n")


def test_url_and_host_reach_the_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pac = _pac(tmp_path, "function FindProxyForURL(url, host) { return 'PROXY ' + host + ' ' + url; }\n")
    assert _eval(capsys, pac, "--url", "tcp://a.example:25/", "--host", "a.example")[1] == (
        "PROXY a.example tcp://a.example:25/\n"
    )


def test_null_and_undefined_print_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for body in ("return null;", "return;"):
        pac = _pac(tmp_path, f"function FindProxyForURL(url, host) {{ {body} }}\n")
        assert _eval(capsys, pac, "--url", "https://a/", "--host", "a")[:2] == (0, "null\n")


def test_compile_error_exits_2_with_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pac = _pac(tmp_path, "function FindProxyForURL(url, host) {\n  return 'DIRECT' +;\n}\n")
    code, out, err = _eval(capsys, pac, "--url", "https://a/", "--host", "a")
    assert (code, out) == (2, "")
    assert f"{pac}:2:20: does not compile: " in err


def test_missing_entry_point_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pac = _pac(tmp_path, "function findProxy(url, host) { return 'DIRECT'; }\n")
    code, _, err = _eval(capsys, pac, "--url", "https://a/", "--host", "a")
    assert code == 2 and "FindProxyForURL" in err


def test_evaluation_error_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for body in ("throw new Error('boom');", "return 42;", "while (true) {}"):
        pac = _pac(tmp_path, f"function FindProxyForURL(url, host) {{ {body} }}\n")
        code, out, err = _eval(capsys, pac, "--url", "https://a/", "--host", "a")
        assert (code, out) == (1, ""), body
        assert "evaluation failed" in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["/nonexistent.pac", "--url", "u", "--host", "h"], "/nonexistent.pac"),
        ([CORP, "--url", "u", "--host", "h", "--ip", "not-an-ip"], "--ip not-an-ip"),
        ([CORP, "--url", "u", "--host", "h", "--now", "noon"], "--now noon"),
        ([CORP, "--host", "h"], "--url"),
        ([CORP, "--url", "u"], "--host"),
    ],
)
def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], named: str) -> None:
    code, out, err = _eval(capsys, *argv)
    assert (code, out) == (2, "")
    assert named in err


def test_pac_without_a_tool_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pac"]) == 2
    assert "TOOL" in capsys.readouterr().err
