"""The cornus-tui dashboard: the Textual app over the session's stores.

The session applies every event to :class:`~cornus_core.stores.Stores`; the app pulls snapshots a few
times a second and never receives one message per event. The session is driven through a
:class:`SessionController` (apply a policy, tear down); without one the app only shows the stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from cornus_core.stores import Stores

from .keymap import BINDING_IDS, KeymapError, default_keymap_path, load_keymap
from .screens.commands import CornusCommands
from .screens.dashboard import DashboardScreen
from .screens.help import HelpScreen
from .screens.pac_editor import PacEditorScreen
from .screens.teardown import TeardownScreen
from .widgets.connections import ConnectionView


@runtime_checkable
class SessionController(Protocol):
    """What the app asks of the live session."""

    @property
    def active_policy(self) -> object:
        """The egress policy in force: an EgressSpec, or anything with ``default``, ``rules``, ``script``
        (attributes or mapping keys)."""
        ...

    async def apply_policy(self, spec: Mapping[str, Any]) -> str | None:
        """Apply ``{"default", "rules", "script"}`` at all three hops; returns the new version if known.
        Raises when the session refuses it."""
        ...

    async def shutdown(self) -> None:
        """Tear the session down (workload first, then mounts) and return when it is done."""
        ...


@dataclass(frozen=True)
class AppConfig:
    pac_file: Path | None = None  # the PAC file the editor opens and watches
    samples: tuple[str, ...] = ()  # sample destinations for the PAC preview (host[:port][@ip])
    refresh_hz: float = 10.0  # how often panels pull from the stores (bench/tui.py: 10 Hz keeps >= 10 fps)
    keymap: Path | None = field(default_factory=default_keymap_path)  # None: no user keymap
    utc: bool = False  # show connection times in UTC instead of local time
    preview_debounce_s: float = 0.15


class CornusApp(App[int]):
    """``CornusApp(stores, session_controller=..., config=...)``; the exit code is the app's result."""

    TITLE = "cornus-tui"
    COMMANDS: ClassVar = App.COMMANDS | {CornusCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", id="quit", tooltip=BINDING_IDS["quit"]),
        Binding("question_mark", "help", "Help", id="help", tooltip=BINDING_IDS["help"]),
        Binding(
            "colon",
            "command_palette",
            "Commands",
            show=False,
            id="command-palette",
            tooltip=BINDING_IDS["command-palette"],
        ),
    ]

    def __init__(
        self,
        stores: Stores,
        *,
        session_controller: SessionController | None = None,
        config: AppConfig | None = None,
    ) -> None:
        super().__init__()
        self.stores = stores
        self.controller = session_controller
        self.config = config or AppConfig()
        self.user_keymap: dict[str, str] = {}
        self.tearing_down = False
        self._executor: ThreadPoolExecutor | None = None

    def get_default_screen(self) -> Screen[Any]:
        return DashboardScreen(self.stores, refresh_hz=self.config.refresh_hz, utc=self.config.utc)

    @property
    def dashboard(self) -> DashboardScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, DashboardScreen)
        return screen

    def on_mount(self) -> None:
        if self.config.keymap is None:
            return
        try:
            self.user_keymap = load_keymap(self.config.keymap)
        except KeymapError as exc:
            self.notify(str(exc), title="keymap not used", severity="error", timeout=10)
            return
        self.set_keymap(self.user_keymap)

    def on_unmount(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def binding_keys(self) -> dict[str, str]:
        """Binding id -> the keys that trigger it now (the user's keymap over the defaults)."""
        keys: dict[str, str] = {}
        for cls in (CornusApp, DashboardScreen, PacEditorScreen, ConnectionView):
            for binding in cls.BINDINGS:
                if isinstance(binding, Binding) and binding.id in BINDING_IDS:
                    keys[binding.id] = binding.key
        return {**keys, **self.user_keymap}

    # ------------------------------------------------------------------ actions

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.binding_keys(), self.config.keymap))

    def open_pac_editor(self) -> None:
        if isinstance(self.screen, PacEditorScreen):
            return
        if self._executor is None:
            # One thread for all PAC work: the sandbox keeps its JavaScript context per thread.
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cornus-pac")
        self.push_screen(
            PacEditorScreen(
                self.stores,
                self.controller,
                executor=self._executor,
                pac_file=self.config.pac_file,
                samples=self.config.samples,
                debounce_s=self.config.preview_debounce_s,
            )
        )

    async def action_quit(self) -> None:
        """Ask the session to tear down and show that until it is done; then exit."""
        if self.tearing_down:
            return
        if self.controller is None:
            self.exit(0)
            return
        self.tearing_down = True
        await self.push_screen(TeardownScreen())
        self.run_worker(self._teardown(self.controller), group="teardown", exclusive=True)

    async def _teardown(self, controller: SessionController) -> None:
        try:
            await controller.shutdown()
        except Exception as exc:
            self.exit(1, return_code=1, message=f"cornus-tui: teardown failed: {exc}")
            return
        self.exit(0)
