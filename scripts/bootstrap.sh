#!/usr/bin/env bash
# Prepare everything the project needs on a fresh Debian 12 machine (run as root, or with sudo):
# system packages the tests use, a virtual environment in .venv, the project and its test extras.
# Idempotent and quick when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3-venv python3-dev nftables iproute2 curl fuse3 libfuse3-3 util-linux tmux docker.io busybox-static)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "bootstrap: installing system packages: ${missing[*]}" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PY --version)" >&2
  "$PY" -m venv .venv
fi
stamp=.venv/.cornus-installed
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: installing cornus-tui and its test dependencies into .venv" >&2
  log=.venv/pip-install.log
  if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e '.[test]'; } >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "bootstrap: pip install failed (full log: $log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
