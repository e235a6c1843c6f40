"""Every screen of the demo session, pixel for pixel (pytest-textual-snapshot; update with
``pytest tests/tui/test_snapshots.py --snapshot-update`` and look at the report before committing)."""

from __future__ import annotations

from typing import Any

import pytest

from cornus_tui.fixtures import SCENES, Scene, scene_app
from cornus_tui.screens.pac_editor import editor_language


@pytest.mark.parametrize("scene", SCENES, ids=[scene.name for scene in SCENES])
def test_screen(scene: Scene, snap_compare: Any) -> None:
    if scene.name.startswith("pac-editor") and editor_language() is None:
        pytest.skip(
            "the PAC editor is pictured with JavaScript highlighting: tree-sitter 0.25 is not installed"
        )
    assert snap_compare(scene_app(scene), run_before=scene.run, terminal_size=scene.size)
