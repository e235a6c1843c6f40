"""The command palette's cornus commands (``:`` or ``ctrl+p``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from ..app import CornusApp


def cornus_commands(app: CornusApp) -> list[tuple[str, str, Callable[[], object]]]:
    """(title, help, callback) for every command the palette offers."""
    dash = app.dashboard
    commands: list[tuple[str, str, Callable[[], object]]] = [
        (
            "Show connections",
            "The live egress connection stream (1)",
            lambda: dash.action_panel("connections"),
        ),
        ("Show mounts", "9P mounts: ops/s, bytes, latency, errors (2)", lambda: dash.action_panel("mounts")),
        (
            "Show credentials",
            "Credential requests and their sources (3)",
            lambda: dash.action_panel("credentials"),
        ),
        ("Show session", "Session state and the workload's log (4)", lambda: dash.action_panel("session")),
        ("Filter connections", "Show only connections matching some text (/)", dash.action_filter),
        ("Pause or resume", "Freeze the view; the session keeps recording (space)", dash.action_pause),
        ("Connection detail", "The selected connection's three-hop trace (enter)", dash.action_detail),
        ("Edit the PAC policy", "Draft a PAC script with a live route preview (e)", app.open_pac_editor),
        ("Key bindings", "Every key and its id for keymap.toml (?)", app.action_help),
        ("Quit", "Tear the session down and exit (q)", app.action_quit),
    ]
    return commands


class CornusCommands(Provider):
    async def discover(self) -> Hits:
        from ..app import CornusApp

        if isinstance(self.app, CornusApp):
            for title, help_text, callback in cornus_commands(self.app):
                yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        from ..app import CornusApp

        if not isinstance(self.app, CornusApp):
            return
        matcher = self.matcher(query)
        for title, help_text, callback in cornus_commands(self.app):
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)
