"""The local backend's building blocks: pods as network (and mount) namespaces on this machine (user
namespaces without root), their leftovers after a crash, and what isolation this machine allows."""

from __future__ import annotations

from ._commands import PodError
from .addresses import DEFAULT_IPV4_RANGE, DEFAULT_IPV6_RANGE, AddressError, PodAddresses
from .isolation import Isolation, detect_isolation
from .leftovers import cleanup_leftovers
from .naming import DEFAULT_PREFIX, NamingError
from .pod import DEFAULT_RUN_DIR, Pod, PodHost
from .rootless import RootlessPod

__all__ = [
    "DEFAULT_IPV4_RANGE",
    "DEFAULT_IPV6_RANGE",
    "DEFAULT_PREFIX",
    "DEFAULT_RUN_DIR",
    "AddressError",
    "Isolation",
    "NamingError",
    "Pod",
    "PodAddresses",
    "PodError",
    "PodHost",
    "RootlessPod",
    "cleanup_leftovers",
    "detect_isolation",
]
