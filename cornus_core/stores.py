"""In-memory stores that aggregate session events for the dashboard and ``--plain``.

The session calls :meth:`Stores.apply` once per event, from its event loop (the stores take no locks:
apply and read on that one thread); every update is O(1).
Readers (the UI a few times a second) compare a store's ``version`` with the one they last saw and
take a snapshot only when it moved. Connection rows and log lines are immutable, so a snapshot is a
list of references, never a copy of the data.

Bounded everywhere: connections, credential requests, log lines and errors live in ring buffers, so
a session that runs for days uses the same memory as one that runs for minutes.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar, cast

from .events import (
    HOPS,
    ConnEnd,
    CredentialRequest,
    Done,
    Error,
    Event,
    Exit,
    HopDecision,
    Log,
    MountStats,
    Ready,
    Status,
)

Clock = Callable[[], float]  # seconds, monotonic
T = TypeVar("T")

OPEN = "open"  # the outcome of a connection that has not ended (yet)
NOT_REACHED = "not reached"


class Ring(Generic[T]):
    """A bounded sequence numbered from 0 forever: item ``seq`` lives until ``capacity`` newer ones exist.

    O(1) append, lookup and replace by sequence number; iteration in sequence order.
    """

    __slots__ = ("_items", "_next", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._items: list[T | None] = [None] * capacity
        self._next = 0  # sequence number of the next append

    @property
    def first(self) -> int:
        """The oldest sequence number still held."""
        return max(0, self._next - self.capacity)

    @property
    def next(self) -> int:
        """The sequence number the next append gets (the count of items ever appended)."""
        return self._next

    def __len__(self) -> int:
        return self._next - self.first

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self.first <= seq < self._next

    def append(self, item: T) -> tuple[int, T | None]:
        """Append; returns the new item's sequence number and the item it pushed out, if any."""
        seq = self._next
        slot = seq % self.capacity
        evicted = self._items[slot] if seq >= self.capacity else None
        self._items[slot] = item
        self._next = seq + 1
        return seq, evicted

    def __getitem__(self, seq: int) -> T:
        if seq not in self:
            raise IndexError(f"sequence number {seq} is not held (held: {self.first}..{self._next - 1})")
        item = self._items[seq % self.capacity]
        assert item is not None
        return item

    def __setitem__(self, seq: int, item: T) -> None:
        if seq not in self:
            raise IndexError(f"sequence number {seq} is not held (held: {self.first}..{self._next - 1})")
        self._items[seq % self.capacity] = item

    def since(self, seq: int) -> list[T]:
        """Items with sequence numbers >= ``seq`` (those still held), oldest first."""
        start = max(seq, self.first)
        if start >= self._next:
            return []
        head, tail = start % self.capacity, self._next % self.capacity
        # Every slot in the held range is filled: only slots past the first wrap are ever None.
        if head < tail:
            return cast("list[T]", self._items[head:tail])
        return cast("list[T]", self._items[head:] + self._items[:tail])

    def __iter__(self) -> Iterator[T]:
        return iter(self.since(self.first))


# --------------------------------------------------------------------------------------------- connections


@dataclass(frozen=True, slots=True)
class HopTrace:
    """One hop's decision for one connection."""

    route: str
    reason: str  # the rule or PAC return that decided
    version: str  # the policy version that decided
    after_ms: float = 0.0  # when the decision arrived, after the connection's first event


@dataclass(frozen=True, slots=True)
class ConnectionRow:
    """Everything known about one egress connection, joined from its hops' events by ``conn`` id."""

    seq: int
    conn: str
    t_ms: int = 0  # the connection's time (ms since the epoch), stamped by the first hop
    host: str | None = None
    ip: str | None = None
    port: int = 0
    hops: dict[str, HopTrace] = field(default_factory=dict)  # hop name -> decision; absent: not reached
    outcome: str = OPEN
    end_reason: str = ""
    end_hop: str = ""
    bytes_up: int = 0
    bytes_down: int = 0
    duration_ms: float = 0.0
    first_seen: float = 0.0  # store clock, seconds
    changed: int = 0  # the store version that last changed this row
    haystack: str = field(init=False, repr=False, compare=False)  # lower-case text the filter searches

    def __post_init__(self) -> None:
        parts = [self.conn, self.host or "", self.ip or "", str(self.port), self.outcome, self.end_reason]
        for trace in self.hops.values():
            parts += (trace.route, trace.reason, trace.version)
        object.__setattr__(self, "haystack", "\n".join(parts).lower())  # derived once; the row is frozen

    @property
    def route(self) -> str:
        """The route that took effect: the decision of the furthest hop reached ("" before any)."""
        for hop in reversed(HOPS):
            trace = self.hops.get(hop)
            if trace is not None:
                return trace.route
        return ""

    @property
    def dest(self) -> str:
        """``host:port`` (the IP when no name is known; IPv6 in brackets)."""
        name = self.host or self.ip or "?"
        if ":" in name:
            name = f"[{name}]"
        return f"{name}:{self.port}" if self.port else name

    @property
    def versions_agree(self) -> bool:
        return len({trace.version for trace in self.hops.values()}) <= 1

    def hop(self, name: str) -> HopTrace | None:
        return self.hops.get(name)

    def hop_route(self, name: str) -> str:
        trace = self.hops.get(name)
        return trace.route if trace is not None else NOT_REACHED

    def matches(self, needle: str) -> bool:
        """Case-insensitive substring match over host, IP, port, routes, outcome and reasons."""
        return needle.lower() in self.haystack


