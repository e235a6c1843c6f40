"""keymap.toml: binding id -> keys, with errors that name the file and the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from cornus_tui.app import CornusApp
from cornus_tui.keymap import BINDING_IDS, KeymapError, default_keymap_path, load_keymap
from cornus_tui.screens.dashboard import DashboardScreen
from cornus_tui.screens.pac_editor import PacEditorScreen
from cornus_tui.widgets.connections import ConnectionView


def test_the_default_path_follows_xdg() -> None:
    assert default_keymap_path({"XDG_CONFIG_HOME": "/cfg"}) == Path("/cfg/cornus-tui/keymap.toml")
    assert default_keymap_path({"HOME": "/home/u"}) == Path("/home/u/.config/cornus-tui/keymap.toml")


def test_a_missing_file_is_an_empty_keymap(tmp_path: Path) -> None:
    assert load_keymap(tmp_path / "none.toml") == {}


def test_keys_as_text_or_lists_with_or_without_the_table(tmp_path: Path) -> None:
    path = tmp_path / "keymap.toml"
    path.write_text('[keymap]\nquit = "ctrl+q"\n"panel.mounts" = ["2", " m "]\n')
    assert load_keymap(path) == {"quit": "ctrl+q", "panel.mounts": "2,m"}
    path.write_text('help = "f1"\n')
    assert load_keymap(path) == {"help": "f1"}


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("quit = ", "not valid TOML"),
        ('[keymap]\n"panel.nope" = "x"\n', "unknown binding id 'panel.nope'"),
        ("[keymap]\nquit = 3\n", "'quit' must be a key or a list of keys"),
        ("[keymap]\nquit = []\n", "'quit' must be a key or a list of keys"),
        ('[keymap]\nquit = [""]\n', "'quit' must be a key or a list of keys"),
        ('keymap = "q"\n', "'keymap' must be a table"),
    ],
)
def test_bad_keymaps_name_the_file_and_the_entry(tmp_path: Path, text: str, phrase: str) -> None:
    path = tmp_path / "keymap.toml"
    path.write_text(text)
    with pytest.raises(KeymapError) as caught:
        load_keymap(path)
    assert str(path) in str(caught.value) and phrase in str(caught.value)


def test_every_binding_id_in_the_app_is_documented_and_every_documented_id_exists() -> None:
    ids = set()
    for cls in (CornusApp, DashboardScreen, PacEditorScreen, ConnectionView):
        ids |= {binding.id for binding in cls.BINDINGS if getattr(binding, "id", None)}
    assert ids == set(BINDING_IDS)
