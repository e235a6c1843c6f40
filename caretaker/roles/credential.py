"""The credential role: fetch caller-minted credentials through the server relay on demand, cache them,
and deliver them to the workload (loopback endpoint, file, or environment)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json

from cornus_core.credentials import (
    Credential,
    CredentialCache,
    CredentialEndpoint,
    CredentialError,
    CredentialEvent,
    Fetcher,
    FileRefresher,
    format_rfc3339,
)
from cornus_core.events import CredentialRequest
from cornus_core.spec import CredentialSource
from cornus_core.streams import TAG_CREDENTIAL
from cornus_core.wire import WireError, write_header

from ..link import LinkDown, ServerLink
from ..supervisor import Supervisor
from ..telemetry import Telemetry

FETCH_TIMEOUT = 30.0
MAX_RESPONSE = 1024 * 1024


class CredentialRole:
    def __init__(self, sources: list[CredentialSource], link: ServerLink, telemetry: Telemetry,
                 supervisor: Supervisor | None = None) -> None:
        self.sources = sources
        self._supervisor = supervisor or Supervisor()
        self.link = link
        self.telemetry = telemetry
        self.cache = CredentialCache(self.fetch, {s.name: s.ttl for s in sources}, on_event=self._report)
        self._endpoints: list[CredentialEndpoint] = []
        self._refreshers: list[asyncio.Task[None]] = []

    async def fetch(self, name: str) -> Credential:
        """One request through the server to the caller, who mints the credential now."""
        try:
            stream = await self.link.open_stream()
        except LinkDown as exc:
            raise CredentialError(f"credential {name!r}: {exc}") from None
        try:
            await write_header(stream, TAG_CREDENTIAL, {"name": name})
            line = await asyncio.wait_for(stream.readuntil(b"\n", limit=MAX_RESPONSE), FETCH_TIMEOUT)
        except TimeoutError:
            stream.reset()
            raise CredentialError(f"credential {name!r}: the caller did not answer within {FETCH_TIMEOUT:g} s") from None
        except WireError as exc:
            stream.reset()
            raise CredentialError(f"credential {name!r}: relay failed: {exc}") from None
        with contextlib.suppress(WireError):
            await stream.aclose()
        try:
            answer = json.loads(line)
        except ValueError:
            raise CredentialError(f"credential {name!r}: the caller's answer is not JSON") from None
        if isinstance(answer, dict) and "error" in answer:
            raise CredentialError(str(answer["error"]))
        return Credential.from_json(line)

    def _report(self, event: CredentialEvent) -> None:
        # The event never carries the secret: name, delivery, cache state, outcome, expiry.
        self.telemetry.emit(CredentialRequest(
            name=event.name, delivery=event.delivery, cache=event.cache, outcome=event.outcome,
            latency_ms=event.latency * 1000, expiration=format_rfc3339(event.expiration),
        ))

    async def start(self) -> dict[str, str]:
        """Set up every delivery; returns what the workload's environment needs (URLs, env deliveries).

        Files are written once before this returns, so the workload starts with them in place.
        """
        env: dict[str, str] = {}
        for source in self.sources:
            name = source.name
            for delivery in source.deliver:
                if delivery.kind == "endpoint":
                    endpoint = CredentialEndpoint(delivery.effective_provider, [name], self._getter("endpoint"))
                    await endpoint.start()
                    self._endpoints.append(endpoint)
                    env.update(endpoint.env())
                elif delivery.kind == "file":
                    assert delivery.path is not None
                    refresher = FileRefresher(delivery.path, delivery.effective_format,
                                              functools.partial(self.cache.get, name, "file"), source.ttl)
                    await refresher.refresh()
                    self._refreshers.append(self._supervisor.start(f"credential file {delivery.path}", refresher.run))
                else:  # env: fetched once at deploy time, static for the workload's life
                    credential = await self.cache.get(name, "env")
                    prefix = delivery.prefix or ""
                    env.update({prefix + key: value for key, value in credential.values.items()})
        return env

    def _getter(self, delivery: str) -> Fetcher:
        async def get(name: str) -> Credential:
            return await self.cache.get(name, delivery)

        return get

    async def aclose(self) -> None:
        for task in self._refreshers:
            task.cancel()
        for endpoint in self._endpoints:
            await endpoint.close()
