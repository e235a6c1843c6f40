#!/usr/bin/env bash
# The main job on the embedded default: deploy examples/demo.yaml with an embedded server, run the
# demo workload beside its caretaker, and show every connection's decision at all three hops
# (caretaker -> server -> caller). Prepares everything it needs on first run.
# With arguments, runs `cornus-tui ARGS...` instead (e.g. `./scripts/demo.sh route ...`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
if [ $# -gt 0 ]; then
  exec cornus-tui "$@"
fi

# "The developer's service": a small web server on this machine that only the caller reaches.
if curl -s -o /dev/null http://127.0.0.1:18080/; then
  echo "demo: port 18080 is already in use; stop what listens there and run the demo again" >&2
  exit 1
fi
service_dir=$(mktemp -d)
echo "hello from the developer's machine" > "$service_dir/index.html"
python3 -m http.server 18080 --bind 127.0.0.1 --directory "$service_dir" >/dev/null 2>&1 &
service=$!
trap 'kill $service 2>/dev/null; rm -rf "$service_dir"' EXIT
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18080/ && break; sleep 0.1; done

echo "== route preview of examples/demo.yaml" >&2
cornus-tui route -f examples/demo.yaml 127.0.0.1:18080 tracker.ads.example:80 pypi.org:80 \
  127.0.0.1:19090
echo "== live session on the embedded server (--plain)" >&2
cornus-tui -f examples/demo.yaml --plain
