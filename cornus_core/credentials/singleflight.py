"""Collapse concurrent calls for one key into a single call whose outcome every caller shares."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    def __init__(self) -> None:
        self._inflight: dict[K, asyncio.Task[V]] = {}

    async def run(self, key: K, call: Callable[[], Coroutine[Any, Any, V]]) -> V:
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(call())
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        # shield: one caller giving up must not cancel the call the others wait for.
        return await asyncio.shield(task)

    def _finished(self, key: K, task: asyncio.Task[V]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved here, so a call nobody waits for any more logs no warning
