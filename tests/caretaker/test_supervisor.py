"""The caretaker's supervisor: a task that fails or ends is started again, with capped backoff."""

from __future__ import annotations

import asyncio

import pytest

from caretaker.supervisor import Supervisor


async def test_a_failing_task_is_restarted_with_growing_capped_delays() -> None:
    reports: list[str] = []
    runs: list[int] = []

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 5:
            raise OSError(5, "Input/output error")
        await asyncio.Event().wait()  # the fifth run stays up

    supervisor = Supervisor(reports.append, first_delay=0.02, max_delay=0.08, healthy_after=60)
    supervisor.start("dns listener", flaky)
    try:
        async with asyncio.timeout(10):
            while len(runs) < 5:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    finally:
        await supervisor.aclose()
    assert len(runs) == 5 and supervisor.restarts["dns listener"] == 4
    assert reports[0] == "dns listener failed: OSError: [Errno 5] Input/output error; restarting in 0.02 s (restart 1)"
    # The delay doubles, then holds at the cap.
    assert [r.split("restarting in ")[1] for r in reports] == [
        "0.02 s (restart 1)", "0.04 s (restart 2)", "0.08 s (restart 3)", "0.08 s (restart 4)"]


async def test_a_task_that_returns_is_started_again() -> None:
    runs = 0

    async def once() -> None:
        nonlocal runs
        runs += 1
        if runs > 2:
            await asyncio.Event().wait()

    reports: list[str] = []
    supervisor = Supervisor(reports.append, first_delay=0.01)
    supervisor.start("refresher", once)
    try:
        async with asyncio.timeout(10):
            while runs < 3:
                await asyncio.sleep(0.01)
    finally:
        await supervisor.aclose()
    assert reports[0].startswith("refresher ended; restarting")


async def test_cancelling_a_supervised_task_stops_it_for_good() -> None:
    runs = 0

    async def forever() -> None:
        nonlocal runs
        runs += 1
        await asyncio.Event().wait()

    supervisor = Supervisor()
    task = supervisor.start("link", forever)
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)
    assert runs == 1 and supervisor.restarts["link"] == 0
    await supervisor.aclose()
