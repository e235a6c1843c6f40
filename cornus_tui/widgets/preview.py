"""Route preview for a draft policy: how recent and sample destinations route under it and under the
active policy, and what would change. The computation is plain Python (it runs on a worker thread);
the table only draws its result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from cornus_core.policy import Destination, Policy, PolicyError, compile_policy

from .colours import DIM, route_text


@dataclass(frozen=True, slots=True)
class Probe:
    """One destination to preview; ``origin`` is ``recent`` (seen in this session) or ``sample``."""

    label: str
    dest: Destination
    origin: str = "recent"
    t_ms: int | None = None  # the connection's stamped time, for time-dependent scripts


@dataclass(frozen=True, slots=True)
class PreviewRow:
    probe: Probe
    active: str  # route under the active policy ("" when there is none)
    draft: str  # route under the draft ("" when the draft does not compile)
    reason: str  # why the draft routes it so

    @property
    def change(self) -> str:
        if not self.active or not self.draft or self.active == self.draft:
            return ""
        return f"would change: {self.active} -> {self.draft}"


@dataclass(frozen=True, slots=True)
class Preview:
    rows: tuple[PreviewRow, ...]
    draft_version: str | None  # None when the draft does not compile
    error: PolicyError | None
    active_version: str | None

    @property
    def changes(self) -> int:
        return sum(1 for row in self.rows if row.change)


def source_dict(source: object) -> dict[str, Any]:
    """``default``/``rules``/``script`` of an egress spec, a mapping shaped like one, or None."""
    if source is None:
        return {"default": None, "rules": [], "script": None}

    def field(obj: object, name: str) -> Any:
        return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)

    rules = [
        {"pattern": field(rule, "pattern"), "route": field(rule, "route")}
        for rule in field(source, "rules") or ()
    ]
    return {"default": field(source, "default"), "rules": rules, "script": field(source, "script")}


def draft_source(active: Mapping[str, Any], script: str) -> dict[str, Any]:
    """The draft policy: the active default and rules, with ``script`` (a script supersedes the rules)."""
    return {
        "default": active.get("default"),
        "rules": list(active.get("rules") or []),
        "script": script if script.strip() else None,  # a blank draft means the rules again
    }


def compute_preview(
    draft: Mapping[str, Any],
    active: Mapping[str, Any] | None,
    probes: Sequence[Probe],
    *,
    active_policy: Policy | None = None,
) -> Preview:
    """Compile the draft (and the active policy unless given) and route every probe under both.

    Runs PAC code: call it off the UI thread.
    """
    if active_policy is None and active is not None:
        try:
            active_policy = compile_policy(active)
        except PolicyError:
            active_policy = None
    try:
        draft_policy: Policy | None = compile_policy(draft)
        error = None
    except PolicyError as exc:
        draft_policy, error = None, exc
    rows = []
    for probe in probes:
        before = active_policy.route(probe.dest, now_ms=probe.t_ms) if active_policy else None
        after = draft_policy.route(probe.dest, now_ms=probe.t_ms) if draft_policy else None
        rows.append(
            PreviewRow(
                probe,
                active=str(before.route) if before else "",
                draft=str(after.route) if after else "",
                reason=after.reason if after else "",
            )
        )
    return Preview(
        tuple(rows),
        draft_policy.version if draft_policy else None,
        error,
        active_policy.version if active_policy else None,
    )


def error_text(error: PolicyError) -> str:
    """``line 3, column 7: syntax error: ...`` (the place first, as an editor shows it)."""
    where = []
    if error.line is not None:
        where.append(f"line {error.line}")
        if error.column is not None:
            where.append(f"column {error.column}")
    prefix = ", ".join(where) or error.source
    return f"{prefix}: {error.message}"


class PreviewTable(DataTable[Text | str]):
    """Each destination's route under the draft and what would change against the active policy,
    changes first."""

    DEFAULT_CSS = """
    PreviewTable { height: 1fr; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        # The active route shows in CHANGE when it differs (and equals DRAFT when it does not).
        self.add_column("DESTINATION", width=28)
        self.add_columns("DRAFT", "CHANGE", "DECIDED BY")

    def show(self, preview: Preview) -> None:
        self.clear()
        ordered = sorted(preview.rows, key=lambda row: (not row.change, row.probe.origin != "sample"))
        for row in ordered:
            label = Text(row.probe.label, overflow="ellipsis", no_wrap=True)
            if row.probe.origin == "sample":
                label = Text.assemble(("+ ", "bold"), label, overflow="ellipsis", no_wrap=True)
            self.add_row(
                label,
                route_text(row.draft) if row.draft else Text("—", style=DIM),
                Text(row.change, style="bold #ffaf00"),
                Text(row.reason, style=DIM),
            )
