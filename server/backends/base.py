"""The backend interface every deploy target implements, and the deployment it acts on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cornus_core.events import Event


@dataclass
class Deployment:
    """One workload deployed for one attach session.

    `caretaker_config` is what the pod's caretaker reads (roles, egress policy): never secret.
    `caretaker_token` is handed to the pod as a secret, separately from its config.
    """

    id: str
    spec: Any  # cornus_core.spec.DeploySpec
    server_url: str  # where the caretaker dials the server
    caretaker_token: str
    caretaker_config: dict[str, Any]
    emit: Callable[[Event], None]
    state: dict[str, Any] = field(default_factory=dict)  # backend-private bookkeeping


class BackendError(Exception):
    """A backend could not apply or delete a deployment; the message says what and why."""


class Backend(Protocol):
    name: str

    async def apply(self, dep: Deployment) -> None:
        """Start the caretaker, wait for its roles to be ready, then start the workload."""

    async def wait(self, dep: Deployment) -> int:
        """Wait for the workload to exit; return its exit status."""

    async def delete(self, dep: Deployment) -> None:
        """Stop the workload first, then the caretaker; idempotent."""

    async def update_policy(self, dep: Deployment) -> None:
        """A live policy update (now in ``dep.spec.egress``) for what the backend enforces itself."""

    def status(self, dep: Deployment) -> str:
        """A short human status: pending, running, exited N, deleted."""