@dataclass(frozen=True, slots=True)
class ConnectionSnapshot:
    version: int
    rows: tuple[ConnectionRow, ...]  # oldest first
    total: int  # connections ever seen
    routes: dict[str, int]  # effective route -> rows held
    outcomes: dict[str, int]  # outcome ("open" included) -> rows held


class ConnectionStore:
    """Joins :class:`HopDecision` and :class:`ConnEnd` events into one row per connection.

    A ring of ``capacity`` rows; an event for a connection no longer held starts a fresh row. Route and
    outcome counts cover the rows held, so they always equal what a reader can see.
    """

    def __init__(self, capacity: int = 10_000, *, clock: Clock = time.monotonic) -> None:
        self._ring: Ring[ConnectionRow] = Ring(capacity)
        self._by_conn: dict[str, int] = {}
        self._clock = clock
        self.version = 0
        self.routes: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()

    @property
    def capacity(self) -> int:
        return self._ring.capacity

    @property
    def total(self) -> int:
        return self._ring.next

    def __len__(self) -> int:
        return len(self._ring)

    def apply(self, event: HopDecision | ConnEnd) -> ConnectionRow:
        self.version += 1
        row = self._row_for(event.conn)
        if isinstance(event, HopDecision):
            after_ms = round((self._clock() - row.first_seen) * 1000.0, 3)
            hops = {**row.hops, event.hop: HopTrace(event.route, event.reason, event.version, after_ms)}
            # The first hop knows the most (the name the app used); later hops only fill gaps.
            new = replace(
                row,
                hops=hops,
                host=row.host or event.host,
                ip=row.ip or event.ip,
                port=row.port or event.port,
                t_ms=row.t_ms or event.t_ms,
                changed=self.version,
            )
        else:
            new = replace(
                row,
                outcome=event.outcome,
                end_reason=event.reason,
                end_hop=event.hop,
                bytes_up=max(row.bytes_up, event.bytes_up),
                bytes_down=max(row.bytes_down, event.bytes_down),
                duration_ms=max(row.duration_ms, event.duration_ms),
                changed=self.version,
            )
        self._swap(row, new)
        return new

    def _row_for(self, conn: str) -> ConnectionRow:
        seq = self._by_conn.get(conn)
        if seq is not None and seq in self._ring:
            return self._ring[seq]
        row = ConnectionRow(seq=self._ring.next, conn=conn, first_seen=self._clock())
        seq, evicted = self._ring.append(row)
        self._by_conn[conn] = seq
        if evicted is not None:
            if self._by_conn.get(evicted.conn) == evicted.seq:
                del self._by_conn[evicted.conn]
            self._count(evicted, -1)
        self._count(row, +1)
        return row

    def _swap(self, old: ConnectionRow, new: ConnectionRow) -> None:
        before, after = old.route, new.route
        if before != after:
            _bump(self.routes, before, -1)
            _bump(self.routes, after, +1)
        if old.outcome != new.outcome:
            _bump(self.outcomes, old.outcome, -1)
            _bump(self.outcomes, new.outcome, +1)
        self._ring[new.seq] = new

    def _count(self, row: ConnectionRow, delta: int) -> None:
        _bump(self.routes, row.route, delta)
        _bump(self.outcomes, row.outcome, delta)

    def get(self, conn: str) -> ConnectionRow | None:
        seq = self._by_conn.get(conn)
        return self._ring[seq] if seq is not None and seq in self._ring else None

    def rows(self) -> list[ConnectionRow]:
        """Rows held, oldest first."""
        return self._ring.since(0)

    def snapshot(self) -> ConnectionSnapshot:
        routes = {key: n for key, n in self.routes.items() if key}
        return ConnectionSnapshot(self.version, tuple(self.rows()), self.total, routes, dict(self.outcomes))

    def recent_destinations(self, limit: int = 50) -> list[ConnectionRow]:
        """The newest row of each distinct (host, ip, port), newest first."""
        seen: set[tuple[str | None, str | None, int]] = set()
        found: list[ConnectionRow] = []
        for row in reversed(self.rows()):
            key = (row.host, row.ip, row.port)
            if key in seen or not (row.host or row.ip):
                continue
            seen.add(key)
            found.append(row)
            if len(found) >= limit:
                break
        return found


