"""Textual's Footer, rebuilt only when the keys it shows change, and without its watcher leak.

The stock Footer recomposes all its keys whenever the focused widget changes (every panel switch), even
when it would show the very same keys; and each recompose leaves the old keys behind in the footer's
``compact`` watchers (pruned only when ``compact`` itself changes), so a long session that moves focus
keeps growing, and every garbage collection gets slower.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer as TextualFooter

_Shown = tuple[tuple[str, str, str, bool, str], ...]


class Footer(TextualFooter):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: _Shown | None = None

    def bindings_changed(self, screen: Screen[object]) -> None:
        shown = _shown_keys(screen)
        if shown == self._shown:
            return
        super().bindings_changed(screen)
        if self.is_attached and screen is self.screen and screen.app.app_focus:
            self._shown = shown  # a recompose is on its way

    def compose(self) -> ComposeResult:
        # The old keys are gone by now (a recompose removes them first): forget their watchers.
        watchers = getattr(self, "__watchers", {}).get("compact")
        if watchers:
            watchers[:] = [(node, callback) for node, callback in watchers if node.is_attached]
        yield from super().compose()


def _shown_keys(screen: Screen[object]) -> _Shown:
    """What the footer draws from the screen's bindings: the shown ones and the command palette's."""
    palette = screen.app.COMMAND_PALETTE_BINDING
    return tuple(
        (binding.key, binding.action, binding.description, enabled, tooltip)
        for key, (_, binding, enabled, tooltip) in screen.active_bindings.items()
        if binding.show or key == palette
    )
