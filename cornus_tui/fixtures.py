"""A fixed demo session for snapshot tests and screenshots: the same events, the same clock, every run.

The connection decisions come from the real policy engine routing each destination under
:data:`DEMO_POLICY`, so reasons and versions look exactly as a live session shows them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from cornus_core.events import (
    ConnEnd,
    CredentialRequest,
    HopDecision,
    Log,
    MountStats,
    Ready,
    Status,
)
from cornus_core.policy import Destination, compile_policy
from cornus_core.stores import Stores

from .app import AppConfig, CornusApp

DEMO_SERVER = "https://cornus.example.net"
DEMO_PAC = """\
function FindProxyForURL(url, host) {
  if (shExpMatch(host, "*.corp.example")) return "CLIENT";
  if (shExpMatch(host, "*.ads.example")) return "DENY";
  if (host == "pypi.org" || host == "registry.npmjs.org") return "GATEWAY";
  if (isInNet(host, "10.0.0.0", "255.0.0.0")) return "DIRECT";
  return "DIRECT";
}
"""
DEMO_POLICY: dict[str, Any] = {"default": "cluster", "rules": [], "script": DEMO_PAC}
DEMO_SAMPLES = ("intranet.corp.example:443", "metrics.ads.example:443", "8.8.8.8:53")
T0_MS = 1_767_261_600_000  # 2026-01-01 10:00:00 UTC

# (host, ip, port, outcome, reason, bytes up, bytes down, duration ms); outcome None: still open
_CONNECTIONS: list[tuple[str | None, str | None, int, str | None, str, int, int, float]] = [
    ("wiki.corp.example", "10.20.0.5", 443, "ok", "", 2_140, 48_812, 231.0),
    ("pypi.org", "151.101.0.223", 443, "ok", "", 1_820, 912_400, 1_240.0),
    (None, "10.0.3.7", 5432, "ok", "", 10_412, 88_210, 5_310.0),
    ("git.corp.example", "10.20.0.9", 22, "ok", "", 18_220, 2_410_992, 3_904.0),
    ("tracker.ads.example", None, 443, "deny", "policy", 0, 0, 0.2),
    ("registry.npmjs.org", "104.16.24.35", 443, "ok", "", 3_310, 1_722_113, 2_011.0),
    ("api.github.com", "140.82.121.6", 443, "ok", "", 1_204, 7_730, 188.0),
    ("jira.corp.example", "10.20.0.17", 443, "timeout", "dial timed out after 10s", 0, 0, 10_002.0),
    ("build.corp.example", "10.20.1.2", 8443, "refused", "connection refused", 0, 0, 3.1),
    ("pypi.org", "151.101.0.223", 443, "ok", "", 1_644, 401_778, 820.0),
    (None, "10.96.0.10", 53, "ok", "", 62, 118, 1.4),
    ("wiki.corp.example", "10.20.0.5", 443, "ok", "", 1_980, 22_004, 143.0),
    ("metrics.ads.example", None, 443, "deny", "policy", 0, 0, 0.1),
    ("files.corp.example", "10.20.0.44", 443, "ok", "", 802, 14_880_113, 9_322.0),
    ("objects.githubusercontent.com", "185.199.108.133", 443, "ok", "", 980, 3_201_455, 1_406.0),
    ("git.corp.example", "10.20.0.9", 22, None, "", 0, 0, 0.0),
    ("registry.npmjs.org", "104.16.24.35", 443, None, "", 0, 0, 0.0),
]
_HOPS_FOR = {"client": 3, "gateway": 2, "cluster": 1, "deny": 1}


class DemoClock:
    """A clock that only moves when told (so rates, timings and snapshots never vary)."""

    def __init__(self, start: float = 10_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def demo_stores() -> Stores:
    clock = DemoClock()
    stores = Stores(server=DEMO_SERVER, clock=clock)
    policy = compile_policy(DEMO_POLICY)
    for event in (
        Status(state="validating"),
        Status(state="deploying", detail="creating pod"),
        Ready(deployment="demo-7f3a", backend="local", policy_version=policy.version),
        Status(state="running", detail="pod ready; caretaker connected"),
    ):
        stores.apply(event)
    _feed_logs(stores)
    _feed_connections(stores, clock, policy)
    _feed_mounts(stores, clock)
    _feed_credentials(stores, clock)
    return stores


def _feed_logs(stores: Stores) -> None:
    lines = [
        ("caretaker", "roles: egress (proxy on 127.0.0.1:15002), mount, credential"),
        ("caretaker", "mounted /app/src (9p, msize 262144, read-only)"),
        ("caretaker", "mounted /data (9p, msize 262144)"),
        ("app", "Starting build worker 1.4.2"),
        ("app", "Fetching dependencies from pypi.org and registry.npmjs.org"),
        ("app", "Connected to postgres at 10.0.3.7:5432"),
        ("app", "Cloning git.corp.example:platform/tools.git"),
        ("app", "GET https://wiki.corp.example/api/pages 200 (231 ms)"),
        ("app", "warning: jira.corp.example unreachable, retrying in 5s"),
        ("app", "Build 418 started: 12 targets"),
        ("app", "Build 418: 7/12 targets done"),
    ]
    for source, line in lines:
        stores.apply(Log(source=source, line=line, stream="stderr" if "warning" in line else "stdout"))


def _feed_connections(stores: Stores, clock: DemoClock, policy: Any) -> None:
    for index, (host, ip, port, outcome, reason, up, down, duration) in enumerate(_CONNECTIONS):
        conn = f"c{index + 1:05d}"
        decision = policy.route(Destination(host, ip, port))
        route = str(decision.route)
        for step, hop in enumerate(("caretaker", "server", "client")[: _HOPS_FOR[route]]):
            clock.advance(0.0012 + 0.0007 * step)
            stores.apply(
                HopDecision(
                    conn=conn,
                    hop=hop,
                    route=route,
                    reason=decision.reason,
                    version=decision.version,
                    host=host,
                    ip=ip if hop != "caretaker" or host is None else None,
                    port=port,
                    t_ms=T0_MS + index * 1_370,
                )
            )
        if outcome is not None:
            last_hop = ("caretaker", "server", "client")[_HOPS_FOR[route] - 1]
            stores.apply(
                ConnEnd(
                    conn=conn,
                    hop=last_hop,
                    outcome=outcome,
                    reason=reason,
                    bytes_up=up,
                    bytes_down=down,
                    duration_ms=duration,
                )
            )
        clock.advance(0.4)


def _feed_mounts(stores: Stores, clock: DemoClock) -> None:
    totals: dict[str, dict[str, Any]] = {
        "src": {"ops": {}, "read": 0, "written": 0, "errors": 0, "latency": 0.0},
        "data": {"ops": {}, "read": 0, "written": 0, "errors": 0, "latency": 0.0},
    }
    for second in range(40):
        clock.advance(1.0)
        for name, total in totals.items():
            wave = 1.0 + math.sin(second / 4.0 + (0 if name == "src" else 2.0))
            ops = {"walk": int(40 * wave), "read": int(120 * wave), "getattr": int(60 * wave)}
            if name == "data":
                ops = {"write": int(30 * wave + 5), "read": int(10 * wave), "fsync": 2}
            for op, count in ops.items():
                total["ops"][op] = total["ops"].get(op, 0) + count
            total["read"] += int(ops.get("read", 0) * 16_384)
            total["written"] += int(ops.get("write", 0) * 65_536)
            total["errors"] += 1 if name == "src" and second % 13 == 5 else 0
            total["latency"] += sum(ops.values()) * (0.35 if name == "src" else 1.8)
            stores.apply(
                MountStats(
                    name=name,
                    ops=dict(total["ops"]),
                    bytes_read=total["read"],
                    bytes_written=total["written"],
                    errors=total["errors"],
                    latency_ms_sum=round(total["latency"], 3),
                )
            )


def _feed_credentials(stores: Stores, clock: DemoClock) -> None:
    requests = [
        ("aws", "endpoint (aws-imds)", "fetched", "ok", 412.0, "2026-01-01T11:00:00Z"),
        ("npm-token", "file ~/.npmrc", "fetched", "ok", 38.0, "2026-01-01T18:00:00Z"),
        ("aws", "endpoint (aws-imds)", "hit", "ok", 0.3, "2026-01-01T11:00:00Z"),
        ("github", "env GITHUB_TOKEN", "fetched", "error", 1_503.0, None),
        ("aws", "endpoint (aws-imds)", "hit", "ok", 0.2, "2026-01-01T11:00:00Z"),
        ("github", "env GITHUB_TOKEN", "fetched", "ok", 655.0, "2026-01-01T10:59:00Z"),
        ("aws", "endpoint (aws-imds)", "stale", "ok", 0.4, "2026-01-01T11:00:00Z"),
    ]
    for name, delivery, cache, outcome, latency, expiration in requests:
        clock.advance(3.0)
        stores.apply(
            CredentialRequest(
                name=name,
                delivery=delivery,
                cache=cache,
                outcome=outcome,
                latency_ms=latency,
                expiration=expiration,
            )
        )


class DemoController:
    """A session controller for the demo: remembers what was applied; teardown waits for ``release``."""

    def __init__(self, policy: Mapping[str, Any] | None = None, *, hold_teardown: bool = False) -> None:
        self.policy: dict[str, Any] = dict(policy if policy is not None else DEMO_POLICY)
        self.applied: list[dict[str, Any]] = []
        self.shutdowns = 0
        self.release = asyncio.Event()
        if not hold_teardown:
            self.release.set()

    @property
    def active_policy(self) -> dict[str, Any]:
        return self.policy

    async def apply_policy(self, spec: Mapping[str, Any]) -> str | None:
        compiled = compile_policy(spec)
        self.policy = dict(spec)
        self.applied.append(dict(spec))
        return compiled.version

    async def shutdown(self) -> None:
        self.shutdowns += 1
        await self.release.wait()


def demo_config(**changes: Any) -> AppConfig:
    config = AppConfig(keymap=None, utc=True, samples=DEMO_SAMPLES, refresh_hz=10.0, preview_debounce_s=0.05)
    return replace(config, **changes)


def demo_app(*, controller: DemoController | None = None, **config: Any) -> CornusApp:
    """The demo session in the app, as snapshot tests and screenshots show it."""
    return CornusApp(
        demo_stores(),
        session_controller=controller if controller is not None else DemoController(),
        config=demo_config(**config),
    )


# ------------------------------------------------------------------------------------------- scenes


async def wait_until(
    pilot: Pilot[Any], predicate: Callable[[], bool], what: str, timeout: float = 30.0
) -> None:
    """Let the app run until ``predicate()`` holds; TimeoutError naming ``what`` after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f}s")
        await pilot.pause(0.05)


