"""Entry point of cornus-caretaker (the pod sidecar)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("cornus-caretaker: not yet available in this version (the pod sidecar lands with the relay work)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
