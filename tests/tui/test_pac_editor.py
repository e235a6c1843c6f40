"""The PAC editor: every edit previews routes under the draft, errors show where, one key applies,
and a watched file updates the draft when another editor saves it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from textual.widgets import Input

from cornus_core.spec import EgressSpec
from cornus_tui.app import CornusApp
from cornus_tui.fixtures import (
    DEMO_PAC,
    DemoController,
    demo_app,
    demo_config,
    demo_stores,
    edit_draft,
    open_pac_editor,
    set_draft,
    settle,
    wait_until,
)
from cornus_tui.screens.pac_editor import PacEditorScreen

from .conftest import SIZE


def routes(screen: PacEditorScreen) -> dict[str, tuple[str, str, str]]:
    assert screen.preview is not None
    return {row.probe.label: (row.active, row.draft, row.change) for row in screen.preview.rows}


async def test_opening_previews_recent_and_sample_destinations_under_both_policies() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_pac_editor(pilot)
        assert screen.editor.text == DEMO_PAC  # the active script is the first draft
        table = routes(screen)
        assert table["wiki.corp.example:443"] == ("client", "client", "")
        assert table["tracker.ads.example:443"] == ("deny", "deny", "")
        assert table["8.8.8.8:53"] == ("cluster", "cluster", "")  # a sample
        assert screen.preview is not None and screen.preview.changes == 0
        assert screen.preview.active_version == screen.preview.draft_version


async def test_an_edit_shows_what_would_change_and_f5_applies_it() -> None:
    controller = DemoController()
    app = demo_app(controller=controller)
    async with app.run_test(size=SIZE) as pilot:
        screen = await edit_draft(pilot, 'return "DENY"', 'return "CLIENT"')
        table = routes(screen)
        assert table["tracker.ads.example:443"] == ("deny", "client", "would change: deny -> client")
        assert table["wiki.corp.example:443"][2] == ""
        assert screen.preview is not None and screen.preview.changes == 3
        draft_version = screen.preview.draft_version

        await pilot.press("f5")
        await wait_until(pilot, lambda: len(controller.applied) == 1, "the controller to get the policy")
        applied = controller.applied[0]
        assert set(applied) == {"default", "rules", "script"}
        assert 'return "CLIENT"' in applied["script"] and "DENY" not in applied["script"]
        await wait_until(pilot, lambda: app.stores.session.policy_version == draft_version, "the new version")
        # The applied draft is now the active policy: nothing would change any more.
        await wait_until(
            pilot, lambda: screen.preview is not None and screen.preview.changes == 0, "a preview against it"
        )


async def test_typing_in_the_editor_updates_the_preview() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_pac_editor(pilot)
        editor = screen.editor
        line = next(i for i, text in enumerate(editor.text.splitlines()) if "*.corp.example" in text)
        editor.cursor_location = (line, 2)
        await pilot.press(*'if (host == "wiki.corp.example") return "DENY"; ')
        await settle(pilot, screen)
        assert routes(screen)["wiki.corp.example:443"] == ("client", "deny", "would change: client -> deny")
        assert routes(screen)["git.corp.example:22"][2] == ""


async def test_a_compile_error_is_shown_with_line_and_column_and_is_not_applied() -> None:
    controller = DemoController()
    app = demo_app(controller=controller)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_pac_editor(pilot)
        await set_draft(pilot, screen, "function FindProxyForURL(url, host) {\n  return (;\n}\n")
        assert screen.preview is not None and screen.preview.error is not None
        error = screen.preview.error
        assert (error.line, error.column) == (2, 11)
        shown = str(screen.query_one("#pac-error").render())
        assert shown.startswith("line 2, column 11:")
        assert all(row.draft == "" and row.active for row in screen.preview.rows)
        await pilot.press("f5")
        await pilot.pause(0.3)
        assert controller.applied == []
        assert any("not applied" in str(n.message) for n in app._notifications)


async def test_samples_are_added_from_the_input_and_bad_ones_are_named() -> None:
    app = demo_app(samples=())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_pac_editor(pilot)
        screen.query_one("#pac-sample", Input).focus()
        await pilot.press(*"build.corp.example:9000@10.20.1.2", "enter")
        await settle(pilot, screen)
        assert routes(screen)["build.corp.example:9000@10.20.1.2"][:2] == ("client", "client")
        await pilot.press(*"bad host:99999", "enter")
        await settle(pilot, screen)
        assert any("bad host:99999" in problem for problem in screen.sample_errors)
        assert screen.query_one("#pac-sample", Input).value == "bad host:99999"  # kept to fix it


async def test_a_policy_without_a_script_starts_from_its_rules() -> None:
    spec = EgressSpec.model_validate(
        {
            "default": "deny",
            "rules": [
                {"pattern": "*.corp.example", "route": "client"},
                {"pattern": "10.0.0.0/8", "route": "cluster"},
            ],
        }
    )

    class RulesController(DemoController):
        @property
        def active_policy(self) -> Any:
            return spec

    app = CornusApp(demo_stores(), session_controller=RulesController(), config=demo_config())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_pac_editor(pilot)
        assert 'shExpMatch(h, "*.corp.example")) return "CLIENT"' in screen.editor.text
        assert "// rule 10.0.0.0/8 -> cluster" in screen.editor.text
        assert screen.preview is not None and screen.preview.error is None
        table = routes(screen)
        assert table["wiki.corp.example:443"] == ("client", "client", "")
        assert table["pypi.org:443"] == ("deny", "deny", "")


async def test_saving_the_file_elsewhere_updates_the_draft_and_ctrl_s_saves(tmp_path: Path) -> None:
    pac = tmp_path / "policy.pac"
    pac.write_text(DEMO_PAC)
    app = demo_app(pac_file=pac)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_pac_editor(pilot)
        assert screen.editor.text == DEMO_PAC
        # Another editor saves the file the way many do: write a new file, rename it over the old.
        edited = DEMO_PAC.replace('return "GATEWAY"', 'return "DENY"')
        tmp = tmp_path / ".policy.pac.swp"
        tmp.write_text(edited)
        os.replace(tmp, pac)
        await wait_until(
            pilot, lambda: screen.editor.text == edited, "the draft to follow the file", timeout=20
        )
        await settle(pilot, screen)
        assert routes(screen)["pypi.org:443"] == ("gateway", "deny", "would change: gateway -> deny")

        await set_draft(pilot, screen, DEMO_PAC.replace('"DIRECT";\n}', '"DENY";\n}'))
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: pac.read_text().endswith('"DENY";\n}\n'), "the file to be saved")


async def test_escape_from_the_sample_box_closes_the_editor() -> None:
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_pac_editor(pilot)
        screen.query_one("#pac-sample", Input).focus()
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, PacEditorScreen), "the dashboard")


async def test_a_pac_file_that_does_not_exist_yet_starts_from_the_active_script(tmp_path: Path) -> None:
    pac = tmp_path / "new.pac"
    app = demo_app(pac_file=pac)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_pac_editor(pilot)
        assert screen.editor.text == DEMO_PAC
        await pilot.press("ctrl+s")
        await wait_until(
            pilot, lambda: pac.exists() and pac.read_text() == DEMO_PAC, "the file to be created"
        )


async def test_a_pac_file_in_a_missing_directory_is_reported_not_fatal(tmp_path: Path) -> None:
    pac = tmp_path / "missing" / "policy.pac"
    app = demo_app(pac_file=pac)
    async with app.run_test(size=SIZE) as pilot:
        await open_pac_editor(pilot)
        await wait_until(
            pilot,
            lambda: any("cannot watch" in str(n.message) for n in app._notifications),
            "the watch problem to be reported",
        )
        await pilot.press("ctrl+s")
        await wait_until(
            pilot,
            lambda: any("cannot save" in str(n.message) for n in app._notifications),
            "the save problem",
        )
        assert isinstance(app.screen, PacEditorScreen)  # still editing
