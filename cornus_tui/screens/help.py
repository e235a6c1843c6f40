"""``?``: every key binding, its id (for keymap.toml) and what it does."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..keymap import BINDING_IDS


def bindings_table(keys: dict[str, str]) -> Table:
    table = Table(box=None, padding=(0, 2, 0, 0), header_style="bold", show_edge=False)
    table.add_column("KEYS", no_wrap=True, style="#5fafff")
    table.add_column("ID", no_wrap=True, style="dim")
    table.add_column("WHAT IT DOES")
    for binding_id, description in BINDING_IDS.items():
        table.add_row(_pretty(keys.get(binding_id, "")), binding_id, description)
    return table


def _pretty(keys: str) -> str:
    names = {"question_mark": "?", "slash": "/", "colon": ":", "escape": "esc"}
    return ", ".join(names.get(key.strip(), key.strip()) for key in keys.split(",") if key.strip())


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96; max-width: 100%; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 1 2;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, keys: dict[str, str], keymap_path: Path | None) -> None:
        super().__init__()
        self.keys = keys
        self.keymap_path = keymap_path

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("cornus-tui keys", style="bold"))
            yield Static(bindings_table(self.keys))
            where = str(self.keymap_path) if self.keymap_path else "$XDG_CONFIG_HOME/cornus-tui/keymap.toml"
            yield Static(
                Text.assemble(
                    "\nIn the connection stream: ↑/↓ move, PgUp/PgDn page, Home first, End follows the newest.\n"
                    "Routes: ",
                    ("client", "#5fafff"),
                    " leaves from this machine, ",
                    ("gateway", "#d787ff"),
                    " from the server, ",
                    ("cluster", "#87d75f"),
                    " from the pod, ",
                    ("deny", "bold #ff5f5f"),
                    " is refused.\n",
                    (f'Remap keys by id in {where}, e.g.  quit = "ctrl+q"', "dim"),
                )
            )
