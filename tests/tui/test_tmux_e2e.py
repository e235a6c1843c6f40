"""The real dashboard in a real terminal: ``cornus-tui -f SPEC`` in a detached tmux session on the embedded
server (local pods), driven by keys and read back with ``tmux capture-pane``.

A workload in the pod asks, through the caretaker's proxy, for a service of this test (routed ``client``:
all three hops), an ad tracker (``deny``) and a closed port on the pod's own loopback (``cluster``), over
and over, so the stream is live while keys are pressed. ``q`` must tear the deployment down: the process
exits, says so, and neither the pod's namespace nor its caretaker is left.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CORNUS_TUI = Path(sys.executable).parent / "cornus-tui"
WIDTH, HEIGHT = 120, 34
POD_PREFIX = "cn"  # the embedded server's pod names: cn<instance>-<number>
WORKLOAD_SECONDS = 90  # the workload stops by itself after this, even if nobody quits
WAIT = 60.0  # the bound on every wait for the pane

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(
        shutil.which("tmux") is None, reason="needs tmux on PATH (scripts/bootstrap.sh installs it)"
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the embedded server deploys into local pods"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs ip (iproute2) to list network namespaces"),
    pytest.mark.skipif(
        not CORNUS_TUI.exists(), reason=f"needs the cornus-tui console script at {CORNUS_TUI}"
    ),
]

WORKLOAD = """\
import os, time, urllib.error, urllib.request

# Always ask the caretaker, even for loopback: the policy decides where each connection leaves from.
for name in ("NO_PROXY", "no_proxy"):
    os.environ.pop(name, None)
proxy = os.environ["HTTP_PROXY"]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
urls = (os.environ["E2E_SERVICE"], "http://tracker.ads.example/pixel.gif", "http://127.0.0.1:9/")
deadline = time.monotonic() + float(os.environ["E2E_SECONDS"])
while time.monotonic() < deadline:
    for url in urls:
        try:
            with opener.open(url, timeout=5) as response:
                print(url, "HTTP", response.status, flush=True)
        except urllib.error.HTTPError as exc:
            print(url, "HTTP", exc.code, flush=True)
        except OSError as exc:
            print(url, "failed:", exc, flush=True)
    time.sleep(0.4)
"""


class Service(http.server.BaseHTTPRequestHandler):
    """The developer's service: only the caller's side of the session can reach it."""

    hits = 0

    def do_GET(self) -> None:
        Service.hits += 1
        body = b"hello from the developer's machine\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Service)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class Tmux:
    """One detached tmux server of this test's own (its own socket), one session, one pane."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def run(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=15,
            env=env,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def start(self, argv: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        size = ("-x", str(WIDTH), "-y", str(HEIGHT))
        self.run("new-session", "-d", "-s", "e2e", *size, "-c", str(cwd), *argv, env=env)
        # Keep the pane once the program exits, to read what it printed and its exit status.
        self.run("set-option", "-t", "e2e", "remain-on-exit", "on")

    def screen(self, history: bool = False) -> str:
        """What the pane shows (with ``history``, also what scrolled off it)."""
        return self.run("capture-pane", "-p", "-t", "e2e", *(["-S", "-"] if history else []))

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.run("send-keys", "-t", "e2e", *(["-l"] if literal else []), *keys)

    def exited(self) -> int | None:
        """The program's exit status once it has exited, else None."""
        dead, _, status = (
            self.run("display-message", "-p", "-t", "e2e", "#{pane_dead} #{pane_dead_status}")
            .strip()
            .partition(" ")
        )
        return int(status or -1) if dead == "1" else None

    def wait_for(self, check: Callable[[str], bool], what: str) -> str:
        """Poll the pane until ``check(screen)`` holds; the last screen is in the error otherwise."""
        deadline = time.monotonic() + WAIT
        while True:
            screen = self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"gave up after {WAIT:.0f}s waiting for {what}; the pane shows:\n{screen}"
                )
            time.sleep(0.2)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=15)


def pod_namespaces() -> set[str]:
    out = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    names = {line.split()[0] for line in out.splitlines() if line.strip()}
    return {name for name in names if re.fullmatch(rf"{POD_PREFIX}[0-9a-f]+-[0-9]+", name)}


def namespace_processes(netns: str) -> dict[int, str]:
    """pid -> command line of the processes in ``netns``."""
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=10).stdout
    return {pid: cmd for pid in map(int, out.split()) if (cmd := cmdline(pid))}


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def stream_rows(screen: str) -> list[str]:
    """The connection rows on screen (they start with the time)."""
    return [line for line in screen.splitlines() if re.match(r"\s*\d\d:\d\d:\d\d\.\d{3} ", line)]