async def steady(pilot: Pilot[Any]) -> None:
    """Stop cursors blinking on the current screen, so a picture of it never depends on timing:
    a focused widget shows its cursor, others do not."""
    widgets = [w for w in pilot.app.screen.query("Input, TextArea") if isinstance(w, Input | TextArea)]
    for widget in widgets:
        widget.cursor_blink = False
    await pilot.pause()  # a blink already on its way lands now, before the cursor is set for good
    for widget in widgets:
        widget._cursor_visible = widget.has_focus
        widget.refresh()
    await pilot.pause()


async def open_pac_editor(pilot: Pilot[Any]) -> Any:
    from .screens.pac_editor import PacEditorScreen

    await pilot.press("e")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, PacEditorScreen), "the PAC editor")
    screen = pilot.app.screen
    assert isinstance(screen, PacEditorScreen)
    await settle(pilot, screen)
    return screen


async def settle(pilot: Pilot[Any], screen: Any) -> None:
    """Wait until the PAC editor's preview shows its current draft."""
    await pilot.pause()
    await wait_until(pilot, lambda: not screen.preview_pending, "the preview of the current draft")


async def set_draft(pilot: Pilot[Any], screen: Any, text: str) -> None:
    screen.editor.text = text
    await settle(pilot, screen)


async def edit_draft(pilot: Pilot[Any], old: str, new: str) -> Any:
    """Open the editor, replace ``old`` with ``new`` in the draft, wait for the preview of the edit."""
    screen = await open_pac_editor(pilot)
    assert old in screen.editor.text, f"{old!r} is not in the draft"
    await set_draft(pilot, screen, screen.editor.text.replace(old, new))
    return screen


