"""A server run that dies without cleaning up: it deploys a transparent workload into a local pod,
prints ``{"owner", "pod", "pids"}`` once the workload runs, then exits at once (as a crash would).

Usage: crashing_server.py PREFIX RUN_DIR
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from cornus_core.caller import CallerSession
from cornus_core.events import Event, Log
from cornus_core.proxy.settings import ProxySettings
from cornus_core.spec import DeploySpec
from server.app import CornusServer
from server.auth import Authenticator, new_secret
from server.backends.local.backend import LocalBackend
from server.gateway import Gateway

TOKEN = "crashing-server-token"
SPEC = {"command": "echo started; exec sleep 300", "egress": {"mode": "transparent", "default": "deny"}}


async def main(prefix: str, run_dir: str) -> None:
    backend = LocalBackend(prefix=prefix, run_dir=run_dir)
    server = CornusServer(auth=Authenticator(TOKEN, new_secret()), backend=backend, gateway=Gateway(enabled=False))
    backend.listeners = server
    await backend.start()
    await server.start()
    started = asyncio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, Log) and event.source == "app" and event.line == "started":
            started.set()

    session = CallerSession(server.url, TOKEN, DeploySpec.model_validate(SPEC), on_event=on_event,
                            proxies=ProxySettings())
    task = asyncio.create_task(session.run())
    await asyncio.wait_for(started.wait(), 60)
    assert server.registry is not None and backend.pod_host is not None
    (attach,) = server.registry.deployments.values()
    assert attach.deployment is not None and not task.done()
    state = attach.deployment.state
    print(json.dumps({"owner": backend.pod_host.owner, "pod": state["pod"].name,
                      "pids": [state["caretaker"].pid, state["app"].pid]}), flush=True)
    os._exit(1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
