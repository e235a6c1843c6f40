"""The live connection stream: a Line-API scroll view over a snapshot of the connection ring.

Only the visible lines are rendered; the view is handed a new snapshot (a list of immutable rows) a
few times a second, never one message per event. With ``follow`` on, the cursor stays on the newest
row; moving the cursor up turns follow off, ``end`` turns it back on.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from cornus_core.events import HOPS
from cornus_core.stores import OPEN, ConnectionRow

from ..keymap import BINDING_IDS
from .colours import DIM, clock_time, human_bytes, human_ms, outcome_style, route_style, route_text


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    title: str
    width: int
    right: bool = False


_COLUMNS = (
    Column("time", "TIME", 12),
    Column("dest", "DESTINATION", 0),  # takes what is left
    *(Column(hop, hop.upper(), 9) for hop in HOPS),
    Column("outcome", "OUTCOME", 7),
    Column("up", "↑", 6, right=True),
    Column("down", "↓", 6, right=True),
    Column("duration", "DURATION", 8, right=True),
)
_DROP_ORDER = (("duration",), ("up", "down"), ("time",))  # what goes first when the terminal is narrow
_MIN_DEST = 18


def layout(width: int) -> tuple[Column, ...]:
    """The columns that fit ``width`` cells, the destination widened to fill the rest."""
    columns = list(_COLUMNS)
    for keys in ((), *_DROP_ORDER):
        columns = [column for column in columns if column.key not in keys]
        fixed = sum(column.width for column in columns) + len(columns)  # one space before each
        if width - fixed >= _MIN_DEST:
            break
    dest = max(_MIN_DEST, width - fixed)
    return tuple(Column(c.key, c.title, dest) if c.key == "dest" else c for c in columns)


def _fit(text: str, width: int, right: bool) -> str:
    if len(text) > width:
        return text[: max(0, width - 1)] + "…"
    return text.rjust(width) if right else text.ljust(width)


def header_line(width: int) -> Text:
    text = Text(no_wrap=True, overflow="crop")
    for column in layout(width):
        text.append(" " + _fit(column.title, column.width, column.right), style="bold")
    return text


def row_segments(row: ConnectionRow, columns: Sequence[Column], *, utc: bool) -> list[Segment]:
    segments: list[Segment] = []
    for column in columns:
        key = column.key
        style: Style | None = None
        if key == "time":
            value, style = clock_time(row.t_ms, utc=utc), DIM
        elif key == "dest":
            value = row.dest
        elif key in HOPS:
            trace = row.hops.get(key)
            value, style = (trace.route, route_style(trace.route)) if trace else ("·", DIM)
        elif key == "outcome":
            value = "…" if row.outcome == OPEN else row.outcome
            style = outcome_style(row.outcome)
        elif key == "up":
            value = human_bytes(row.bytes_up) if row.outcome != OPEN or row.bytes_up else ""
        elif key == "down":
            value = human_bytes(row.bytes_down) if row.outcome != OPEN or row.bytes_down else ""
        else:
            value = human_ms(row.duration_ms) if row.outcome != OPEN else ""
        segments.append(Segment(" "))
        segments.append(Segment(_fit(value, column.width, column.right), style))
    return segments


class ConnectionHeader(Static):
    """The column titles above the stream, laid out for the stream's width (less its scrollbar)."""

    DEFAULT_CSS = """
    ConnectionHeader { height: 1; background: $panel; color: $text-muted; }
    """

    def __init__(self, view: ConnectionView) -> None:
        super().__init__()
        self.stream = view

    def render(self) -> RenderableType:
        return header_line(self.stream.size.width or self.size.width)


