"""The main screen: the session bar, four panels (connections, mounts, credentials, session), the footer.

A timer pulls from the stores a few times a second and redraws only the visible panel, and only when
its store's version moved; ``space`` pauses that (the stores keep counting).
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Input, Label, TabbedContent, TabPane

from cornus_core.stores import ConnectionRow, Stores, filter_rows

from ..keymap import BINDING_IDS
from ..widgets.connections import ConnectionDetail, ConnectionHeader, ConnectionView
from ..widgets.credentials import CredentialsPanel
from ..widgets.footer import Footer
from ..widgets.mounts import MountsPanel
from ..widgets.session import SessionPanel
from ..widgets.status_bar import StatusBar

if TYPE_CHECKING:
    from ..app import CornusApp

PANELS = ("connections", "mounts", "credentials", "session")
_frozen = False


def _freeze_what_is_loaded() -> None:
    """Once per process: keep what is loaded by now (modules, the app, the session) out of the collector's
    full passes. They live as long as the process anyway; with a busy stream a full pass otherwise walks
    all of them every second or two and stalls keys by tens of milliseconds."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()


class DashboardScreen(Screen[None]):
    DEFAULT_CSS = """
    DashboardScreen #filter-bar { display: none; height: 1; background: $boost; }
    DashboardScreen #filter-bar.-open { display: block; }
    DashboardScreen #filter-bar Label { padding: 0 1; color: $text-muted; }
    DashboardScreen #filter { width: 1fr; height: 1; border: none; padding: 0; background: $boost; }
    DashboardScreen #filter-count { width: auto; padding: 0 1; color: $text-muted; }
    DashboardScreen #panels { height: 1fr; }
    DashboardScreen #panels > ContentSwitcher { height: 1fr; }
    DashboardScreen TabPane { padding: 0; height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "1",
            "panel('connections')",
            "Connections",
            id="panel.connections",
            tooltip=BINDING_IDS["panel.connections"],
        ),
        Binding("2", "panel('mounts')", "Mounts", id="panel.mounts", tooltip=BINDING_IDS["panel.mounts"]),
        Binding(
            "3",
            "panel('credentials')",
            "Credentials",
            id="panel.credentials",
            tooltip=BINDING_IDS["panel.credentials"],
        ),
        Binding("4", "panel('session')", "Session", id="panel.session", tooltip=BINDING_IDS["panel.session"]),
        Binding("slash", "filter", "Filter", id="filter", tooltip=BINDING_IDS["filter"]),
        Binding("space", "pause", "Pause", id="pause", tooltip=BINDING_IDS["pause"]),
        Binding("enter", "detail", "Detail", id="detail", tooltip=BINDING_IDS["detail"]),
        Binding("e", "pac_editor", "PAC editor", id="pac-editor", tooltip=BINDING_IDS["pac-editor"]),
        Binding("escape", "back", "Back", show=False),
    ]

    paused: reactive[bool] = reactive(False)

    def __init__(self, stores: Stores, *, refresh_hz: float = 5.0, utc: bool = False) -> None:
        super().__init__()
        self.stores = stores
        self.refresh_hz = refresh_hz
        self.utc = utc
        self.needle = ""
        self._rows: list[ConnectionRow] = []
        self._rows_version = -1
        self._conn_seen: tuple[int, str] | None = None
        self._count = ""  # "shown of held", drawn in the filter bar while it is open

    @property
    def cornus(self) -> CornusApp:
        from ..app import CornusApp

        assert isinstance(self.app, CornusApp)
        return self.app

    def compose(self) -> ComposeResult:
        yield StatusBar(self.stores, id="status")
        with TabbedContent(initial="connections", id="panels"):
            with TabPane("1 Connections", id="connections"):
                with Horizontal(id="filter-bar"):
                    yield Label("filter")
                    yield Input(
                        placeholder="host, IP, port, route, outcome or reason; esc clears", id="filter"
                    )
                    yield Label(id="filter-count")
                view = ConnectionView(utc=self.utc, id="stream")
                yield ConnectionHeader(view)
                yield view
                yield ConnectionDetail(utc=self.utc, id="detail")
            with TabPane("2 Mounts", id="mounts"):
                yield MountsPanel(self.stores.mounts, id="mounts-panel")
            with TabPane("3 Credentials", id="credentials"):
                yield CredentialsPanel(self.stores.credentials, id="credentials-panel")
            with TabPane("4 Session", id="session"):
                yield SessionPanel(self.stores.session, id="session-panel")
        yield Footer()

    def on_mount(self) -> None:
        _freeze_what_is_loaded()
        self.query_one(ConnectionView).focus()
        self.sync()
        self.set_interval(1 / self.refresh_hz, self.sync, name="pull stores")

    # ------------------------------------------------------------------ pulling from the stores

    @property
    def panel(self) -> str:
        return self.query_one(TabbedContent).active

    def sync(self, *, force: bool = False) -> None:
        """Redraw what changed in the visible panel (nothing while paused, unless forced)."""
        if self.paused and not force:
            return
        self.query_one(StatusBar).sync()
        panel = self.panel
        if panel == "connections":
            self._sync_connections()
        elif panel == "mounts":
            self.query_one(MountsPanel).sync()
        elif panel == "credentials":
            self.query_one(CredentialsPanel).sync()
        elif panel == "session":
            self.query_one(SessionPanel).sync()

    def _sync_connections(self) -> None:
        store = self.stores.connections
        if not self.paused:  # paused, the filter still works, over the rows shown when it paused
            self._rows, self._rows_version = store.rows(), store.version
        key = (self._rows_version, self.needle)
        if key == self._conn_seen:
            return
        self._conn_seen = key
        view = self.query_one(ConnectionView)
        rows = self._rows
        shown = filter_rows(rows, self.needle) if self.needle else rows
        view.show(shown)
        self._count = f"{len(shown)} of {len(rows)}"
        self._show_count()
        self.query_one(ConnectionDetail).show_row(view.selected)

    def _show_count(self) -> None:
        """Only while the filter bar is open, only when it changed: an update costs a layout of the screen."""
        label = self.query_one("#filter-count", Label)
        if self.query_one("#filter-bar").has_class("-open") and label.content != self._count:
            label.update(self._count)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.sync(force=True)
        if event.pane.id == "connections":
            self.query_one(ConnectionView).focus()

    def on_connection_view_resized(self) -> None:
        self.query_one(ConnectionHeader).refresh()

    def on_connection_view_cursor_moved(self, event: ConnectionView.CursorMoved) -> None:
        self.query_one(ConnectionDetail).show_row(event.row)

    # ------------------------------------------------------------------ actions

    def action_panel(self, name: str) -> None:
        if name in PANELS:
            self.query_one(TabbedContent).active = name

    def action_filter(self) -> None:
        self.action_panel("connections")
        self.query_one("#filter-bar").add_class("-open")
        self._show_count()
        self.query_one("#filter", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.needle = event.value.strip()
            self._sync_connections()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value.strip():
                self.query_one("#filter-bar").remove_class("-open")
            self.query_one(ConnectionView).focus()

    def action_back(self) -> None:
        bar = self.query_one("#filter-bar")
        detail = self.query_one(ConnectionDetail)
        if bar.has_class("-open"):
            self.query_one("#filter", Input).value = ""
            bar.remove_class("-open")
            self.query_one(ConnectionView).focus()
        elif detail.has_class("-open"):
            detail.remove_class("-open")

    def action_pause(self) -> None:
        self.paused = not self.paused

    def watch_paused(self, paused: bool) -> None:
        self.query_one(StatusBar).paused = paused
        if not paused:
            self.sync()

    def action_detail(self) -> None:
        if self.panel != "connections":
            return
        detail = self.query_one(ConnectionDetail)
        detail.toggle_class("-open")
        detail.show_row(self.query_one(ConnectionView).selected)

    def action_pac_editor(self) -> None:
        self.cornus.open_pac_editor()
