"""The interactive mode: the dashboard owns the session, both on one asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cornus_core.caller import CallerSession, Outcome, SessionError
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec, EgressSpec
from cornus_core.stores import Stores

from .runner import EXIT_OK, EXIT_SESSION_LOST, exit_code, prepare_spec, session_target

TEARDOWN_TIMEOUT = 60.0
DOWN_REASON = "caller asked to tear down"  # the server's word for a teardown the caller asked for


class LiveController:
    """What the dashboard asks of the live session: its policy, a live policy update, teardown."""

    def __init__(self, session: CallerSession) -> None:
        self.session = session
        self.task: asyncio.Task[Outcome] | None = None

    @property
    def active_policy(self) -> EgressSpec:
        return self.session.spec.egress or EgressSpec()

    async def apply_policy(self, spec: Mapping[str, Any]) -> str | None:
        return await self.session.apply_policy(EgressSpec.model_validate(dict(spec)))

    async def shutdown(self) -> None:
        if self.task is None or self.task.done():
            return
        await self.session.down()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self.task), TEARDOWN_TIMEOUT)


async def run_dashboard(spec: DeploySpec, *, server_url: str | None, pac_file: Path | None = None) -> int:
    from .app import AppConfig, CornusApp

    proxies = ProxySettings.resolve()
    async with session_target(server_url) as target:
        stores = Stores(server=target.url)
        session = CallerSession(target.url, target.token, prepare_spec(spec, proxies), on_event=stores.apply,
                                proxies=proxies)
        controller = LiveController(session)
        controller.task = asyncio.create_task(session.run())
        app = CornusApp(stores, session_controller=controller, config=AppConfig(pac_file=pac_file))
        await app.run_async()
        await controller.shutdown()
        try:
            outcome = controller.task.result() if controller.task.done() else None
        except SessionError as exc:
            print(f"cornus-tui: {exc}")
            return EXIT_SESSION_LOST
    if outcome is None:
        return EXIT_SESSION_LOST
    print(f"cornus-tui: session done ({outcome.reason or 'ended'})")
    if outcome.exit_code is None and not outcome.errors and outcome.reason == DOWN_REASON:
        return EXIT_OK  # the user quit: the teardown they asked for is a success
    return exit_code(outcome, lambda message: print(f"cornus-tui: {message}"))
