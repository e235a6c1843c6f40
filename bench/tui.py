"""The dashboard under load: synthetic connection events at a steady rate into the stores while the app
runs headless, side by side with the same feed into the stores alone (the baseline) in the same run.

    .venv/bin/python bench/tui.py [--seconds 60] [--rate 2000] [--refresh-hz 10] [--profile]

Measures, while the feed runs: frames/s of the connection stream (compositor updates that drew it), the
key-to-frame latency of panel switches (``2`` then ``1``: from the key entering the app to the first
frame showing the new panel), process CPU% (against the stores-only baseline), and RSS once 100,000
connections went through the stores (the ring keeps it bounded). Frames are also encoded to terminal
bytes, which headless mode skips, so the CPU figure includes what a real terminal costs.

Last line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import pstats
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from textual import events
from textual._compositor import CompositorUpdate

from cornus_core.events import ConnEnd, Event, HopDecision
from cornus_core.stores import Stores
from cornus_tui.app import AppConfig, CornusApp
from cornus_tui.widgets.connections import ConnectionView

SIZE = (120, 34)
FILL_CONNECTIONS = 100_000
TICK_S = 0.005  # the feeder wakes this often and applies every event due by then
KEY_EVERY_S = 1.0  # a person's pace: one round trip (2, then back to 1 once drawn) a second
END_AFTER = 24  # a connection ends this many connection starts later, so rows are open meanwhile

# (route, hops that decide, share of connections in every 20, outcome)
MIX = (("client", 3, 8, "ok"), ("cluster", 1, 6, "ok"), ("gateway", 2, 3, "ok"), ("deny", 1, 3, "deny"))
HOPS = ("caretaker", "server", "client")


def synthetic_events() -> Iterator[Event]:
    """An endless, deterministic stream of hop decisions and ends for interleaved connections."""
    pattern = [(route, hops, outcome) for route, hops, share, outcome in MIX for _ in range(share)]
    pending: deque[ConnEnd] = deque()
    t_ms = 1_767_261_600_000
    i = 0
    while True:
        route, hops, outcome = pattern[i % len(pattern)]
        conn, host = f"c{i:07d}", f"svc{i % 997}.corp.example"
        reason = "default" if route == "cluster" else f"rule {hops}: *.{route}.example"
        for hop in HOPS[:hops]:
            yield HopDecision(
                conn=conn, hop=hop, route=route, reason=reason, version="a1b2c3d4e5f6",
                host=host, ip=f"10.{i % 200}.{i % 250}.{i % 251}" if hop != "caretaker" else None,
                port=443, t_ms=t_ms + i,
            )
        pending.append(
            ConnEnd(conn=conn, hop=HOPS[hops - 1], outcome=outcome, reason="policy" if outcome == "deny" else "",
                    bytes_up=100 + i % 5000, bytes_down=1000 + i % 90_000, duration_ms=float(i % 3000))
        )
        if len(pending) > END_AFTER:
            yield pending.popleft()
        i += 1


@dataclass
class Feed:
    """Applies ``rate`` events per second on the running loop, as the session does: no UI message."""

    stores: Stores
    rate: float
    source: Iterator[Event] = field(default_factory=synthetic_events)
    applied: int = 0

    def fill(self, connections: int) -> None:
        """Push events until ``connections`` connections went through (unpaced)."""
        while self.stores.connections.total < connections:
            self.stores.apply(next(self.source))
            self.applied += 1

    async def run(self, seconds: float) -> float:
        """Apply events at ``rate`` for ``seconds``; returns the events/s achieved."""
        loop = asyncio.get_running_loop()
        start, applied = loop.time(), 0
        apply, source = self.stores.apply, self.source
        while (elapsed := loop.time() - start) < seconds:
            due = int(elapsed * self.rate) - applied
            for _ in range(due):
                apply(next(source))
            applied += max(0, due)
            await asyncio.sleep(TICK_S)
        self.applied += applied
        return applied / (loop.time() - start)


class FrameProbe:
    """Counts frames that drew the connection stream, encodes every frame to terminal bytes (what a real
    terminal costs; headless skips it), and times keys until the first frame that shows them."""

    def __init__(self, app: CornusApp) -> None:
        self.app = app
        self.frames = 0  # frames that drew the connection stream
        self.all_frames = 0
        self.terminal_bytes = 0
        self.latencies: list[float] = []
        self._view_drawn = False
        self._waiting: tuple[str, float] | None = None  # (panel the key selects, when it was sent)
        self._console = Console(file=io.StringIO(), width=SIZE[0], height=SIZE[1], force_terminal=True,
                                color_system="truecolor", legacy_windows=False)

    def install(self) -> None:
        view = self.app.dashboard.query_one(ConnectionView)
        render_lines, display = view.render_lines, self.app._display

        def counted_render_lines(crop: Any) -> Any:
            self._view_drawn = True
            return render_lines(crop)

        def counted_display(screen: Any, renderable: Any) -> None:
            display(screen, renderable)
            if renderable is None:
                return
            if isinstance(renderable, CompositorUpdate):
                self.terminal_bytes += len(renderable.render_segments(self._console))
            self.all_frames += 1
            drawn, self._view_drawn = self._view_drawn, False
            self.frames += drawn
            if self._waiting is not None:
                panel, sent = self._waiting
                if self.app.dashboard.panel == panel and (drawn or panel != "connections"):
                    self.latencies.append(time.perf_counter() - sent)
                    self._waiting = None

        view.render_lines = counted_render_lines  # type: ignore[method-assign]
        self.app._display = counted_display  # type: ignore[method-assign]

    def press(self, key: str, panel: str) -> None:
        """Send ``key`` as the terminal would (through the driver), expecting ``panel`` to show."""
        self._waiting = (panel, time.perf_counter())
        driver = self.app._driver
        assert driver is not None
        driver.send_message(events.Key(key, key))

    @property
    def waiting(self) -> bool:
        return self._waiting is not None


async def press_keys(probe: FrameProbe, seconds: float) -> None:
    """Switch to the mounts panel and back, one key at a time, each once the previous one showed."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await asyncio.sleep(KEY_EVERY_S)
        for key, panel in (("2", "mounts"), ("1", "connections")):
            probe.press(key, panel)
            while probe.waiting and loop.time() < end + 5:
                await asyncio.sleep(0.001)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


