"""The session panel: where the workload runs, its state, and its log."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog, Static

from cornus_core.stores import SessionStore

from .colours import DIM, outcome_style

_SOURCE_STYLES = {"app": "#87afd7", "caretaker": "#d7af87", "server": "#af87d7", "cornus": "#ffaf00"}


class SessionPanel(Vertical):
    DEFAULT_CSS = """
    SessionPanel > .facts { height: auto; padding: 0 1; margin-bottom: 1; }
    SessionPanel > RichLog { height: 1fr; border-top: solid $primary 50%; }
    """

    def __init__(self, store: SessionStore, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self._seen = -1
        self._next_line = 0

    def compose(self) -> ComposeResult:
        yield Static(classes="facts")
        yield RichLog(max_lines=self.store.log.capacity, wrap=False, markup=False, auto_scroll=True)

    def sync(self) -> None:
        store = self.store
        if store.version == self._seen:
            return
        self._seen = store.version
        facts = Table.grid(padding=(0, 2))
        facts.add_column(style="bold", no_wrap=True)
        facts.add_column()
        facts.add_row("server", store.server or Text("embedded (local)", style=DIM))
        state = Text(store.state, style=outcome_style(store.state))
        if store.pod_status:
            state.append(f"  {store.pod_status}", style=DIM)
        facts.add_row("state", state)
        facts.add_row("backend", store.backend or Text("—", style=DIM))
        facts.add_row("deployment", store.deployment or Text("—", style=DIM))
        facts.add_row("policy", store.policy_version or Text("—", style=DIM))
        if store.exit_code is not None:
            facts.add_row("exit code", Text(str(store.exit_code), style="bold" if store.exit_code else ""))
        if store.done_reason is not None:
            facts.add_row("ended", store.done_reason or "—")
        if store.errors:
            facts.add_row("last error", Text(store.errors[-1], style="#ff5f87"))
        self.query_one(".facts", Static).update(facts)
        log = self.query_one(RichLog)
        for line in store.log.since(self._next_line):
            text = Text(no_wrap=True)
            text.append(f"{line.source:>9} ", style=_SOURCE_STYLES.get(line.source, DIM))
            text.append(line.line, style="#ff8787" if line.stream == "stderr" else "")
            log.write(text)
        self._next_line = store.log.next
