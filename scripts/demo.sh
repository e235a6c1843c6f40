#!/usr/bin/env bash
# The main job on the embedded default. Prepares everything it needs on first run.
# Until the live session lands this shows the route preview: how the example policy routes a set of
# destinations, exactly as all three hops (caretaker, server, caller) will decide them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
if [ $# -gt 0 ]; then
  exec cornus-tui "$@"
fi
echo "== route preview of examples/policy.yaml" >&2
cornus-tui route -f examples/policy.yaml \
  git.corp.example:443 wiki.corp.example:443 api.github.com:443 pypi.org:443 \
  10.20.30.40:5432 db.internal:5432 'metrics.svc.cluster.local:9090' '[2001:db8::7]:443' \
  'intranet:80@192.168.10.5' tracker.ads.example:443
echo "== the same destinations under examples/corp.pac" >&2
cornus-tui route --egress-pac examples/corp.pac \
  git.corp.example:443 wiki.corp.example:443 api.github.com:443 pypi.org:443 \
  10.20.30.40:5432 db.internal:5432 'metrics.svc.cluster.local:9090' '[2001:db8::7]:443' \
  'intranet:80@192.168.10.5' tracker.ads.example:443