async def with_app(args: argparse.Namespace) -> dict[str, Any]:
    stores = Stores()
    app = CornusApp(stores, config=AppConfig(keymap=None, refresh_hz=args.refresh_hz))
    feed = Feed(stores, args.rate)
    async with app.run_test(size=SIZE) as pilot:
        probe = FrameProbe(app)
        probe.install()
        # 100,000 connections through the ring while the app shows them, in slices so it keeps drawing.
        step = 2_000
        for target in range(step, FILL_CONNECTIONS + 1, step):
            feed.fill(target)
            await pilot.pause()
        gc.collect()
        rss_at_100k = rss_mb()

        profiler = cProfile.Profile() if args.profile else None
        frames0, all0, bytes0 = probe.frames, probe.all_frames, probe.terminal_bytes
        wall0, cpu0 = time.perf_counter(), time.process_time()
        if profiler:
            profiler.enable()
        keys = asyncio.create_task(press_keys(probe, args.seconds))
        events_per_s = await feed.run(args.seconds)
        await keys
        if profiler:
            profiler.disable()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        figures = {
            "events_per_s": events_per_s,
            "fps": (probe.frames - frames0) / wall,
            "frames_per_s_all": (probe.all_frames - all0) / wall,
            "terminal_kB_per_s": (probe.terminal_bytes - bytes0) / wall / 1024,
            "key_latencies": probe.latencies,
            "cpu_s": cpu,
            "cpu_percent": 100 * cpu / wall,
            "rss_MB_at_100k": rss_at_100k,
            "rss_MB_end": rss_mb(),
            "connections": stores.connections.total,
            "rows_held": len(stores.connections),
            "shown": len(app.dashboard.query_one(ConnectionView).rows),
        }
        if profiler:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(35)
            print(out.getvalue(), file=sys.stderr)
    return figures


async def stores_only(args: argparse.Namespace) -> dict[str, float]:
    feed = Feed(Stores(), args.rate)
    feed.fill(FILL_CONNECTIONS)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    events_per_s = await feed.run(args.seconds)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {"events_per_s": events_per_s, "cpu_s": cpu, "cpu_percent": 100 * cpu / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each measured feed (default 60)")
    parser.add_argument("--rate", type=float, default=2_000.0, help="events per second (default 2000)")
    parser.add_argument("--refresh-hz", type=float, default=10.0, help="how often the dashboard pulls (default 10)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the app run to stderr")
    args = parser.parse_args()

    app = asyncio.run(with_app(args))  # first: the baseline's memory must not count in the app's RSS
    base = asyncio.run(stores_only(args))
    latencies_ms = [s * 1000 for s in app.pop("key_latencies")]
    figures = {
        "seconds": args.seconds,
        "refresh_hz": args.refresh_hz,
        "events_per_s": round(app["events_per_s"]),
        "fps": round(app["fps"], 1),
        "frames_per_s_all": round(app["frames_per_s_all"], 1),
        "key_p50_ms": round(percentile(latencies_ms, 0.50), 1),
        "key_p99_ms": round(percentile(latencies_ms, 0.99), 1),
        "key_max_ms": round(max(latencies_ms, default=float("nan")), 1),
        "keys": len(latencies_ms),
        "cpu_s": round(app["cpu_s"], 2),
        "cpu_percent": round(app["cpu_percent"], 1),
        "baseline_events_per_s": round(base["events_per_s"]),
        "baseline_cpu_s": round(base["cpu_s"], 2),
        "baseline_cpu_percent": round(base["cpu_percent"], 1),
        "cpu_vs_baseline": round(app["cpu_s"] / base["cpu_s"], 2) if base["cpu_s"] else None,
        "terminal_kB_per_s": round(app["terminal_kB_per_s"], 1),
        "rss_MB_at_100k": round(app["rss_MB_at_100k"], 1),
        "rss_MB_end": round(app["rss_MB_end"], 1),
        "connections": app["connections"],
        "rows_held": app["rows_held"],
    }
    print(f"feed         {figures['events_per_s']} events/s for {args.seconds:.0f} s "
          f"({app['connections']} connections in all, {app['rows_held']} rows held)")
    print(f"frames       {figures['fps']} /s drew the stream ({figures['frames_per_s_all']} /s in all, "
          f"refresh {args.refresh_hz:g} Hz, {figures['terminal_kB_per_s']} kB/s to the terminal)")
    print(f"keys         p50 {figures['key_p50_ms']} ms  p99 {figures['key_p99_ms']} ms  "
          f"max {figures['key_max_ms']} ms over {figures['keys']} panel switches")
    print(f"cpu          app {figures['cpu_s']} s ({figures['cpu_percent']}%)  stores only "
          f"{figures['baseline_cpu_s']} s ({figures['baseline_cpu_percent']}%)  ratio {figures['cpu_vs_baseline']}x")
    print(f"memory       RSS {figures['rss_MB_at_100k']} MB after {FILL_CONNECTIONS} connections, "
          f"{figures['rss_MB_end']} MB at the end")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