def test_dashboard_in_tmux_end_to_end(tmp_path: Path, service: int) -> None:
    workload = tmp_path / "workload.py"
    workload.write_text(WORKLOAD)
    spec = tmp_path / "e2e.yaml"
    spec.write_text(
        f"""\
name: tmux-e2e
command: ["{sys.executable}", "-u", "{workload}"]
env:
  E2E_SERVICE: http://127.0.0.1:{service}/
  E2E_SECONDS: "{WORKLOAD_SECONDS}"
egress:
  mode: proxy
  default: cluster
  rules:
    - {{pattern: "127.0.0.1:{service}", route: client}}
    - {{pattern: "*.ads.example", route: deny}}
"""
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env |= {"CORNUS_BACKEND": "local", "XDG_CONFIG_HOME": str(tmp_path / "config"), "TERM": "xterm-256color"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(name, None)  # the caller dials the service directly

    before = pod_namespaces()
    tmux = Tmux(f"cornus-e2e-{os.getpid()}-{time.monotonic_ns()}")
    try:
        tmux.start([str(CORNUS_TUI), "-f", str(spec)], cwd=tmp_path, env=env)

        # The live stream: each route with its decision at every hop it reached, and its outcome.
        client = re.compile(rf"127\.0\.0\.1:{service}\s+client\s+client\s+client\s+ok\b")
        deny = re.compile(r"tracker\.ads\.example:80\s+deny\s+·\s+·\s+deny\b")
        cluster = re.compile(r"127\.0\.0\.1:9\s+cluster\s+·\s+·\s+(refused|failed|error)\b")
        screen = tmux.wait_for(
            lambda s: all(any(p.search(row) for row in stream_rows(s)) for p in (client, deny, cluster)),
            "client, deny and cluster connections in the stream",
        )
        assert "CARETAKER SERVER" in screen and "running" in screen.splitlines()[0]
        assert Service.hits > 0, "the client route never reached the developer's service"

        # Whose pod is it: the new namespace holding this workload; its caretaker beside it.
        found = {name: namespace_processes(name) for name in pod_namespaces() - before}
        ours = {
            name: procs for name, procs in found.items() if any(str(workload) in c for c in procs.values())
        }
        assert len(ours) == 1, f"expected one pod running {workload}, found {sorted(ours)}"
        pod, pod_processes = next(iter(ours.items()))
        assert any("caretaker" in cmd for cmd in pod_processes.values()), pod_processes

        # Filter: only client-routed rows stay, counted in the filter bar.
        tmux.keys("/")
        tmux.wait_for(lambda s: "filter" in s and "esc clears" in s, "the filter bar")
        tmux.keys("client", literal=True)
        screen = tmux.wait_for(lambda s: re.search(r"\b\d+ of \d+\b", s) is not None, "the filter count")
        tmux.keys("Enter")
        screen = tmux.wait_for(lambda s: stream_rows(s) and "tracker" not in s, "only client rows")
        client_hops = re.compile(rf"127\.0\.0\.1:{service}\s+client\s+client\s+client\s+(ok|…)")  # … open
        assert all(client_hops.search(row) for row in stream_rows(screen)), screen

        # Detail: the selected connection's trace at all three hops.
        tmux.keys("Enter")
        screen = tmux.wait_for(lambda s: "DECIDED BY" in s, "the detail trace")
        for hop in ("caretaker", "server", "client"):
            assert re.search(rf"^\s*{hop}\s+client\s+\S+", screen, re.MULTILINE), (
                f"no {hop} hop in:\n{screen}"
            )
        assert "route client" in screen and re.search(r"outcome (ok|open)", screen), screen

        # Panels: mounts (this session has none), then the session with the workload's own log.
        tmux.keys("2")
        tmux.wait_for(lambda s: "No local mounts in this session" in s, "the mounts panel")
        tmux.keys("4")
        screen = tmux.wait_for(
            lambda s: "deployment" in s and f"127.0.0.1:{service}/ HTTP 200" in s, "the session panel and log"
        )
        assert re.search(r"backend\s+local", screen), screen

        # The PAC editor opens over the dashboard; esc leaves the code editor, esc again closes it.
        tmux.keys("e")
        tmux.wait_for(lambda s: "FindProxyForURL" in s and "would change" in s, "the PAC editor's preview")
        tmux.keys("Escape")
        time.sleep(0.5)  # pacing, not timing: two escapes back to back would read as one alt+escape
        tmux.keys("Escape")
        tmux.wait_for(lambda s: "FindProxyForURL" not in s and "backend" in s, "the dashboard again")

        # Quit: the session tears the deployment down, then the program exits and says so.
        tmux.keys("q")
        deadline = time.monotonic() + WAIT
        while (status := tmux.exited()) is None:
            assert time.monotonic() < deadline, (
                f"cornus-tui still running {WAIT:.0f}s after q:\n{tmux.screen()}"
            )
            time.sleep(0.2)
        screen = tmux.screen(history=True)
        assert "cornus-tui: session done (caller asked to tear down)" in screen, f"status {status}:\n{screen}"
    finally:
        tmux.kill()

    assert pod not in pod_namespaces(), f"the pod's namespace {pod} was left behind"
    left = {pid: cmd for pid, cmd in pod_processes.items() if cmdline(pid) == cmd}
    assert not left, f"processes of the pod were left running: {left}"
