"""``python -m cornus_tui.screenshots``: pictures of the demo scenes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cornus_tui.screenshots import main


def test_one_scene_as_svg_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--svg", "help"]) == 0
    svg = (tmp_path / "help.svg").read_text()
    assert svg.startswith("<svg") and "pac.apply" in svg
    if importlib.util.find_spec("cairosvg") is not None:
        assert (tmp_path / "help.png").read_bytes().startswith(b"\x89PNG")
    assert str(tmp_path / "help.svg") in capsys.readouterr().out


def test_an_unknown_scene_is_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["nope"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "unknown scene nope" in err and "connections" in err
