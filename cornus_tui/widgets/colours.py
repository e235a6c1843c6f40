"""One colour per route and per outcome, used by every panel, and small value formatters."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.style import Style
from rich.text import Text

ROUTE_COLOURS: dict[str, str] = {
    "client": "#5fafff",  # leaves from this machine
    "gateway": "#d787ff",  # leaves from the server
    "cluster": "#87d75f",  # leaves from the pod's own network
    "deny": "#ff5f5f",
}
OUTCOME_COLOURS: dict[str, str] = {
    "ok": "#87d75f",
    "hit": "#87d75f",
    "fetched": "#5fafff",
    "stale": "#ffaf00",
    "deny": "#ff5f5f",
    "refused": "#ffaf00",
    "timeout": "#ffd75f",
    "error": "#ff5f87",
    "failed": "#ff5f87",
    "running": "#87d75f",
    "done": "#8a8a8a",
}
DIM = Style(color="#6c6c6c")
UNKNOWN = Style(color="#bcbcbc")

_ROUTE_STYLES = {name: Style(color=colour, bold=name == "deny") for name, colour in ROUTE_COLOURS.items()}
_OUTCOME_STYLES = {name: Style(color=colour) for name, colour in OUTCOME_COLOURS.items()}


def route_style(route: str) -> Style:
    return _ROUTE_STYLES.get(route, UNKNOWN)


def outcome_style(outcome: str) -> Style:
    return _OUTCOME_STYLES.get(outcome, DIM if outcome in ("open", "not reached", "") else UNKNOWN)


def route_text(route: str) -> Text:
    return Text(route, style=route_style(route))


def outcome_text(outcome: str) -> Text:
    return Text(outcome, style=outcome_style(outcome))


def human_bytes(count: float) -> str:
    """``812``, ``4.2K``, ``17M``: at most four characters plus the unit."""
    value = float(count)
    for unit in ("", "K", "M", "G", "T"):
        if abs(value) < 1000 or unit == "T":
            if not unit:
                return f"{int(value)}"
            return f"{value:.1f}{unit}" if abs(value) < 10 else f"{value:.0f}{unit}"
        value /= 1000
    raise AssertionError("unreachable")


def human_ms(ms: float) -> str:
    """``0.4ms``, ``35ms``, ``2.1s``, ``4m05s``."""
    if ms < 10:
        return f"{ms:.1f}ms"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s"


def clock_time(t_ms: int, *, utc: bool = False) -> str:
    """``HH:MM:SS.mmm`` of a connection's stamped time (local time unless ``utc``)."""
    if t_ms <= 0:
        return "--:--:--.---"
    moment = datetime.fromtimestamp(t_ms / 1000, UTC)
    if not utc:
        moment = moment.astimezone()
    return moment.strftime("%H:%M:%S.") + f"{t_ms % 1000:03d}"
