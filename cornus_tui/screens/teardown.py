"""Shown while the session tears down: workload first, then the mounts."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import ModalScreen
from textual.widgets import Static


class TeardownScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    TeardownScreen { align: center middle; }
    TeardownScreen > Static {
        width: auto; height: auto; border: round $warning; background: $surface; padding: 1 3;
    }
    """

    def __init__(self, message: str = "tearing down…") -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        yield Static(
            f"{self.message}\n\n[dim]removing the workload, then unmounting[/]", id="teardown-message"
        )

    def show(self, message: str) -> None:
        self.query_one("#teardown-message", Static).update(message)
