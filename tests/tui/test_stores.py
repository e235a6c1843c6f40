"""The headless stores: joining hop events into rows, bounded rings, rates, and invariants under any input."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.events import (
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
    decode_event,
)
from cornus_core.stores import (
    NOT_REACHED,
    OPEN,
    ConnectionStore,
    MountStore,
    Ring,
    SessionStore,
    Stores,
    filter_rows,
)


class FakeClock:
    """A clock the test moves by hand, so rates and timings are exact."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def hop(conn: str, name: str, route: str, **kw: object) -> HopDecision:
    fields: dict[str, object] = {
        "reason": "default",
        "version": "v1",
        "host": "api.corp.example",
        "port": 443,
    }
    fields.update(kw)
    return HopDecision(conn=conn, hop=name, route=route, **fields)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------- ring


def test_ring_numbers_items_forever_and_forgets_the_oldest() -> None:
    ring: Ring[str] = Ring(3)
    for letter in "abcde":
        ring.append(letter)
    assert (ring.first, ring.next, len(ring)) == (2, 5, 3)
    assert list(ring) == ["c", "d", "e"]
    assert ring.since(3) == ["d", "e"]
    assert ring.since(0) == ["c", "d", "e"]
    assert ring.since(9) == []
    assert ring[4] == "e"
    with pytest.raises(IndexError, match="sequence number 1 is not held"):
        ring[1]
    with pytest.raises(ValueError, match="at least 1"):
        Ring(0)


@given(st.integers(1, 8), st.lists(st.integers(), max_size=40), st.integers(0, 45))
def test_ring_matches_a_list_model(capacity: int, items: list[int], since: int) -> None:
    ring: Ring[int] = Ring(capacity)
    for item in items:
        ring.append(item)
    kept = items[-capacity:] if items else []
    assert list(ring) == kept
    assert len(ring) == len(kept)
    assert ring.since(since) == items[max(since, len(items) - capacity) :]


# ----------------------------------------------------------------------------------------- connections


def test_three_hops_and_the_end_join_into_one_row() -> None:
    clock = FakeClock()
    store = ConnectionStore(clock=clock)
    store.apply(hop("c1", "caretaker", "client", reason="rule 0 '*.corp.example'", t_ms=1_700_000_000_000))
    clock.now += 0.002
    store.apply(hop("c1", "server", "client", reason="rule 0 '*.corp.example'", host=None))
    clock.now += 0.003
    store.apply(hop("c1", "client", "client", reason="rule 0 '*.corp.example'", ip="10.1.2.3"))
    store.apply(
        ConnEnd(conn="c1", hop="client", outcome="ok", bytes_up=100, bytes_down=2000, duration_ms=42.5)
    )

    row = store.get("c1")
    assert row is not None
    assert (row.host, row.ip, row.port, row.t_ms) == ("api.corp.example", "10.1.2.3", 443, 1_700_000_000_000)
    assert [row.hop_route(h) for h in HOPS] == ["client", "client", "client"]
    assert row.route == "client" and row.outcome == "ok"
    assert (row.bytes_up, row.bytes_down, row.duration_ms) == (100, 2000, 42.5)
    server = row.hop("server")
    assert server is not None and server.reason == "rule 0 '*.corp.example'" and server.after_ms == 2.0
    client = row.hop("client")
    assert client is not None and client.after_ms == 5.0
    assert row.versions_agree
    assert row.dest == "api.corp.example:443"
    assert store.version == 4 and row.changed == 4
    assert store.routes == Counter({"client": 1}) and store.outcomes == Counter({"ok": 1})


