"""A demo workload: asks for a few destinations through the caretaker's proxy and says what happened.

Each destination is routed differently by examples/demo.yaml:
  the developer's service -> client (the bytes leave from the caller's machine)
  an ad tracker           -> deny   (HTTP 403 from the caretaker)
  a package index         -> gateway (refused unless the server's operator enables the gateway)
  an in-cluster service   -> cluster (dialed from the pod's own network)
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DESTINATIONS = [
    ("the developer's service", os.environ.get("DEMO_SERVICE_URL", "http://127.0.0.1:18080/")),
    ("an ad tracker", "http://tracker.ads.example/pixel.gif"),
    ("a package index", "http://pypi.org/simple/"),
    ("an in-cluster service", "http://metrics.svc.cluster.local:9090/metrics"),
]


def main() -> int:
    proxy = os.environ.get("HTTP_PROXY")
    if not proxy:
        print("no HTTP_PROXY: run me with egress mode 'proxy'", file=sys.stderr)
        return 2
    # Always ask the caretaker, even for loopback: the point is to let the policy decide.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    os.environ.pop("NO_PROXY", None)
    os.environ.pop("no_proxy", None)
    for label, url in DESTINATIONS:
        try:
            with opener.open(url, timeout=20) as response:
                body = response.read(200).decode(errors="replace").strip().splitlines()
                print(f"{label:<24} {url:<48} HTTP {response.status}  {body[0] if body else ''}")
        except urllib.error.HTTPError as exc:
            print(f"{label:<24} {url:<48} HTTP {exc.code}  ({exc.reason})")
        except OSError as exc:
            print(f"{label:<24} {url:<48} failed: {exc}")
    mounted = os.environ.get("DEMO_MOUNTED_FILE")
    if mounted and os.path.exists(mounted):
        with open(mounted) as f:
            print(f"{'a mounted file':<24} {mounted:<48} {f.readline().strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
