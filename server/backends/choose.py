"""Choosing the backend for a server on this machine: local pods where root namespaces work, user-namespace
pods where only those work, plain processes otherwise (saying what is lost in each fallback), or what the
operator asked for."""

from __future__ import annotations

import contextlib
import os
import sys

from .base import Backend, BackendError
from .docker import DockerBackend
from .local import detect_isolation
from .local.backend import Listeners, LocalBackend
from .process import ProcessBackend

NAT_ENV = "CORNUS_LOCAL_NAT"  # 1: local pods get IPv4 NAT for their own `cluster` egress (off by default)
DOCKER_NETWORK_ENV = "CORNUS_DOCKER_NETWORK"  # the dockerhost containers' network (default: bridge)
CHOICES = ("auto", "local", "process", "dockerhost")


async def choose_backend(choice: str | None) -> Backend:
    """`local`, `process`, `dockerhost`, or (empty / `auto`) whatever this machine allows (never Docker:
    that is the operator's choice)."""
    choice = (choice or "").strip().lower()
    nat = os.environ.get(NAT_ENV, "").strip() in ("1", "true", "yes")
    if choice == "dockerhost":
        return DockerBackend(network=os.environ.get(DOCKER_NETWORK_ENV, "").strip() or "bridge")
    if choice == "local":
        return LocalBackend(nat=nat)
    if choice == "process":
        return ProcessBackend()
    if choice not in ("", "auto"):
        print(f"cornus: backend {choice!r} is none of {', '.join(CHOICES)}; choosing by what this machine allows",
              file=sys.stderr)
    isolation = await detect_isolation()
    if isolation.kind == "root":
        return LocalBackend(nat=nat)
    if isolation.kind == "userns":
        return LocalBackend(rootless=True, notice=rootless_notice(isolation.failures, nat=nat))
    why = "; ".join(isolation.failures) or isolation.reason
    return ProcessBackend(notice=f"local pods are unavailable ({why}), so the workload runs as a plain process "
                          "on this machine: transparent egress and network isolation are unavailable")


def rootless_notice(failures: tuple[str, ...], *, nat: bool) -> str:
    """What a session on user-namespace pods is told it lacks."""
    why = "; ".join(failures) or "root pods are unavailable"
    return (f"local pods run in user namespaces ({why}): the pod has no link to this machine's network, so "
            "`cluster` egress reaches only what the pod's own loopback serves (NAT needs root"
            + (f", so {NAT_ENV} is ignored" if nat else "")
            + "); `client` egress and transparent capture work, the caretaker being exempt by socket mark")


async def start_backend(backend: Backend, server: Listeners) -> None:
    """Pods and containers need the server to listen where their caretakers reach it, and clean a crashed
    run's leftovers."""
    if isinstance(backend, LocalBackend | DockerBackend):
        backend.listeners = server
        try:
            await backend.start()
        except BackendError as exc:  # it fails again, with its reason, at deploy
            print(f"cornus: {exc}", file=sys.stderr)


async def stop_backend(backend: Backend) -> None:
    if isinstance(backend, LocalBackend | DockerBackend):
        with contextlib.suppress(BackendError):
            await backend.close()