def test_hops_not_reached_and_the_effective_route() -> None:
    store = ConnectionStore()
    store.apply(hop("c1", "caretaker", "cluster"))
    store.apply(hop("c2", "caretaker", "client"))
    store.apply(hop("c2", "server", "deny", reason="ceiling: deny"))
    store.apply(ConnEnd(conn="c2", hop="server", outcome="deny", reason="policy"))
    c1, c2 = store.get("c1"), store.get("c2")
    assert c1 is not None and c2 is not None
    assert c1.hop_route("server") == NOT_REACHED and c1.outcome == OPEN and c1.route == "cluster"
    assert c2.route == "deny" and c2.hop_route("client") == NOT_REACHED
    snap = store.snapshot()
    assert snap.routes == {"cluster": 1, "deny": 1}
    assert snap.outcomes == {OPEN: 1, "deny": 1}
    assert [row.conn for row in snap.rows] == ["c1", "c2"]


def test_an_ipv6_destination_is_bracketed_and_version_mismatch_is_seen() -> None:
    store = ConnectionStore()
    store.apply(hop("c1", "caretaker", "client", host=None, ip="2001:db8::1", port=80, version="v1"))
    store.apply(hop("c1", "server", "client", host=None, ip="2001:db8::1", port=80, version="v2"))
    row = store.get("c1")
    assert row is not None and row.dest == "[2001:db8::1]:80" and not row.versions_agree


def test_the_ring_keeps_the_newest_rows_and_counts_only_what_it_holds() -> None:
    store = ConnectionStore(capacity=100)
    routes = ["client", "gateway", "cluster", "deny"]
    for i in range(5_000):
        conn = f"c{i}"
        store.apply(hop(conn, "caretaker", routes[i % 4], host=f"h{i}.example"))
        store.apply(ConnEnd(conn=conn, hop="caretaker", outcome="ok" if i % 3 else "error"))
    assert len(store) == 100 and store.total == 5_000
    rows = store.rows()
    assert [row.conn for row in rows] == [f"c{i}" for i in range(4_900, 5_000)]
    assert sum(store.routes.values()) == 100 == sum(store.outcomes.values())
    assert store.routes == Counter(row.route for row in rows)
    assert store.get("c0") is None
    # A late event for a connection no longer held starts a fresh row.
    store.apply(ConnEnd(conn="c0", hop="client", outcome="timeout"))
    late = store.get("c0")
    assert late is not None and late.seq == 5_000 and late.route == "" and late.outcome == "timeout"


def test_filter_matches_any_field_and_all_words() -> None:
    store = ConnectionStore()
    store.apply(hop("a", "caretaker", "client", host="wiki.corp.example", reason='pac "CLIENT"'))
    store.apply(ConnEnd(conn="a", hop="client", outcome="ok"))
    store.apply(hop("b", "caretaker", "deny", host="ads.example", reason="rule 3 '*.ads.*'"))
    store.apply(hop("c", "caretaker", "cluster", host=None, ip="10.0.0.7", port=5432))
    rows = store.rows()
    assert [r.conn for r in filter_rows(rows, "CORP")] == ["a"]
    assert [r.conn for r in filter_rows(rows, "deny")] == ["b"]
    assert [r.conn for r in filter_rows(rows, "10.0.0")] == ["c"]
    assert [r.conn for r in filter_rows(rows, "5432")] == ["c"]
    assert [r.conn for r in filter_rows(rows, "client ok")] == ["a"]
    assert [r.conn for r in filter_rows(rows, "client deny")] == []
    assert [r.conn for r in filter_rows(rows, "  ")] == ["a", "b", "c"]


def test_recent_destinations_are_distinct_and_newest_first() -> None:
    store = ConnectionStore()
    for i, host in enumerate(["a.example", "b.example", "a.example", "c.example"]):
        store.apply(hop(f"c{i}", "caretaker", "client", host=host))
    assert [r.host for r in store.recent_destinations()] == ["c.example", "a.example", "b.example"]
    assert [r.host for r in store.recent_destinations(limit=2)] == ["c.example", "a.example"]


# ----------------------------------------------------------------------------------------- others


