"""The 9P mounts panel: per mount its current rates, totals and sparklines of recent history."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, Sparkline, Static

from cornus_core.stores import MountRow, MountStore

from .colours import DIM, human_bytes, human_ms


def mount_summary(row: MountRow) -> RenderableType:
    last = row.last
    text = Text()
    text.append(row.name, style="bold")
    text.append(f"   {row.total_ops} ops, read {human_bytes(row.bytes_read)}B, written ")
    text.append(f"{human_bytes(row.bytes_written)}B, ")
    text.append(f"{row.errors} errors", style="#ff5f87" if row.errors else DIM)
    text.append(f", mean {human_ms(row.mean_latency_ms)}\n")
    if last is None:
        text.append("waiting for a second report to measure rates", style=DIM)
        return text
    text.append(f"now {last.ops_per_s:,.0f} ops/s", style="bold")
    text.append(f"   read {human_bytes(last.read_bps)}B/s   write {human_bytes(last.write_bps)}B/s")
    text.append(f"   latency {human_ms(last.latency_ms)}")
    if last.errors:
        text.append(f"   {last.errors} errors", style="#ff5f87")
    busiest = sorted(row.op_rates.items(), key=lambda item: (-item[1], item[0]))[:6]
    if busiest:
        text.append("\n")
        text.append("  ".join(f"{op} {rate:,.0f}/s" for op, rate in busiest), style=DIM)
    return text


class MountCard(Vertical):
    DEFAULT_CSS = """
    MountCard { height: auto; border: round $primary 50%; padding: 0 1; margin-bottom: 1; }
    MountCard > .summary { height: auto; }
    MountCard Horizontal { height: 3; }
    MountCard .spark { width: 1fr; margin-right: 2; }
    MountCard .spark Label { color: $text-muted; }
    MountCard Sparkline { height: 2; }
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.mount_name = name

    def compose(self) -> ComposeResult:
        yield Static(classes="summary")
        with Horizontal():
            with Vertical(classes="spark"):
                yield Label("ops/s")
                yield Sparkline([], id="ops")
            with Vertical(classes="spark"):
                yield Label("bytes/s (read + write)")
                yield Sparkline([], id="bytes")

    def show(self, row: MountRow) -> None:
        self.query_one(".summary", Static).update(mount_summary(row))
        self.query_one("#ops", Sparkline).data = [s.ops_per_s for s in row.history]
        self.query_one("#bytes", Sparkline).data = [s.read_bps + s.write_bps for s in row.history]


class MountsPanel(VerticalScroll):
    DEFAULT_CSS = """
    MountsPanel { padding: 0 1; }
    MountsPanel > .empty { color: $text-muted; padding: 1; }
    """

    def __init__(self, store: MountStore, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self._seen = -1
        self._cards: dict[str, MountCard] = {}

    def compose(self) -> ComposeResult:
        yield Static("No local mounts in this session (--local-mount SRC:DST adds one).", classes="empty")

    def sync(self) -> None:
        if self.store.version == self._seen:
            return
        self._seen = self.store.version
        self.query_one(".empty").display = not self.store.mounts
        for name, row in self.store.mounts.items():
            card = self._cards.get(name)
            if card is None:
                card = self._cards[name] = MountCard(name)
                self.mount(card)
                self.call_after_refresh(card.show, row)
            else:
                card.show(row)
