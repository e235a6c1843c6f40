"""The credentials panel: a summary per source and every request, newest first."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from cornus_core.stores import CredentialStore

from .colours import DIM, human_ms, outcome_text


class CredentialsPanel(Vertical):
    DEFAULT_CSS = """
    CredentialsPanel > .summary { height: auto; padding: 0 1; margin-bottom: 1; }
    CredentialsPanel > DataTable { height: 1fr; }
    """

    def __init__(self, store: CredentialStore, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self._seen = -1

    def compose(self) -> ComposeResult:
        yield Static(classes="summary")
        table: DataTable[str | Text] = DataTable(cursor_type="row", zebra_stripes=True)
        table.add_columns("#", "SOURCE", "DELIVERY", "CACHE", "OUTCOME", "LATENCY", "EXPIRES")
        yield table

    def sync(self) -> None:
        if self.store.version == self._seen:
            return
        self._seen = self.store.version
        summary = Text()
        if not self.store.by_name:
            summary.append("No credential requests yet.", style=DIM)
        for name, item in sorted(self.store.by_name.items()):
            if summary:
                summary.append("\n")
            summary.append(f"{name:<16}", style="bold")
            summary.append(f" {item.requests} requests, {item.fetched} fetched from this machine, last ")
            summary.append_text(outcome_text(item.last_outcome))
            if item.expiration:
                summary.append(f", expires {item.expiration}", style=DIM)
        self.query_one(".summary", Static).update(summary)
        table = self.query_one(DataTable)
        table.clear()
        for row in reversed(list(self.store.requests)):
            table.add_row(
                str(row.seq + 1),
                row.name,
                row.delivery,
                outcome_text(row.cache),
                outcome_text(row.outcome),
                human_ms(row.latency_ms),
                row.expiration or "",
            )
