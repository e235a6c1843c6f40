"""Shared helpers for the dashboard tests: the demo session and reading what the stream shows."""

from __future__ import annotations

from typing import Any

from cornus_tui.app import CornusApp
from cornus_tui.screens.dashboard import DashboardScreen
from cornus_tui.widgets.connections import ConnectionView

SIZE = (120, 34)


def dashboard(app: CornusApp) -> DashboardScreen:
    return app.dashboard


def stream(app: CornusApp) -> ConnectionView:
    return app.dashboard.query_one(ConnectionView)


def visible_lines(app: CornusApp) -> list[str]:
    """The text of the stream's lines as drawn now (blank lines dropped)."""
    view = stream(app)
    lines = [view.render_line(y).text.rstrip() for y in range(view.scrollable_content_region.height)]
    return [line for line in lines if line]


def panel(app: CornusApp) -> str:
    return app.dashboard.panel


def noop(*_: Any) -> None:
    return None