def test_mount_rates_come_from_consecutive_cumulative_reports() -> None:
    clock = FakeClock()
    store = MountStore(history=3, clock=clock)
    first = store.apply(MountStats(name="src", ops={"read": 10}, bytes_read=1_000, latency_ms_sum=5.0))
    assert first.last is None and first.total_ops == 10
    clock.now += 2.0
    row = store.apply(
        MountStats(name="src", ops={"read": 30, "walk": 10}, bytes_read=5_000, errors=1, latency_ms_sum=15.0)
    )
    assert row.last is not None
    assert row.last.ops_per_s == 15.0  # 30 new ops in 2 s
    assert row.last.read_bps == 2_000.0
    assert row.last.latency_ms == pytest.approx(10.0 / 30)
    assert row.last.errors == 1
    assert row.op_rates == {"read": 10.0, "walk": 5.0}
    # The export restarted: counters went down, so the new values are the interval's counts.
    clock.now += 1.0
    row = store.apply(MountStats(name="src", ops={"read": 4}, bytes_read=100))
    assert row.last is not None and row.last.ops_per_s == 4.0 and row.last.read_bps == 100.0
    for _ in range(5):
        clock.now += 1.0
        store.apply(MountStats(name="src", ops={"read": 4}))
    assert len(row.history) == 3


def test_credentials_keep_each_request_and_a_summary_per_name() -> None:
    stores = Stores()
    stores.apply(
        CredentialRequest(name="aws", delivery="endpoint", cache="fetched", outcome="ok", expiration="E1")
    )
    stores.apply(CredentialRequest(name="aws", delivery="endpoint", cache="hit", outcome="ok"))
    stores.apply(CredentialRequest(name="npm", delivery="file", cache="fetched", outcome="error"))
    store = stores.credentials
    assert [r.name for r in store.requests] == ["aws", "aws", "npm"]
    aws = store.by_name["aws"]
    assert (aws.requests, aws.fetched, aws.last_outcome, aws.expiration) == (2, 1, "ok", "E1")
    assert store.by_name["npm"].last_outcome == "error"


def test_session_state_follows_the_control_stream() -> None:
    store = SessionStore(server="https://cornus.example", log_lines=3)
    assert store.state == "connecting"
    store.apply(Status(state="deploying", detail="pulling image"))
    assert (store.state, store.pod_status) == ("deploying", "pulling image")
    store.apply(Ready(deployment="d-42", backend="local", policy_version="v7"))
    assert (store.state, store.deployment, store.backend, store.policy_version) == (
        "running",
        "d-42",
        "local",
        "v7",
    )
    for i in range(5):
        store.apply(Log(source="app", line=f"line {i}"))
    assert [line.line for line in store.log] == ["line 2", "line 3", "line 4"]
    store.apply(Exit(code=3))
    store.apply(Error(message="pod evicted", fatal=True))
    store.apply(Done(reason="workload exited"))
    assert store.exit_code == 3 and store.state == "failed" and list(store.errors) == ["pod evicted"]
    assert store.done_reason == "workload exited"
    assert store.log.next == 7  # the exit and the error are logged too


def test_events_survive_the_wire_into_the_stores() -> None:
    stores = Stores()
    events: list[Event] = [
        Status(state="running"),
        hop("c1", "caretaker", "gateway"),
        ConnEnd(conn="c1", hop="server", outcome="refused", reason="connection refused"),
        MountStats(name="src", ops={"read": 1}),
    ]
    for event in events:
        stores.apply(decode_event(event.encode()))
    row = stores.connections.get("c1")
    assert row is not None and row.route == "gateway" and row.outcome == "refused"
    assert stores.session.state == "running" and "src" in stores.mounts.mounts
    assert stores.version == 4


# ----------------------------------------------------------------------------------------- any sequence

ROUTES = ["client", "gateway", "cluster", "deny", "weird"]
OUTCOMES = ["ok", "deny", "refused", "timeout", "error"]

