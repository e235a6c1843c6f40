#!/usr/bin/env bash
# The whole test suite: lint (ruff), types (mypy, strict on cornus_core), then pytest.
# Fails as soon as any of them fails. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff" >&2
ruff check .
echo "== mypy" >&2
mypy --strict cornus_core
mypy cornus_tui server caretaker
echo "== pytest" >&2
pytest "$@"
