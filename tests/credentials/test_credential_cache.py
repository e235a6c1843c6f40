"""The caretaker's cache, driven by a settable clock and an in-process fetch function."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from credential_support import SettableClock

from cornus_core.credentials import (
    Credential,
    CredentialCache,
    CredentialError,
    CredentialEvent,
    UnknownCredentialError,
)

SECRET = "hunter2-very-secret"


class Minter:
    """The fetch function the relay would supply: counts calls, returns what the test arranges."""

    def __init__(self, make: Callable[[int], Credential]) -> None:
        self.calls = 0
        self.make = make
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None

    async def __call__(self, name: str) -> Credential:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return self.make(self.calls)


def make_cache(
    minter: Minter, clock: SettableClock, events: list[CredentialEvent], **kw: object
) -> CredentialCache:
    return CredentialCache(minter, {"db": 300, "other": None}, clock=clock, on_event=events.append, **kw)  # type: ignore[arg-type]


async def test_hit_within_ttl_then_fetch_after_ttl() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": f"{SECRET}-{n}"}))
    cache = make_cache(minter, clock, events)
    assert (await cache.get("db")).values["pw"] == f"{SECRET}-1"
    clock.advance(299)
    assert (await cache.get("db", "file")).values["pw"] == f"{SECRET}-1"
    clock.advance(1)
    assert (await cache.get("db")).values["pw"] == f"{SECRET}-2"
    assert [(e.cache, e.outcome, e.delivery) for e in events] == [
        ("fetched", "ok", "endpoint"),
        ("hit", "ok", "file"),
        ("fetched", "ok", "endpoint"),
    ]
    assert cache.ttl("other") == 300.0


async def test_expiry_drives_the_refetch_before_the_ttl() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": str(n)}, clock.at(100)))
    cache = make_cache(minter, clock, events)
    await cache.get("db")
    clock.advance(69)  # fresh until expiry - 30 s = +70 s
    assert (await cache.get("db")).values["pw"] == "1"
    clock.advance(1)
    assert (await cache.get("db")).values["pw"] == "2"
    assert events[-1].expiration == clock.at(100)


async def test_stale_if_error_up_to_the_expiry() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": SECRET}, clock.at(100)))
    cache = make_cache(minter, clock, events)
    await cache.get("db")
    minter.fail = CredentialError(f"caller offline (last said {SECRET})")
    clock.advance(80)
    assert (await cache.get("db")).values["pw"] == SECRET
    stale = events[-1]
    assert (stale.cache, stale.outcome) == ("stale", "ok") and stale.error is not None
    assert "caller offline" in stale.error and SECRET not in stale.error
    clock.advance(20)  # now at the expiry: nothing left to serve
    with pytest.raises(CredentialError, match="caller offline"):
        await cache.get("db")
    assert (events[-1].cache, events[-1].outcome, events[-1].expiration) == ("fetched", "error", None)
    minter.fail = None
    assert (await cache.get("db")).values["pw"] == SECRET


async def test_without_expiration_stale_is_served_after_ttl() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": "v"}))
    cache = make_cache(minter, clock, events)
    await cache.get("db")
    minter.fail = ConnectionResetError("relay stream reset")
    clock.advance(10_000)
    assert (await cache.get("db")).values["pw"] == "v"
    assert events[-1].cache == "stale" and "relay stream reset" in (events[-1].error or "")


async def test_single_flight_100_concurrent_requests_one_fetch() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": SECRET}))
    minter.gate = asyncio.Event()
    cache = make_cache(minter, clock, events)
    waiting = [asyncio.create_task(cache.get("db")) for _ in range(100)]
    await asyncio.sleep(0)
    minter.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*waiting), 20)
    assert minter.calls == 1
    assert all(r.values["pw"] == SECRET for r in results)
    assert len(events) == 100 and {e.cache for e in events} == {"fetched"}


async def test_one_failed_fetch_fails_all_waiters_once() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": "v"}))
    minter.fail, minter.gate = CredentialError("denied"), asyncio.Event()
    cache = make_cache(minter, clock, events)
    waiting = [asyncio.create_task(cache.get("db")) for _ in range(10)]
    await asyncio.sleep(0)
    minter.gate.set()
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    assert minter.calls == 1 and all(isinstance(o, CredentialError) for o in outcomes)


async def test_a_hanging_fetch_times_out() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": "v"}))
    minter.gate = asyncio.Event()  # never set
    cache = make_cache(minter, clock, events, fetch_timeout=0.2)
    with pytest.raises(CredentialError, match=r"credential 'db': fetch timed out after 0.2s"):
        await asyncio.wait_for(cache.get("db"), 20)


async def test_undeclared_names_are_refused_without_fetching() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": "v"}))
    cache = make_cache(minter, clock, events)
    with pytest.raises(UnknownCredentialError, match="'nope' is not declared"):
        await cache.get("nope")
    assert minter.calls == 0 and cache.names == {"db", "other"}


async def test_events_never_carry_the_secret() -> None:
    clock, events = SettableClock(), []
    minter = Minter(lambda n: Credential({"pw": SECRET, "user": "someone-else"}, clock.at(60)))
    cache = make_cache(minter, clock, events)
    await cache.get("db")
    await cache.get("db")
    minter.fail = CredentialError(f"mint command printed {SECRET} then died")
    clock.advance(31)
    await cache.get("db")
    clock.advance(60)
    with pytest.raises(CredentialError):
        await cache.get("db")
    assert [e.cache for e in events] == ["fetched", "hit", "stale", "fetched"]
    serialised = json.dumps([e.to_dict() for e in events])
    assert SECRET not in serialised and "someone-else" not in serialised
    assert "mint command printed *** then died" in serialised


async def test_a_failing_observer_does_not_break_delivery() -> None:
    def observer(event: CredentialEvent) -> None:
        raise RuntimeError("observer bug")

    cache = CredentialCache(Minter(lambda n: Credential({"pw": "v"})), {"db": 1}, on_event=observer)
    assert (await cache.get("db")).values == {"pw": "v"}
