"""Run inside a fresh network namespace: does transparent capture work here?

Brings loopback up, loads the capture rules, then checks that an outbound TCP connection is
redirected to a local listener that recovers its original destination, and that a socket carrying
the exempt mark is let through. Prints one JSON object: ``{"ok": true}`` or ``{"ok": false,
"reason": ...}``. With ``--link`` it first makes a veth pair to route through (a namespace of its
own has only loopback, which is never captured).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from cornus_core.proxy.transparent import (
    CaptureError,
    NotRedirectedError,
    capture_ruleset,
    original_dst,
    set_socket_mark,
)

PROBE_MARK = 0x636E  # any non-zero mark
PROBE_DEST = ("203.0.113.7", 9)  # TEST-NET-3: never answers if it does leave
LINK_SETUP = [
    ["ip", "link", "set", "lo", "up"],
    ["ip", "link", "add", "cnprobe0", "type", "veth", "peer", "name", "cnprobe1"],
    ["ip", "addr", "add", "203.0.113.1/24", "dev", "cnprobe0"],
    ["ip", "link", "set", "cnprobe0", "up"],
    ["ip", "link", "set", "cnprobe1", "up"],
]


class ProbeFailed(Exception):
    pass


def _run(argv: list[str], stdin: str | None = None) -> None:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeFailed(f"{' '.join(argv[:4])}: {exc}") from None
    if done.returncode != 0:
        raise ProbeFailed(f"{' '.join(argv[:4])}: {done.stderr.strip() or done.returncode}")


def probe(make_link: bool) -> None:
    if make_link:
        for argv in LINK_SETUP:
            _run(argv)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(5)
        port = listener.getsockname()[1]
        _run(["nft", "-f", "-"], capture_ruleset(port, exempt_mark=PROBE_MARK, table="cornus_probe"))
        with socket.socket() as app:
            app.settimeout(5)
            try:
                app.connect(PROBE_DEST)
                conn, _ = listener.accept()
            except OSError as exc:
                raise ProbeFailed(f"a connection to {PROBE_DEST[0]} was not redirected: {exc}") from None
            with conn:
                try:
                    found = original_dst(conn)
                except NotRedirectedError as exc:
                    raise ProbeFailed(f"no original destination: {exc}") from None
                if found != PROBE_DEST:
                    raise ProbeFailed(f"original destination {found} instead of {PROBE_DEST}")
        with socket.socket() as own:
            try:
                set_socket_mark(own, PROBE_MARK)
            except CaptureError as exc:
                raise ProbeFailed(str(exc)) from None
            own.settimeout(0.5)  # a redirect completes at once on loopback; the real peer never answers
            try:
                own.connect(PROBE_DEST)
            except OSError:
                return
            raise ProbeFailed("a socket with the exempt mark was captured anyway")


def main() -> int:
    try:
        probe("--link" in sys.argv[1:])
    except ProbeFailed as exc:
        print(json.dumps({"ok": False, "reason": str(exc)}))
        return 1
    print(json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
