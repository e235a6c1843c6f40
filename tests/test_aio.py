"""Every process's event loop: uvloop unless CORNUS_EVENT_LOOP=asyncio."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from cornus_core import aio


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORNUS_EVENT_LOOP", raising=False)
    assert aio.run(_loop_type()) is uvloop.Loop


def test_the_standard_loop_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORNUS_EVENT_LOOP", "asyncio")
    assert not issubclass(aio.run(_loop_type()), uvloop.Loop)