def _bump(counter: Counter[str], key: str, delta: int) -> None:
    counter[key] += delta
    if not counter[key]:
        del counter[key]


def filter_rows(rows: Sequence[ConnectionRow], needle: str) -> list[ConnectionRow]:
    """Rows whose host, IP, port, routes, outcome or reasons contain ``needle`` (case-insensitive).

    Several words must all match (``client ok`` finds client-routed connections that ended ok).
    """
    words = needle.lower().split()
    if not words:
        return list(rows)
    return [row for row in rows if all(word in row.haystack for word in words)]


# --------------------------------------------------------------------------------------------- mounts


@dataclass(frozen=True, slots=True)
class MountSample:
    """Rates over the interval between two :class:`MountStats` reports."""

    at: float  # store clock, seconds
    ops_per_s: float
    read_bps: float
    write_bps: float
    latency_ms: float  # mean service time of the interval's ops
    errors: int  # errors in the interval


@dataclass(slots=True)
class MountRow:
    name: str
    ops: dict[str, int] = field(default_factory=dict)  # cumulative, by request name
    bytes_read: int = 0
    bytes_written: int = 0
    errors: int = 0
    latency_ms_sum: float = 0.0
    reports: int = 0
    last: MountSample | None = None  # rates of the latest interval (None after the first report)
    op_rates: dict[str, float] = field(default_factory=dict)  # latest interval's ops/s by request name
    history: deque[MountSample] = field(default_factory=deque)
    reported_at: float | None = None  # store clock of the latest report

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def mean_latency_ms(self) -> float:
        total = self.total_ops
        return self.latency_ms_sum / total if total else 0.0


class MountStore:
    """Per mount: cumulative counters and a bounded history of rates for sparklines.

    :class:`MountStats` events carry cumulative counters (what the 9P server has served so far); the
    store derives per-interval rates from consecutive reports. A counter that goes down means the
    export restarted: the new value is taken as the interval's count.
    """

    def __init__(self, history: int = 120, *, clock: Clock = time.monotonic) -> None:
        self.mounts: dict[str, MountRow] = {}
        self._history = history
        self._clock = clock
        self.version = 0

    def apply(self, event: MountStats) -> MountRow:
        self.version += 1
        now = self._clock()
        row = self.mounts.get(event.name)
        if row is None:
            row = self.mounts[event.name] = MountRow(event.name, history=deque(maxlen=self._history))
        op_deltas = {op: _delta(row.ops.get(op, 0), count) for op, count in event.ops.items()}
        ops = sum(op_deltas.values())
        read = _delta(row.bytes_read, event.bytes_read)
        written = _delta(row.bytes_written, event.bytes_written)
        errors = _delta(row.errors, event.errors)
        latency = _delta(row.latency_ms_sum, event.latency_ms_sum)
        if row.reported_at is not None and now > row.reported_at:
            span = now - row.reported_at
            sample = MountSample(
                at=now,
                ops_per_s=ops / span,
                read_bps=read / span,
                write_bps=written / span,
                latency_ms=latency / ops if ops else 0.0,
                errors=int(errors),
            )
            row.last = sample
            row.history.append(sample)
            row.op_rates = {op: n / span for op, n in op_deltas.items() if n}
        row.reported_at = now
        row.ops = dict(event.ops)
        row.bytes_read = event.bytes_read
        row.bytes_written = event.bytes_written
        row.errors = event.errors
        row.latency_ms_sum = event.latency_ms_sum
        row.reports += 1
        return row


def _delta(before: float, now: float) -> float:
    return now - before if now >= before else now


# --------------------------------------------------------------------------------------------- credentials


@dataclass(frozen=True, slots=True)
class CredentialRow:
    seq: int
    at: float  # store clock, seconds
    name: str
    delivery: str
    cache: str  # hit, fetched, stale
    outcome: str
    latency_ms: float
    expiration: str | None


