"""Entry point of cornus-server."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("cornus-server: not yet available in this version (the relay server lands with the relay work)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
