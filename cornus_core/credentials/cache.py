"""The caretaker's credential cache: fresh for min(ttl, expiry - 30 s), stale-if-error up to the expiry.

Concurrent requests for one name share one fetch. Every request produces one CredentialEvent (name,
delivery, hit/fetched/stale, outcome, latency, expiry), never the secret values.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cornus_core.credentials.credential import (
    Credential,
    CredentialError,
    Fetcher,
    UnknownCredentialError,
    format_rfc3339,
)
from cornus_core.credentials.singleflight import SingleFlight

log = logging.getLogger(__name__)

DEFAULT_TTL = 300.0
EXPIRY_MARGIN = 30.0
DEFAULT_FETCH_TIMEOUT = 30.0

Clock = Callable[[], float]
"""Seconds since the epoch (expirations are absolute times); time.time by default."""

CacheState = Literal["hit", "fetched", "stale"]


@dataclass(frozen=True)
class CredentialEvent:
    name: str
    delivery: str
    cache: CacheState
    outcome: Literal["ok", "error"]
    latency: float
    """Seconds spent answering this request."""
    expiration: datetime | None
    at: float
    error: str | None = None
    """Why the fetch failed (also set when a stale credential was served)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "delivery": self.delivery,
            "cache": self.cache,
            "outcome": self.outcome,
            "latency": self.latency,
            "expiration": format_rfc3339(self.expiration),
            "at": self.at,
            "error": self.error,
        }


def fresh_until(
    credential: Credential, fetched_at: float, ttl: float, margin: float = EXPIRY_MARGIN
) -> float:
    """When a credential fetched at fetched_at must be fetched again: min(ttl, expiry - margin)."""
    until = fetched_at + ttl
    if credential.expiration is not None:
        until = min(until, credential.expiration.timestamp() - margin)
    return until


@dataclass(frozen=True)
class _Entry:
    credential: Credential
    fresh_until: float


class CredentialCache:
    """Serve credentials by name from a fetcher (the relay to the caller) with caching."""

    def __init__(
        self,
        fetch: Fetcher,
        ttls: Mapping[str, float | None],
        *,
        clock: Clock = time.time,
        on_event: Callable[[CredentialEvent], None] | None = None,
        margin: float = EXPIRY_MARGIN,
        fetch_timeout: float = DEFAULT_FETCH_TIMEOUT,
    ) -> None:
        """ttls: every declared name with its ttl in seconds (None: DEFAULT_TTL); other names are refused."""
        self._fetch = fetch
        self._ttls = {name: DEFAULT_TTL if ttl is None else float(ttl) for name, ttl in ttls.items()}
        self._clock = clock
        self._on_event = on_event
        self._margin = margin
        self._fetch_timeout = fetch_timeout
        self._entries: dict[str, _Entry] = {}
        self._flight: SingleFlight[str, Credential] = SingleFlight()

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._ttls)

    def ttl(self, name: str) -> float:
        return self._ttls[name]

    async def get(self, name: str, delivery: str = "endpoint") -> Credential:
        if name not in self._ttls:
            raise UnknownCredentialError(f"credential {name!r} is not declared for this session")
        started, at = time.perf_counter(), self._clock()
        entry = self._entries.get(name)
        if entry is not None and at < entry.fresh_until:
            self._emit(name, delivery, "hit", started, at, entry.credential)
            return entry.credential
        try:
            credential = await self._flight.run(name, lambda: self._refresh(name))
        except CredentialError as exc:
            entry = self._entries.get(name)
            if entry is not None and _unexpired(entry.credential, self._clock()):
                self._emit(name, delivery, "stale", started, at, entry.credential, exc)
                return entry.credential
            self._emit(name, delivery, "fetched", started, at, None, exc)
            raise
        self._emit(name, delivery, "fetched", started, at, credential)
        return credential

    async def _refresh(self, name: str) -> Credential:
        fetched_at = self._clock()
        try:
            async with asyncio.timeout(self._fetch_timeout):
                credential = await self._fetch(name)
        except CredentialError:
            raise
        except TimeoutError:
            raise CredentialError(
                f"credential {name!r}: fetch timed out after {self._fetch_timeout:g}s"
            ) from None
        except Exception as exc:  # a relay transport error is a fetch failure too: stale-if-error applies
            raise CredentialError(f"credential {name!r}: fetch failed: {exc}") from exc
        until = fresh_until(credential, fetched_at, self._ttls[name], self._margin)
        self._entries[name] = _Entry(credential, until)
        return credential

    def _emit(
        self,
        name: str,
        delivery: str,
        cache: CacheState,
        started: float,
        at: float,
        served: Credential | None,
        error: CredentialError | None = None,
    ) -> None:
        if self._on_event is None:
            return
        event = CredentialEvent(
            name=name,
            delivery=delivery,
            cache=cache,
            outcome="ok" if served is not None else "error",
            latency=time.perf_counter() - started,
            expiration=served.expiration if served is not None else None,
            at=at,
            error=None if error is None else self._redact(name, str(error)),
        )
        try:
            self._on_event(event)
        except Exception:  # a broken observer must not break delivery
            log.exception("credential event observer failed")

    def _redact(self, name: str, message: str) -> str:
        """Blank out known values of this credential, should a failing command have echoed one."""
        entry = self._entries.get(name)
        for value in entry.credential.values.values() if entry is not None else ():
            if len(value) >= 4:
                message = message.replace(value, "***")
        return message


def _unexpired(credential: Credential, now: float) -> bool:
    return credential.expiration is None or now < credential.expiration.timestamp()