conn_events = st.one_of(
    st.builds(
        HopDecision,
        conn=st.sampled_from([f"c{i}" for i in range(12)]),
        hop=st.sampled_from([*HOPS, "other"]),
        route=st.sampled_from(ROUTES),
        reason=st.text(max_size=8),
        version=st.sampled_from(["v1", "v2"]),
        host=st.none() | st.sampled_from(["a.example", "B.EXAMPLE", ""]),
        ip=st.none() | st.sampled_from(["10.0.0.1", "::1"]),
        port=st.integers(0, 65535),
        t_ms=st.integers(0, 2**41),
    ),
    st.builds(
        ConnEnd,
        conn=st.sampled_from([f"c{i}" for i in range(12)]),
        hop=st.sampled_from(HOPS),
        outcome=st.sampled_from(OUTCOMES),
        bytes_up=st.integers(0, 10**9),
        bytes_down=st.integers(0, 10**9),
        duration_ms=st.floats(0, 1e6),
    ),
)


@settings(max_examples=300)
@given(st.integers(1, 6), st.lists(conn_events, max_size=80))
def test_any_sequence_of_connection_events_keeps_the_invariants(
    capacity: int, events: list[HopDecision | ConnEnd]
) -> None:
    store = ConnectionStore(capacity)
    for event in events:
        store.apply(event)
    rows = store.rows()
    assert len(rows) == len(store) <= capacity
    assert store.version == len(events)
    assert [row.seq for row in rows] == list(range(store.total - len(rows), store.total))
    assert len({row.conn for row in rows}) == len(rows)  # one row per connection held
    for row in rows:
        assert store.get(row.conn) is row
        assert row.changed <= store.version
        assert row.outcome == OPEN or row.outcome in OUTCOMES
        assert row.matches(row.conn)
    assert store.routes == Counter(row.route for row in rows)
    assert store.outcomes == Counter(row.outcome for row in rows)
    # The newest event's connection is always held, and reflects that event.
    if events:
        last = store.get(events[-1].conn)
        assert last is not None and last.changed == store.version


any_event = st.one_of(
    conn_events,
    st.builds(Log, source=st.sampled_from(["app", "server"]), line=st.text(max_size=20)),
    st.builds(
        Status, state=st.sampled_from(["deploying", "running", "stopping"]), detail=st.text(max_size=5)
    ),
    st.builds(Ready, deployment=st.text(max_size=5), backend=st.text(max_size=5)),
    st.builds(Error, message=st.text(max_size=10), fatal=st.booleans()),
    st.builds(Exit, code=st.integers(-255, 255)),
    st.builds(Done, reason=st.text(max_size=5)),
    st.builds(
        CredentialRequest,
        name=st.sampled_from(["aws", "npm"]),
        delivery=st.just("endpoint"),
        cache=st.sampled_from(["hit", "fetched", "stale"]),
        outcome=st.sampled_from(["ok", "error"]),
    ),
    st.builds(
        MountStats,
        name=st.sampled_from(["src", "data"]),
        ops=st.dictionaries(st.sampled_from(["read", "write", "walk"]), st.integers(0, 10**6)),
        bytes_read=st.integers(0, 10**12),
        errors=st.integers(0, 100),
        latency_ms_sum=st.floats(0, 1e9),
    ),
)


@settings(max_examples=200)
@given(st.lists(st.tuples(any_event, st.floats(0, 5)), max_size=60))
def test_any_sequence_of_session_events_keeps_every_store_consistent(
    steps: list[tuple[Event, float]],
) -> None:
    clock = FakeClock()
    stores = Stores(clock=clock, connections=5, credentials=4, log_lines=4, mount_history=3)
    for event, pause in steps:
        clock.now += pause
        before = stores.version
        stores.apply(event)
        assert stores.version == before + 1
    assert len(stores.session.log) <= 4 and len(stores.credentials.requests) <= 4
    for row in stores.mounts.mounts.values():
        assert len(row.history) <= 3
        for sample in row.history:
            assert sample.ops_per_s >= 0 and sample.read_bps >= 0 and sample.latency_ms >= 0
    summed = sum(s.requests for s in stores.credentials.by_name.values())
    assert summed == sum(isinstance(event, CredentialRequest) for event, _ in steps)