@dataclass(frozen=True, slots=True)
class CredentialSummary:
    name: str
    requests: int
    fetched: int
    last_outcome: str
    expiration: str | None


class CredentialStore:
    """Each credential request (bounded), and per source name a running summary."""

    def __init__(self, capacity: int = 1_000, *, clock: Clock = time.monotonic) -> None:
        self.requests: Ring[CredentialRow] = Ring(capacity)
        self.by_name: dict[str, CredentialSummary] = {}
        self._clock = clock
        self.version = 0

    def apply(self, event: CredentialRequest) -> CredentialRow:
        self.version += 1
        row = CredentialRow(
            seq=self.requests.next,
            at=self._clock(),
            name=event.name,
            delivery=event.delivery,
            cache=event.cache,
            outcome=event.outcome,
            latency_ms=event.latency_ms,
            expiration=event.expiration,
        )
        self.requests.append(row)
        before = self.by_name.get(event.name)
        self.by_name[event.name] = CredentialSummary(
            name=event.name,
            requests=(before.requests if before else 0) + 1,
            fetched=(before.fetched if before else 0) + (event.cache == "fetched"),
            last_outcome=event.outcome,
            expiration=event.expiration or (before.expiration if before else None),
        )
        return row


# --------------------------------------------------------------------------------------------- session


@dataclass(frozen=True, slots=True)
class LogLine:
    seq: int
    source: str  # app, caretaker, server, or "cornus" for the session's own messages
    stream: str
    line: str


class SessionStore:
    """The session's state and the workload's log (bounded)."""

    def __init__(self, *, server: str = "", log_lines: int = 5_000, errors: int = 100) -> None:
        self.server = server
        self.state = "connecting"
        self.pod_status = ""  # the latest status detail: what the pod is doing
        self.backend = ""
        self.deployment = ""
        self.policy_version = ""
        self.exit_code: int | None = None
        self.done_reason: str | None = None
        self.errors: deque[str] = deque(maxlen=errors)
        self.log: Ring[LogLine] = Ring(log_lines)
        self.version = 0

    def apply(self, event: Log | Status | Ready | Error | Exit | Done) -> None:
        self.version += 1
        if isinstance(event, Log):
            self.log.append(LogLine(self.log.next, event.source, event.stream, event.line))
        elif isinstance(event, Status):
            self.state, self.pod_status = event.state, event.detail
        elif isinstance(event, Ready):
            self.deployment = event.deployment
            self.backend = event.backend or self.backend
            self.policy_version = event.policy_version or self.policy_version
            if self.state in ("connecting", "validating", "deploying"):
                self.state = "running"
        elif isinstance(event, Error):
            self.errors.append(event.message)
            self.log.append(LogLine(self.log.next, "cornus", "stderr", f"error: {event.message}"))
            if event.fatal:
                self.state = "failed"
        elif isinstance(event, Exit):
            self.exit_code = event.code
            self.log.append(
                LogLine(self.log.next, "cornus", "stdout", f"workload exited with code {event.code}")
            )
        else:
            self.done_reason = event.reason
            if self.state != "failed":
                self.state = "done"

    def set_policy_version(self, version: str) -> None:
        """A policy update took effect (the session applied a new version)."""
        self.version += 1
        self.policy_version = version


# --------------------------------------------------------------------------------------------- all of them


class Stores:
    """All the stores of one session; :meth:`apply` routes each event to its store."""

    def __init__(
        self,
        *,
        server: str = "",
        clock: Clock = time.monotonic,
        connections: int = 10_000,
        credentials: int = 1_000,
        log_lines: int = 5_000,
        mount_history: int = 120,
    ) -> None:
        self.clock = clock
        self.connections = ConnectionStore(connections, clock=clock)
        self.mounts = MountStore(mount_history, clock=clock)
        self.credentials = CredentialStore(credentials, clock=clock)
        self.session = SessionStore(server=server, log_lines=log_lines)

    def apply(self, event: Event) -> None:
        if isinstance(event, HopDecision | ConnEnd):
            self.connections.apply(event)
        elif isinstance(event, MountStats):
            self.mounts.apply(event)
        elif isinstance(event, CredentialRequest):
            self.credentials.apply(event)
        elif isinstance(event, Log | Status | Ready | Error | Exit | Done):
            self.session.apply(event)

    @property
    def version(self) -> int:
        """Moves whenever any store changed."""
        return (
            self.connections.version + self.mounts.version + self.credentials.version + self.session.version
        )
