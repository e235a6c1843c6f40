"""A busy session: 20,000 events while the app runs. Behaviour only: keys still work, and the stream
shows the newest connections (no timing is asserted)."""

from __future__ import annotations

import asyncio

from cornus_core.events import ConnEnd, HopDecision
from cornus_core.stores import Stores
from cornus_tui.app import AppConfig, CornusApp
from cornus_tui.fixtures import wait_until

from .conftest import SIZE, panel, stream, visible_lines

EVENTS = 20_000
HOLD_AT = 15_000  # the feeder waits here until the key press has been seen
ROUTES = ("client", "gateway", "cluster", "deny")


def events() -> list[HopDecision | ConnEnd]:
    out: list[HopDecision | ConnEnd] = []
    i = 0
    while len(out) < EVENTS:
        conn, host, route = f"c{i}", f"host{i}.example", ROUTES[i % 4]
        out.append(
            HopDecision(
                conn=conn, hop="caretaker", route=route, reason="default", version="v1", host=host, port=443
            )
        )
        out.append(
            HopDecision(
                conn=conn, hop="server", route=route, reason="default", version="v1", host=host, port=443
            )
        )
        out.append(
            ConnEnd(conn=conn, hop="server", outcome="ok", bytes_up=i, bytes_down=2 * i, duration_ms=1.0)
        )
        i += 1
    return out[:EVENTS]


async def test_twenty_thousand_events_while_the_app_runs() -> None:
    stores = Stores()
    app = CornusApp(stores, config=AppConfig(keymap=None, refresh_hz=10))
    feed = events()
    fed = 0
    key_seen = asyncio.Event()

    async def feeder() -> None:
        nonlocal fed
        for start in range(0, EVENTS, 250):
            if start >= HOLD_AT:
                await key_seen.wait()
            for event in feed[start : start + 250]:
                stores.apply(event)  # as the session does: straight into the stores, no UI message
            fed = start + 250
            await asyncio.sleep(0)

    async with app.run_test(size=SIZE) as pilot:
        task = asyncio.create_task(feeder())
        await wait_until(pilot, lambda: fed >= 2_000, "the feed to get going")
        await pilot.press("2")
        assert panel(app) == "mounts" and fed < EVENTS
        await pilot.press("1")
        assert panel(app) == "connections"
        key_seen.set()
        await task
        last = feed[-1].conn
        await wait_until(
            pilot, lambda: bool(stream(app).rows) and stream(app).rows[-1].conn == last, "the last row"
        )
        lines = visible_lines(app)
        assert len(lines) == stream(app).scrollable_content_region.height
        newest = stores.connections.get(last)
        assert newest is not None and f"{newest.host}:443" in lines[-1]
        assert len(stores.connections) == 6_667 and stores.connections.total == 6_667
        await pilot.press("up", "enter")  # still answering keys with a full ring
        assert app.dashboard.query_one("#detail").has_class("-open")
