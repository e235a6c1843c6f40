"""``e``: edit the PAC script and see, on every edit, how recent and sample destinations would route.

The preview compiles the draft and routes each destination under the draft and the active policy on
one worker thread (PAC code never runs on the UI thread, and the sandbox keeps one context per
thread). When the editor was opened on a file, the file is watched: saving it in another editor
replaces the draft here. One key applies the draft to the live session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input, Static, TextArea
from watchfiles import awatch

from cornus_core.policy import Destination, PolicyError, compile_policy
from cornus_core.spec import SpecError, parse_dest
from cornus_core.stores import Stores

from ..keymap import BINDING_IDS
from ..widgets.colours import DIM
from ..widgets.footer import Footer
from ..widgets.preview import (
    Preview,
    PreviewTable,
    Probe,
    compute_preview,
    draft_source,
    error_text,
    source_dict,
)

if TYPE_CHECKING:
    from ..app import SessionController

ROUTE_KEYWORDS = {"client": "CLIENT", "gateway": "GATEWAY", "cluster": "DIRECT", "deny": "DENY"}


def editor_language() -> str | None:
    """``javascript`` when tree-sitter and its JavaScript grammar are installed, else plain text.

    Only the tree-sitter 0.25 binding: 0.26 crashes the interpreter (SIGSEGV) in Textual 8's
    highlight query, and a plain-text editor beats a dead dashboard.
    """
    try:
        if not version("tree-sitter").startswith("0.25."):
            return None
        from textual._tree_sitter import get_language
    except (PackageNotFoundError, ImportError):
        return None
    return "javascript" if get_language("javascript") is not None else None


def starter_script(active: dict[str, Any]) -> str:
    """A first draft for a policy without a script: its host-glob rules as PAC, the rest as comments."""
    default = str(active.get("default") or "cluster").lower()
    lines = [
        "// Draft PAC for this session's egress. Return CLIENT (leave from this machine),",
        "// GATEWAY (from the server), DIRECT (from the pod) or DENY.",
        "function FindProxyForURL(url, host) {",
        "  var h = host.toLowerCase();",
    ]
    for rule in active.get("rules") or []:
        pattern, route = str(rule.get("pattern", "")), str(rule.get("route", "")).lower()
        keyword = ROUTE_KEYWORDS.get(route)
        is_glob = keyword and not any(c in pattern for c in ":/[]") and not pattern.replace(".", "").isdigit()
        if is_glob:
            lines.append(f'  if (shExpMatch(h, "{pattern.lower()}")) return "{keyword}";')
        else:
            lines.append(f"  // rule {pattern} -> {route} (write it with isInNet or url checks)")
    lines += [f'  return "{ROUTE_KEYWORDS.get(default, "DIRECT")}";', "}", ""]
    return "\n".join(lines)


class PacEditorScreen(Screen[None]):
    DEFAULT_CSS = """
    PacEditorScreen #pac-title { height: 1; background: $panel; padding: 0 1; }
    PacEditorScreen #pac-body { height: 1fr; }
    PacEditorScreen #pac-left { width: 2fr; }
    PacEditorScreen #pac-right { width: 3fr; }
    PacEditorScreen #pac-source { height: 1fr; }
    PacEditorScreen #pac-error { height: auto; max-height: 4; padding: 0 1; }
    PacEditorScreen #pac-error.-bad { background: $error 20%; color: $text-error; }
    PacEditorScreen #pac-sample { height: 3; }
    PacEditorScreen #pac-summary { height: auto; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "f5", "apply", "Apply to session", id="pac.apply", priority=True, tooltip=BINDING_IDS["pac.apply"]
        ),
        Binding("ctrl+s", "save", "Save file", id="pac.save", priority=True, tooltip=BINDING_IDS["pac.save"]),
        Binding("escape", "close", "Close", id="pac.close", tooltip=BINDING_IDS["pac.close"]),
    ]

    def __init__(
        self,
        stores: Stores,
        controller: SessionController | None,
        *,
        executor: ThreadPoolExecutor,
        pac_file: Path | None = None,
        samples: Sequence[str] = (),
        debounce_s: float = 0.15,
        recent: int = 40,
    ) -> None:
        super().__init__()
        self.stores = stores
        self.controller = controller
        self.executor = executor
        self.pac_file = pac_file
        self.debounce_s = debounce_s
        self.recent = recent
        self.samples: list[Probe] = []
        self.sample_errors: list[str] = []
        for text in samples:
            self._add_sample(text)
        self.preview: Preview | None = None
        self.previews = 0  # previews shown so far
        self.previewed_text: str | None = None  # the draft the preview on screen was made from
        self._generation = 0  # bumped by every edit; a preview is shown only for the newest
        self._shown = -1  # the generation of the preview on screen
        self._debounce: Timer | None = None
        self._stop_watching = anyio.Event() if pac_file else None

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Static(id="pac-title")
        with Horizontal(id="pac-body"):
            with Vertical(id="pac-left"):
                yield TextArea.code_editor(self._initial_text(), language=editor_language(), id="pac-source")
                yield Static(id="pac-error")
            with Vertical(id="pac-right"):
                yield Input(
                    placeholder="add a sample destination: host[:port][@ip], then enter", id="pac-sample"
                )
                yield Static(id="pac-summary")
                yield PreviewTable(id="pac-preview")
        yield Footer()

    def on_mount(self) -> None:
        self._show_title()
        self.query_one("#pac-source", TextArea).focus()
        self.schedule_preview(0)
        if self.pac_file is not None:
            self._watch(self.pac_file)

    def on_unmount(self) -> None:
        if self._stop_watching is not None:
            self._stop_watching.set()

    @property
    def editor(self) -> TextArea:
        return self.query_one("#pac-source", TextArea)

    def _active(self) -> dict[str, Any]:
        return source_dict(self.controller.active_policy if self.controller else None)

    def _initial_text(self) -> str:
        if self.pac_file is not None:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                return self.pac_file.read_text(encoding="utf-8")
        active = self._active()
        return str(active["script"]) if active.get("script") else starter_script(active)

    def _show_title(self) -> None:
        title = Text("PAC editor", style="bold")
        title.append(f"  {self.pac_file}" if self.pac_file else "  draft (not saved to a file)", style=DIM)
        active = self.preview.active_version if self.preview else None
        if active:
            title.append(f"  active policy {active}", style=DIM)
        if self.preview and self.preview.draft_version:
            title.append(f"  draft {self.preview.draft_version}", style=DIM)
        self.query_one("#pac-title", Static).update(title)

    # ------------------------------------------------------------------ the preview

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        self.schedule_preview(self.debounce_s)

    def schedule_preview(self, delay: float) -> None:
        """Recompute the preview after ``delay`` seconds without another edit."""
        self._generation += 1
        if self._debounce is not None:
            self._debounce.stop()
        generation = self._generation
        if delay <= 0:
            self._run_preview(generation)
        else:
            self._debounce = self.set_timer(delay, lambda: self._run_preview(generation), name="pac preview")

    def _probes(self) -> list[Probe]:
        probes = list(self.samples)
        for row in self.stores.connections.recent_destinations(self.recent):
            if row.port:
                probes.append(
                    Probe(row.dest, Destination(row.host, row.ip, row.port), "recent", row.t_ms or None)
                )
        return probes

    @work(group="pac-preview", exit_on_error=False)
    async def _run_preview(self, generation: int) -> None:
        if generation != self._generation:
            return
        text = self.editor.text
        draft = draft_source(self._active(), text)
        active = self._active() if self.controller else None
        loop = asyncio.get_running_loop()
        try:
            preview = await loop.run_in_executor(
                self.executor, compute_preview, draft, active, self._probes()
            )
        except Exception as exc:  # the dashboard outlives a preview that broke
            self.notify(f"the route preview failed: {exc!r}", severity="error")
            raise
        if generation == self._generation:
            self._shown = generation
            self.previewed_text = text
            self._show_preview(preview)

    @property
    def preview_pending(self) -> bool:
        """An edit (or sample) is not reflected in the preview yet."""
        return self._shown != self._generation or self.previewed_text != self.editor.text

    def _show_preview(self, preview: Preview) -> None:
        self.preview = preview
        self.previews += 1
        box = self.query_one("#pac-error", Static)
        if preview.error is not None:
            box.update(Text(error_text(preview.error)))
            box.add_class("-bad")
        else:
            box.update(Text("compiles", style=DIM))
            box.remove_class("-bad")
        summary = Text()
        summary.append(f"{len(preview.rows)} destinations", style="bold")
        summary.append(
            f" (+ {len(self.samples)} samples you added, the rest seen in this session)", style=DIM
        )
        if preview.changes:
            summary.append(f"   {preview.changes} would change", style="bold #ffaf00")
        for problem in self.sample_errors[-2:]:
            summary.append(f"\n{problem}", style="#ff5f87")
        self.query_one("#pac-summary", Static).update(summary)
        self.query_one(PreviewTable).show(preview)
        self._show_title()

    # ------------------------------------------------------------------ samples

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "pac-sample" or not event.value.strip():
            return
        if self._add_sample(event.value.strip()):
            event.input.value = ""
        self.schedule_preview(0)

    def _add_sample(self, text: str) -> bool:
        try:
            parsed = parse_dest(text)
        except SpecError as exc:
            self.sample_errors.append(f"sample {text!r}: {exc}")
            return False
        self.samples.append(Probe(text, parsed.destination(), "sample"))
        return True

    # ------------------------------------------------------------------ the file

    @work(group="pac-watch", exclusive=True, exit_on_error=False)
    async def _watch(self, path: Path) -> None:
        # Watch the directory, not the file: editors that save by renaming a new file over the old
        # one would leave a watch on the old file's inode behind.
        target = path.resolve()
        try:
            async for _changes in awatch(
                target.parent,
                watch_filter=lambda _change, changed: Path(changed) == target,
                debounce=50,
                step=25,
                stop_event=self._stop_watching,
                recursive=False,
            ):
                try:
                    text = target.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue  # mid-save or removed: the next change brings it back
                if text != self.editor.text:
                    self._replace_text(text)
        except (OSError, RuntimeError) as exc:
            self.notify(f"cannot watch {path} for changes: {exc}", severity="warning")

    def _replace_text(self, text: str) -> None:
        editor = self.editor
        row, column = editor.cursor_location
        editor.load_text(text)
        last_row = max(0, editor.document.line_count - 1)
        row = min(row, last_row)
        editor.cursor_location = (row, min(column, len(editor.document.get_line(row))))

    def action_save(self) -> None:
        if self.pac_file is None:
            self.notify("This draft has no file; apply it with F5.", severity="warning")
            return
        try:
            tmp = self.pac_file.with_name(f".{self.pac_file.name}.cornus-tmp")
            tmp.write_text(self.editor.text, encoding="utf-8")
            tmp.replace(self.pac_file)
        except OSError as exc:
            self.notify(f"cannot save {self.pac_file}: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"saved {self.pac_file}")

    # ------------------------------------------------------------------ applying

    @work(group="pac-apply", exclusive=True, exit_on_error=False)
    async def action_apply(self) -> None:
        if self.controller is None:
            self.notify("No live session to apply the policy to.", severity="warning")
            return
        draft = draft_source(self._active(), self.editor.text)
        loop = asyncio.get_running_loop()
        try:
            policy = await loop.run_in_executor(self.executor, compile_policy, draft)
        except PolicyError as exc:
            self.notify(f"not applied: {exc}", severity="error", timeout=8)
            return
        try:
            result = await self.controller.apply_policy(draft)
        except Exception as exc:  # whatever the session says no with, the user reads it here
            self.notify(f"the session refused the policy: {exc}", severity="error", timeout=8)
            return
        version = result if isinstance(result, str) and result else policy.version
        self.stores.session.set_policy_version(version)
        self.notify(f"applied policy {version} to the session")
        self.schedule_preview(0)

    def action_close(self) -> None:
        self.dismiss(None)
