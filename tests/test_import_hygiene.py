"""cornus_core (and the server and caretaker) must stay headless: never pull in textual or rich."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import caretaker
import cornus_core
import server

UI_PACKAGES = ("textual", "rich")


def _modules(pkg) -> list[str]:
    names = [pkg.__name__]
    # __main__ modules run their program when imported; what they import is covered by the rest.
    names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
              if not m.name.endswith(".__main__")]
    return names


def test_headless_packages_never_import_ui() -> None:
    modules = _modules(cornus_core) + _modules(server) + _modules(caretaker)
    assert len(modules) > 3
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"leaks = sorted(m for m in sys.modules if m.split('.')[0] in {UI_PACKAGES!r})\n"
        "print(','.join(leaks))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"headless modules imported UI packages: {out.stdout.strip()}"


def test_plain_mode_never_imports_the_ui() -> None:
    probe = (
        "import sys\n"
        "import cornus_tui.cli, cornus_tui.plain, cornus_tui.runner\n"
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {UI_PACKAGES!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"--plain imported UI packages: {out.stdout.strip()}"
