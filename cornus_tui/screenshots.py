"""Regenerate the pictures of every screen: ``python -m cornus_tui.screenshots [--out DIR] [NAME ...]``.

Each scene of :data:`cornus_tui.fixtures.SCENES` runs headless on the fixed demo session; Textual
exports SVG, which is converted to PNG with cairosvg when that is installed (otherwise the SVG is
kept). The snapshot tests run the very same scenes.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from textual._doc import take_svg_screenshot

from .fixtures import SCENES, Scene, scene_app

DEFAULT_OUT = Path("screenshots")


def scene_svg(scene: Scene) -> str:
    app = scene_app(scene)
    return take_svg_screenshot(app=app, run_before=scene.run, terminal_size=scene.size, title="cornus-tui")


def svg_to_png(svg: str, target: Path) -> bool:
    """Write ``target`` as PNG; False when cairosvg is not installed."""
    try:
        import cairosvg
    except ImportError:
        return False
    # The SVG asks for "Fira Code, monospace" as one family name, which cairo cannot split: ask
    # for the generic monospace font so that the terminal grid stays aligned.
    svg = re.sub(r"font-family: *Fira Code, *monospace;", "font-family: monospace;", svg)
    cairosvg.svg2png(bytestring=svg.encode("utf-8"), write_to=str(target), output_width=1600)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cornus_tui.screenshots", description=__doc__.splitlines()[0]
    )
    parser.add_argument("names", nargs="*", help="scenes to render (default: all)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default: screenshots)"
    )
    parser.add_argument("--svg", action="store_true", help="keep the SVG next to each PNG")
    args = parser.parse_args(argv)
    known = {scene.name: scene for scene in SCENES}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown scene {', '.join(unknown)} (scenes: {', '.join(known)})")
    args.out.mkdir(parents=True, exist_ok=True)
    for scene in [known[name] for name in args.names] or SCENES:
        svg = scene_svg(scene)
        png = args.out / f"{scene.name}.png"
        written = [png] if svg_to_png(svg, png) else []
        if args.svg or not written:
            written.append(args.out / f"{scene.name}.svg")
            written[-1].write_text(svg, encoding="utf-8")
        print(" ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
