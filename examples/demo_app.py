"""A demo workload: asks for a few destinations through the caretaker's proxy and says what happened.

Each destination is routed differently by examples/demo.yaml:
  the developer's service -> client (the bytes leave from the caller's machine)
  an ad tracker           -> deny   (HTTP 403 from the caretaker)
  a package index         -> gateway (refused unless the server's operator enables the gateway)
  a service in the pod    -> cluster (dialed from the pod's own network: its own loopback)

The developer's service and the pod's service both live on 127.0.0.1: on the local backend the pod's
loopback is its own, so only the policy decides which machine a connection reaches.
"""

from __future__ import annotations

import http.server
import os
import sys
import threading
import urllib.error
import urllib.request

DESTINATIONS = [
    ("the developer's service", os.environ.get("DEMO_SERVICE_URL", "http://127.0.0.1:18080/")),
    ("an ad tracker", "http://tracker.ads.example/pixel.gif"),
    ("a package index", "http://pypi.org/simple/"),
    ("a service in the pod", "http://127.0.0.1:19090/metrics"),
]


class PodService(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from inside the pod\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> int:
    pod_service = http.server.ThreadingHTTPServer(("127.0.0.1", 19090), PodService)
    threading.Thread(target=pod_service.serve_forever, daemon=True).start()
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
