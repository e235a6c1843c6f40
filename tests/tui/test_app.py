"""The dashboard driven by keys (Textual pilot) over the demo session and live events."""

from __future__ import annotations

from pathlib import Path

from textual.command import CommandPalette

from cornus_core.events import ConnEnd, HopDecision, Log
from cornus_core.stores import Stores
from cornus_tui.app import AppConfig, CornusApp, SessionController
from cornus_tui.fixtures import DemoController, demo_app, wait_until
from cornus_tui.screens.help import HelpScreen
from cornus_tui.screens.teardown import TeardownScreen
from cornus_tui.widgets.connections import ConnectionDetail
from cornus_tui.widgets.status_bar import StatusBar

from .conftest import SIZE, panel, stream, visible_lines


def hop(conn: str, host: str, route: str = "client", hop_name: str = "caretaker") -> HopDecision:
    return HopDecision(
        conn=conn, hop=hop_name, route=route, reason="default", version="v1", host=host, port=443
    )


async def test_number_keys_switch_panels_and_come_back() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        assert panel(app) == "connections"
        for key, name in (("2", "mounts"), ("3", "credentials"), ("4", "session"), ("1", "connections")):
            await pilot.press(key)
            assert panel(app) == name
        assert app.focused is stream(app)


async def test_the_stream_follows_new_connections_as_they_arrive() -> None:
    stores = Stores()
    app = CornusApp(stores, config=AppConfig(keymap=None, refresh_hz=20))
    async with app.run_test(size=SIZE) as pilot:
        assert visible_lines(app) == []
        for i in range(100):
            stores.apply(hop(f"c{i}", f"host{i}.example"))
        await wait_until(pilot, lambda: len(stream(app).rows) == 100, "100 rows in the stream")
        assert "host99.example" in visible_lines(app)[-1]
        stores.apply(hop("c100", "newest.example"))
        await wait_until(
            pilot, lambda: "newest.example" in visible_lines(app)[-1], "the newest row at the bottom"
        )
        # A later hop's event updates the row in place.
        stores.apply(ConnEnd(conn="c100", hop="client", outcome="timeout"))
        await wait_until(pilot, lambda: "timeout" in visible_lines(app)[-1], "the row's outcome")


async def test_moving_up_stops_following_and_end_resumes() -> None:
    stores = Stores()
    app = CornusApp(stores, config=AppConfig(keymap=None, refresh_hz=20))
    async with app.run_test(size=SIZE) as pilot:
        for i in range(200):
            stores.apply(hop(f"c{i}", f"host{i}.example"))
        await wait_until(pilot, lambda: len(stream(app).rows) == 200, "200 rows")
        await pilot.press("up", "up")
        view = stream(app)
        assert not view.follow and view.selected is not None and view.selected.conn == "c197"
        stores.apply(hop("c200", "late.example"))
        await wait_until(pilot, lambda: len(view.rows) == 201, "the new row")
        assert view.selected is not None and view.selected.conn == "c197"  # the cursor stays put
        await pilot.press("end")
        assert view.follow and view.selected is not None and view.selected.conn == "c200"


async def test_filter_narrows_the_stream_and_escape_clears_it() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        everything = len(stream(app).rows)
        await pilot.press("slash", *"deny")
        await wait_until(pilot, lambda: len(stream(app).rows) == 2, "only the denied connections")
        assert all("deny" in line for line in visible_lines(app))
        await pilot.press("enter")  # keeps the filter, back to the stream
        assert app.focused is stream(app) and len(stream(app).rows) == 2
        await pilot.press("escape")  # the filter bar is open: escape clears it
        await wait_until(pilot, lambda: len(stream(app).rows) == everything, "all rows again")


