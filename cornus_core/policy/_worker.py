"""The isolated PAC evaluator: a worker process that can be killed when the deadline passes.

Inside the process the engine's time limit only interrupts bytecode; a backtracking regex (or any
long native call) runs on, holding its thread. So scripts that use regexes, and every script when
``isolation="process"``, are evaluated here: the caller waits for the answer with the wall-clock
deadline and, when it passes, kills the worker (the answer is a timeout, so ``deny``) and starts a
fresh one.

Each thread that evaluates such scripts owns one worker (the same rule as the in-process contexts),
shared by all the scripts that thread evaluates; the worker keeps the most recent scripts compiled.
The protocol is JSON lines over the worker's stdin/stdout; the worker's answers are the JSON text
the sandbox built.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path

from ._sandbox import Sandbox, decode, error_json

STARTUP_TIMEOUT_S = 15.0  # interpreter start and imports, on a loaded machine
LOAD_TIMEOUT_S = 10.0  # compiling a script and running its top level once
SCRIPTS_PER_WORKER = 16
# The engine's own (CPU-time) limit in the worker fires a little before the caller's wall deadline,
# so a runaway loop is answered by the worker and only a stuck native call costs a kill and restart.
ENGINE_SHARE_OF_DEADLINE = 0.8
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


# ---- the worker process ---------------------------------------------------------------------------


class _Loaded:
    """A script the worker knows; its sandbox is rebuilt after anything broke it."""

    def __init__(self, source: str, deadline_s: float) -> None:
        self.source = source
        self.deadline_s = deadline_s
        self.sandbox: Sandbox | None = None

    def ready(self, now_ms: float) -> tuple[Sandbox | None, str]:
        if self.sandbox is None:
            sandbox = Sandbox(restricted=False, deadline_s=self.deadline_s * ENGINE_SHARE_OF_DEADLINE)
            raw = sandbox.install(self.source, now_ms)
            if decode(raw).kind != "ok":
                return None, raw
            self.sandbox = sandbox
        return self.sandbox, ""


def main() -> None:
    """Serve load/eval requests on stdin until it closes."""
    scripts: OrderedDict[str, _Loaded] = OrderedDict()
    out = sys.stdout.buffer
    out.write(b'{"ready":true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        answer = _serve(scripts, request)
        out.write(answer.encode("utf-8", "surrogatepass") + b"\n")
        out.flush()
        loaded = scripts.get(request.get("id", ""))
        if loaded is not None and loaded.sandbox is not None and loaded.sandbox.broken:
            loaded.sandbox = None
            loaded.ready(0.0)  # rebuild now, while the caller is not waiting


def _serve(scripts: OrderedDict[str, _Loaded], request: dict[str, object]) -> str:
    script_id = str(request.get("id"))
    now = float(request.get("now") or 0.0)  # type: ignore[arg-type]
    if request.get("op") == "load":
        loaded = _Loaded(str(request["source"]), float(request["deadline"]))  # type: ignore[arg-type]
        _sandbox, failure = loaded.ready(now)
        if failure:
            return failure
        scripts[script_id] = loaded
        while len(scripts) > SCRIPTS_PER_WORKER:
            scripts.popitem(last=False)
        return json.dumps({"k": "ok"})
    known = scripts.get(script_id)
    if known is None:
        return json.dumps({"k": "unloaded"})
    scripts.move_to_end(script_id)
    sandbox, failure = known.ready(now)
    if sandbox is None:
        return failure
    ip = request.get("ip")
    return sandbox.evaluate(
        str(request["url"]), str(request["host"]), ip if isinstance(ip, str) else None, now
    )


# ---- the caller's side ----------------------------------------------------------------------------


class WorkerClient:
    """One worker process, used by one thread at a time."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., WorkerClient] | None = None
        self._buffer = b""
        self._loaded: set[str] = set()
        self._ready = False
        self._spawn()

    @property
    def pid(self) -> int | None:
        """The worker process's id (for accounting its CPU time)."""
        return None if self._proc is None else self._proc.pid

    @property
    def owned_by_this_process(self) -> bool:
        return self._pid == os.getpid()

    def evaluate(
        self,
        script_id: str,
        source: str,
        deadline_s: float,
        url: str,
        host: str,
        ip: str | None,
        now_ms: float,
    ) -> str:
        """One evaluation, waiting at most ``deadline_s`` for it; the answer as sandbox JSON."""
        for _attempt in range(2):
            if script_id not in self._loaded:
                failure = self.load(script_id, source, deadline_s, now_ms)
                if failure is not None:
                    return failure
            request: dict[str, object] = {
                "op": "eval",
                "id": script_id,
                "url": url,
                "host": host,
                "ip": ip,
                "now": now_ms,
            }
            raw = self._request(request, deadline_s, "timeout")
            if decode(raw).kind != "unloaded":
                return raw
            self._loaded.discard(script_id)  # the worker let it go to make room; load it again
        return error_json("worker", "the worker keeps forgetting the script")

    def load(self, script_id: str, source: str, deadline_s: float, now_ms: float) -> str | None:
        """Compile the script in the worker; None when it loaded, else the failure as sandbox JSON."""
        request: dict[str, object] = {
            "op": "load",
            "id": script_id,
            "source": source,
            "deadline": deadline_s,
            "now": now_ms,
        }
        raw = self._request(request, LOAD_TIMEOUT_S, "worker")
        if decode(raw).kind != "ok":
            return raw
        self._loaded.add(script_id)
        return None

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def _request(self, request: dict[str, object], timeout_s: float, late_kind: str) -> str:
        try:
            self._wait_ready()
            assert self._proc is not None and self._proc.stdin is not None
            payload = json.dumps(request, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
            deadline = time.monotonic() + timeout_s
            self._proc.stdin.write(payload)
            self._proc.stdin.flush()
            line = self._read_line(deadline)
        except (OSError, ValueError) as exc:
            self._restart()
            return error_json("worker", f"the PAC worker failed: {exc}")
        if line is None:
            self._restart()
            if late_kind == "timeout":
                return error_json("timeout", "the deadline passed")
            return error_json(late_kind, f"the PAC worker gave no answer within {timeout_s:g} s")
        return line.decode("utf-8", "surrogatepass")

    def _wait_ready(self) -> None:
        if self._ready:
            return
        line = self._read_line(time.monotonic() + STARTUP_TIMEOUT_S)
        if line is None or json.loads(line).get("ready") is not True:
            raise OSError("the PAC worker did not start")
        self._ready = True

    def _read_line(self, deadline: float) -> bytes | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(math.ceil(remaining * 1000)):
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise OSError("the PAC worker exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _spawn(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env["TZ"] = "UTC"
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from cornus_core.policy._worker import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C is for the caller, not its worker
        )
        self._finalizer = weakref.finalize(self, _stop, self._proc, os.getpid())
        self._buffer = b""
        self._loaded = set()
        self._ready = False

    def _restart(self) -> None:
        """Kill the worker (it may be stuck in a regex) and start the next one right away."""
        self.close()
        self._spawn()


def _stop(proc: subprocess.Popen[bytes], owner: int) -> None:
    if os.getpid() != owner:
        return  # a forked child inherited this finalizer; the worker belongs to its parent
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:  # unflushed bytes to a dead worker
                pass


_local = threading.local()


def worker_for_thread() -> WorkerClient:
    """This thread's worker (started on first use; a forked child starts its own)."""
    client: WorkerClient | None = getattr(_local, "client", None)
    if client is None or not client.owned_by_this_process:
        client = WorkerClient()
        _local.client = client
    return client
