"""The one-line session summary above every panel: where, what state, which policy, what flows where."""

from __future__ import annotations

from rich.console import RenderableType
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from cornus_core.stores import OPEN, Stores

from .colours import DIM, ROUTE_COLOURS, outcome_style


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: 1; background: $panel; padding: 0 1; }
    """

    paused: reactive[bool] = reactive(False)

    def __init__(self, stores: Stores, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.stores = stores
        self._seen = -1

    def sync(self) -> None:
        version = self.stores.version
        if version != self._seen:
            self._seen = version
            self.refresh()

    def watch_paused(self) -> None:
        self.refresh()

    def render(self) -> RenderableType:
        """Most important first, so a narrow terminal cuts only the least useful part."""
        session = self.stores.session
        conns = self.stores.connections
        text = Text(no_wrap=True, overflow="ellipsis")
        if self.paused:
            text.append(" PAUSED ", style="bold reverse #ffaf00")
            text.append(" ")
        text.append("cornus ", style="bold")
        text.append(session.state, style=outcome_style(session.state) + Style(bold=True))
        if session.deployment:
            text.append(f" {session.deployment}")
        text.append(f"  │ {conns.total} conns")
        for route, colour in ROUTE_COLOURS.items():
            text.append(f" {route} {conns.routes.get(route, 0)}", style=colour)
        open_now = conns.outcomes.get(OPEN, 0)
        if open_now:
            text.append(f" ({open_now} open)", style=DIM)
        text.append("  │", style=DIM)
        if session.policy_version:
            text.append(f" policy {session.policy_version[:8]}", style=DIM)
        if session.server:
            text.append(f" on {session.server.split('://', 1)[-1]}", style=DIM)
        return text
