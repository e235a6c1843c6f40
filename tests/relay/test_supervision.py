"""The caretaker's server link under its supervisor: a failure the redial loop does not expect ends the
loop, and the supervisor starts it again; the link comes back up."""

from __future__ import annotations

from typing import Any

from caretaker.link import ServerLink
from caretaker.supervisor import Supervisor
from cornus_core.wire import Mux


async def test_the_link_comes_back_after_its_loop_fails(live: Any) -> None:
    running = await live({"command": "sleep 600"})
    deployment = await running.deployment()
    connects: list[Mux] = []

    async def on_connect(mux: Mux) -> None:
        connects.append(mux)
        if len(connects) == 1:
            raise RuntimeError("role setup broke")

    reports: list[str] = []
    supervisor = Supervisor(reports.append, first_delay=0.05)
    link = ServerLink(deployment.server_url, deployment.caretaker_token, on_connect=on_connect,
                      supervisor=supervisor)
    link.start()
    try:
        mux = await link.wait_up(20)
        stream = await link.open_stream()
        stream.reset()
    finally:
        await link.aclose()
        await supervisor.aclose()
    assert len(connects) == 2 and mux is connects[1]
    assert connects[0].is_closed  # the failed round's connection was closed, not leaked
    assert reports == ["server link failed: RuntimeError: role setup broke; restarting in 0.05 s (restart 1)"]
    await running.finish()
