"""Running the event loop of each of our processes.

uvloop (libuv) when it is installed: the relay's per-connection cost is mostly the event loop and socket
calls, and uvloop roughly halves it. ``CORNUS_EVENT_LOOP=asyncio`` selects the standard loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for the standard loop."""
    if os.environ.get("CORNUS_EVENT_LOOP", "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the chosen loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