async def test_pause_freezes_the_view_while_the_stores_keep_counting() -> None:
    app = demo_app()
    stores = app.stores
    async with app.run_test(size=SIZE) as pilot:
        before = len(stream(app).rows)
        await pilot.press("space")
        assert app.dashboard.paused and app.dashboard.query_one(StatusBar).paused
        stores.apply(hop("late", "during-pause.example"))
        await pilot.pause(0.3)  # several refresh periods
        assert len(stream(app).rows) == before
        assert stores.connections.get("late") is not None
        await pilot.press("slash", *"pause", "enter")  # filtering a paused view keeps it frozen
        assert len(stream(app).rows) == 0
        await pilot.press("escape")
        assert len(stream(app).rows) == before
        await pilot.press("space")
        await wait_until(
            pilot, lambda: len(stream(app).rows) == before + 1, "the row that arrived while paused"
        )
        assert "during-pause.example" in visible_lines(app)[-1]


async def test_enter_shows_the_three_hop_trace_of_the_selected_connection() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        detail = app.dashboard.query_one(ConnectionDetail)
        assert not detail.has_class("-open")
        await pilot.press("up", "up", "up", "enter")
        assert detail.has_class("-open")
        row = detail.row
        assert row is not None and row.host == "files.corp.example"
        assert [row.hop_route(h) for h in ("caretaker", "server", "client")] == ["client"] * 3
        await pilot.press("up")  # the trace follows the cursor
        assert detail.row is not None and detail.row.host == "metrics.ads.example"
        assert detail.row.hop_route("server") == "not reached"
        await pilot.press("escape")
        assert not detail.has_class("-open")


async def test_help_lists_binding_ids_and_closes() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert app.screen.keys["pac.apply"] == "f5" and app.screen.keys["quit"] == "q"
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_the_command_palette_runs_cornus_commands() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"show mounts")
        await pilot.pause(0.2)
        await pilot.press("enter")
        await wait_until(pilot, lambda: panel(app) == "mounts", "the mounts panel")


async def test_session_panel_shows_new_log_lines() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        from textual.widgets import RichLog

        log = app.dashboard.query_one(RichLog)
        lines = len(log.lines)
        app.stores.apply(Log(source="app", line="a brand new line"))
        await wait_until(pilot, lambda: len(log.lines) == lines + 1, "the new log line")
        assert "a brand new line" in log.lines[-1].text


async def test_quit_without_a_session_exits_at_once() -> None:
    app = CornusApp(Stores(), config=AppConfig(keymap=None))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await wait_until(pilot, lambda: app.return_value == 0, "the app to exit")


async def test_quit_tears_the_session_down_and_says_so_until_done() -> None:
    controller = DemoController(hold_teardown=True)
    assert isinstance(controller, SessionController)
    app = demo_app(controller=controller)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen), "the teardown screen")
        await wait_until(pilot, lambda: controller.shutdowns == 1, "shutdown to be called")
        await pilot.press("q")  # pressing again does not tear down twice
        await pilot.pause(0.1)
        assert controller.shutdowns == 1 and app.return_value is None
        controller.release.set()
        await wait_until(pilot, lambda: app.return_value == 0, "the app to exit after teardown")


async def test_a_failed_teardown_exits_non_zero() -> None:
    class Failing(DemoController):
        async def shutdown(self) -> None:
            raise RuntimeError("server unreachable")

    app = demo_app(controller=Failing())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await wait_until(pilot, lambda: app.return_value == 1, "the app to exit with 1")
    assert app.return_code == 1


async def test_a_user_keymap_remaps_bindings_by_id(tmp_path: Path) -> None:
    keymap = tmp_path / "keymap.toml"
    keymap.write_text('[keymap]\n"panel.mounts" = "m"\npause = ["p", "f9"]\n')
    app = demo_app(keymap=keymap)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        assert panel(app) == "connections"  # the default key is replaced
        await pilot.press("m")
        assert panel(app) == "mounts"
        await pilot.press("f9")
        assert app.dashboard.paused


async def test_a_bad_keymap_is_reported_and_the_defaults_stay(tmp_path: Path) -> None:
    keymap = tmp_path / "keymap.toml"
    keymap.write_text('[keymap]\n"panel.nope" = "m"\n')
    app = demo_app(keymap=keymap)
    async with app.run_test(size=SIZE) as pilot:
        messages = [str(n.message) for n in app._notifications]
        assert any("unknown binding id 'panel.nope'" in m and str(keymap) in m for m in messages)
        await pilot.press("2")
        assert panel(app) == "mounts"
