"""User key bindings: ``$XDG_CONFIG_HOME/cornus-tui/keymap.toml`` maps binding ids to keys.

::

    # binding id = key, or several keys
    [keymap]
    quit = "ctrl+q"
    "panel.mounts" = ["2", "m"]
    "pac.apply" = "ctrl+t"

The ids are listed by ``?`` in the app (and by :data:`BINDING_IDS`). A top-level table without the
``[keymap]`` header works too.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

# Every remappable binding: id -> what it does.
BINDING_IDS: dict[str, str] = {
    "quit": "Quit (tears the session down first)",
    "help": "Show the key bindings",
    "command-palette": "Open the command palette",
    "panel.connections": "Show the connections panel",
    "panel.mounts": "Show the mounts panel",
    "panel.credentials": "Show the credentials panel",
    "panel.session": "Show the session panel",
    "filter": "Filter connections",
    "pause": "Pause or resume the live view",
    "detail": "Show or hide the selected connection's three-hop trace",
    "pac-editor": "Open the PAC editor",
    "connections.follow": "Jump to the newest connection and follow",
    "pac.apply": "Apply the draft policy to the live session",
    "pac.save": "Save the draft to the PAC file",
    "pac.close": "Close the PAC editor",
}


class KeymapError(ValueError):
    """A keymap file that cannot be used; the message names the file and the entry."""


def default_keymap_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "cornus-tui" / "keymap.toml"


def load_keymap(path: Path, *, known: Iterable[str] = BINDING_IDS) -> dict[str, str]:
    """The binding id -> keys map in ``path`` (empty when the file does not exist)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise KeymapError(f"{path}: cannot read the keymap: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise KeymapError(f"{path}: not valid TOML: {exc}") from None
    table = data.get("keymap", data)
    if not isinstance(table, dict):
        raise KeymapError(f"{path}: 'keymap' must be a table of binding id = keys")
    known_ids = set(known)
    keymap: dict[str, str] = {}
    for binding_id, keys in table.items():
        if binding_id not in known_ids:
            choices = ", ".join(sorted(known_ids))
            raise KeymapError(f"{path}: unknown binding id {binding_id!r} (known ids: {choices})")
        if isinstance(keys, str):
            keys = [keys]
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k.strip() for k in keys):
            raise KeymapError(f'{path}: {binding_id!r} must be a key or a list of keys, like "ctrl+q"')
        keymap[binding_id] = ",".join(key.strip() for key in keys)
    return keymap