async def _none(pilot: Pilot[Any]) -> None:
    return None


async def _detail(pilot: Pilot[Any]) -> None:
    await pilot.press("up", "up", "up", "enter")


async def _filter(pilot: Pilot[Any]) -> None:
    await pilot.press("slash", *"corp", "enter")


async def _paused(pilot: Pilot[Any]) -> None:
    await pilot.press("space")


def _press(*keys: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press(*keys)

    return steps


async def _palette(pilot: Pilot[Any]) -> None:
    from textual.command import CommandPalette
    from textual.widgets import OptionList

    await pilot.press("colon", *"pac")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, CommandPalette), "the command palette")
    options = pilot.app.screen.query_one(OptionList)
    await wait_until(pilot, lambda: options.option_count > 0, "command palette hits")


async def _pac(pilot: Pilot[Any]) -> None:
    await open_pac_editor(pilot)


async def _pac_changes(pilot: Pilot[Any]) -> None:
    await edit_draft(pilot, 'return "DENY"', 'return "CLIENT"')


async def _pac_error(pilot: Pilot[Any]) -> None:
    await edit_draft(pilot, 'return "DIRECT";\n}', 'return "DIRECT"\n')


async def _teardown(pilot: Pilot[Any]) -> None:
    from .screens.teardown import TeardownScreen

    await pilot.press("q")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, TeardownScreen), "the teardown screen")


@dataclass(frozen=True)
class Scene:
    """One screen of the demo session, as the snapshot tests and the screenshots show it."""

    name: str
    steps: Callable[[Pilot[Any]], Awaitable[None]]
    size: tuple[int, int] = (120, 34)
    controller: Callable[[], DemoController] = field(default=DemoController)

    async def run(self, pilot: Pilot[Any]) -> None:
        await pilot.pause()
        await self.steps(pilot)
        await pilot.pause()
        await steady(pilot)


SCENES: tuple[Scene, ...] = (
    Scene("connections", _none),
    Scene("connections-detail", _detail),
    Scene("connections-filter", _filter),
    Scene("connections-paused", _paused),
    Scene("connections-narrow", _none, size=(80, 24)),
    Scene("mounts", _press("2")),
    Scene("credentials", _press("3")),
    Scene("session", _press("4")),
    Scene("help", _press("question_mark")),
    Scene("command-palette", _palette),
    Scene("pac-editor", _pac),
    Scene("pac-editor-changes", _pac_changes),
    Scene("pac-editor-error", _pac_error),
    Scene("teardown", _teardown, controller=lambda: DemoController(hold_teardown=True)),
)


def scene_app(scene: Scene) -> CornusApp:
    return demo_app(controller=scene.controller())
