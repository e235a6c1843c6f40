"""Entry point of cornus-tui (argument parsing; chooses the dashboard, plain mode or a tool command)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("cornus-tui: not yet available", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