class ConnectionView(ScrollView, can_focus=True):
    """The connection rows, one line each, newest at the bottom."""

    DEFAULT_CSS = """
    ConnectionView { height: 1fr; overflow-x: hidden; }
    ConnectionView > .connection-view--cursor { background: $primary 25%; }
    ConnectionView:focus > .connection-view--cursor { background: $primary 45%; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"connection-view--cursor"}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "first", "First", show=False),
        Binding(
            "end,G",
            "last",
            "Follow",
            show=False,
            id="connections.follow",
            tooltip=BINDING_IDS["connections.follow"],
        ),
    ]

    class Resized(Message):
        """The stream's width changed: the column header follows."""

    class CursorMoved(Message):
        """The user moved the cursor (not sent when new rows arrive)."""

        def __init__(self, row: ConnectionRow | None) -> None:
            super().__init__()
            self.row = row

    def __init__(self, *, utc: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: Sequence[ConnectionRow] = ()
        self.cursor = -1
        self.follow = True
        self.utc = utc

    @property
    def selected(self) -> ConnectionRow | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def show(self, rows: Sequence[ConnectionRow]) -> None:
        """Replace the rows (a new snapshot); keeps the cursor on its row unless following."""
        selected = self.selected
        self.rows = rows
        if self.follow or selected is None:
            self.cursor = len(rows) - 1
        else:
            self.cursor = _index_of(rows, selected.seq)
        self.virtual_size = Size(self.size.width, len(rows))
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
        else:
            self._keep_cursor_visible()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        index = round(self.scroll_offset.y) + y
        base = self.rich_style
        if not 0 <= index < len(self.rows):
            return Strip.blank(width, base)
        segments = row_segments(self.rows[index], layout(width), utc=self.utc)
        cursor = None
        if index == self.cursor:
            # Only the background: the route and outcome colours stay readable on the cursor row.
            cursor = Style(bgcolor=self.get_component_rich_style("connection-view--cursor").bgcolor)
        return Strip(Segment.apply_style(segments, base, cursor)).adjust_cell_length(width, base + cursor)

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(event.size.width, len(self.rows))
        self.post_message(self.Resized())

    def on_click(self, event: events.Click) -> None:
        index = round(self.scroll_offset.y) + event.y
        if 0 <= index < len(self.rows):
            self._move_to(index)

    def action_cursor(self, delta: int) -> None:
        self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(1, self.scrollable_content_region.height - 1))

    def action_first(self) -> None:
        self._move_to(0)

    def action_last(self) -> None:
        self._move_to(len(self.rows) - 1)

    def _move_to(self, index: int) -> None:
        if not self.rows:
            return
        self.cursor = max(0, min(index, len(self.rows) - 1))
        self.follow = self.cursor == len(self.rows) - 1
        self._keep_cursor_visible()
        self.refresh()
        self.post_message(self.CursorMoved(self.selected))

    def _keep_cursor_visible(self) -> None:
        height = max(1, self.scrollable_content_region.height)
        top = round(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True, force=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True, force=True)


def _index_of(rows: Sequence[ConnectionRow], seq: int) -> int:
    """The index of the row numbered ``seq`` (rows are in ``seq`` order), or the nearest newer one."""
    index = bisect_left(rows, seq, key=lambda row: row.seq)
    return min(index, len(rows) - 1)


class ConnectionDetail(Static):
    """The full three-hop trace of one connection."""

    DEFAULT_CSS = """
    ConnectionDetail {
        height: auto; max-height: 16; border-top: solid $accent; padding: 0 1; display: none;
    }
    ConnectionDetail.-open { display: block; }
    """

    def __init__(self, *, utc: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.utc = utc
        self.row: ConnectionRow | None = None
        self._drawn = False  # whether what is drawn is ``row``

    def show_row(self, row: ConnectionRow | None) -> None:
        """Follow ``row``; drawn only while the detail is open (an update costs a layout of the screen)."""
        if row is not self.row:
            self.row, self._drawn = row, False
        if not self._drawn and self.has_class("-open"):
            self._drawn = True
            self.update(detail_renderable(row, utc=self.utc))


def detail_renderable(row: ConnectionRow | None, *, utc: bool = False) -> RenderableType:
    if row is None:
        return Text("No connection selected.", style=DIM)
    title = Text.assemble((row.dest, "bold"), "  ")
    if row.host and row.ip:
        title.append(f"({row.ip})  ", style=DIM)
    title.append(f"connection {row.conn}  at {clock_time(row.t_ms, utc=utc)}", style=DIM)

    summary = Text("route ")
    summary.append_text(route_text(row.route or "—"))
    summary.append("   outcome ")
    summary.append("open" if row.outcome == OPEN else row.outcome, style=outcome_style(row.outcome))
    if row.end_reason:
        summary.append(f" ({row.end_reason})", style=DIM)
    if row.end_hop:
        summary.append(f" reported by {row.end_hop}", style=DIM)
    if row.outcome != OPEN:
        summary.append(
            f"   ↑ {human_bytes(row.bytes_up)}  ↓ {human_bytes(row.bytes_down)}  in {human_ms(row.duration_ms)}"
        )

    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, header_style="bold", expand=False)
    for name in ("HOP", "ROUTE", "POLICY", "DECIDED BY", "AFTER"):
        table.add_column(name, no_wrap=name != "DECIDED BY", justify="right" if name == "AFTER" else "left")
    for hop in HOPS:
        trace = row.hops.get(hop)
        if trace is None:
            table.add_row(hop, Text("not reached", style=DIM), "", "", "")
        else:
            after = f"+{human_ms(trace.after_ms)}"
            table.add_row(hop, route_text(trace.route), trace.version, trace.reason, after)
    parts: list[RenderableType] = [title, summary, table]
    if not row.versions_agree:
        parts.append(
            Text("The hops decided with different policy versions (an update was in flight).", "yellow")
        )
    return Group(*parts)
