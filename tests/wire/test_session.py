"""The sans-IO session: two Session objects wired back to back, no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.wire import Flag, FrameDecoder, FrameType, ProtocolError, Session, SessionClosed
from cornus_core.wire.events import (
    DataReceived,
    Event,
    GoAwayReceived,
    PongReceived,
    StreamClosed,
    StreamEnded,
    StreamOpened,
    StreamResetReceived,
)
from cornus_core.wire.flight import FlightControl
from cornus_core.wire.frames import encode_header
from cornus_core.wire.session import INITIAL_WINDOW, SessionConfig


class Link:
    """Moves bytes between two sessions and records each side's events."""

    def __init__(self, **config: int) -> None:
        self.a = Session(client=True, config=SessionConfig(**config))
        self.b = Session(client=False, config=SessionConfig(**config))
        self.events: dict[Session, list[Event]] = {self.a: [], self.b: []}
        self.now = 0.0  # the clock the reader passes to Session.consumed

    def pump(self) -> None:
        while self.a.wants_write or self.b.wants_write:
            for src, dst in ((self.a, self.b), (self.b, self.a)):
                data = b"".join(src.data_to_send(1 << 30))
                self.events[src] += src.events_received()
                if data:
                    dst.receive_data(data)
                    self.events[dst] += dst.events_received()

    def take(self, side: Session) -> list[Event]:
        events, self.events[side] = self.events[side], []
        return events

    def read_all(self, side: Session, sid: int) -> bytes:
        """Consume what the side received on ``sid`` (as an application reader would)."""
        data = b"".join(
            bytes(e.data) for e in self.take(side) if isinstance(e, DataReceived) and e.stream_id == sid
        )
        side.consumed(sid, len(data), self.now)
        return data


def test_open_send_close_both_ways() -> None:
    link = Link()
    sid = link.a.open_stream()
    assert sid == 1
    link.a.send(sid, b"ping")
    link.a.end_stream(sid)
    link.pump()
    events = link.take(link.b)
    assert events == [StreamOpened(1), DataReceived(1, events[1].data), StreamEnded(1)]  # type: ignore[union-attr]
    assert bytes(events[1].data) == b"ping"  # type: ignore[union-attr]
    link.b.send(sid, b"pong")
    link.b.end_stream(sid)
    link.pump()
    a_events = link.take(link.a)
    assert [type(e) for e in a_events] == [DataReceived, StreamEnded, StreamClosed]
    assert StreamClosed(1) in link.take(link.b)
    assert sid not in link.a and sid not in link.b
    assert link.b.open_stream() == 2


def test_fin_rides_on_the_last_data_frame() -> None:
    link = Link()
    sid = link.a.open_stream()
    link.a.send(sid, b"x" * 10)
    link.a.end_stream(sid)
    decoder = FrameDecoder()
    frames = decoder.feed(b"".join(link.a.data_to_send()))
    assert [(f.type, f.flags) for f in frames] == [
        (FrameType.WINDOW_UPDATE, Flag.SYN),
        (FrameType.DATA, Flag.FIN),
        (FrameType.PING, Flag.SYN),  # clocks the data in flight
    ]


def test_control_frames_go_before_queued_data() -> None:
    link = Link()
    sid = link.a.open_stream()
    link.pump()
    link.a.send(sid, b"d" * 100_000)
    link.a.ping(42)
    frames = FrameDecoder().feed(b"".join(link.a.data_to_send(1 << 30)))
    assert (frames[0].type, frames[0].length) == (FrameType.PING, 42)
    assert all(f.type == FrameType.DATA for f in frames[1:-1])
    assert frames[-1].type == FrameType.PING


def test_new_stream_jumps_ahead_of_bulk_streams() -> None:
    link = Link(max_frame=1000)
    bulk = [link.a.open_stream() for _ in range(8)]
    small = link.a.open_stream()
    link.pump()
    for sid in bulk:
        link.a.send(sid, b"b" * 100_000)
    link.a.data_to_send(10_000)  # every bulk stream had a turn: they keep the link busy
    link.a.send(small, b"?")
    frames = [f for f in FrameDecoder().feed(b"".join(link.a.data_to_send(4000))) if f.type == FrameType.DATA]
    assert frames[0].stream_id == small
    assert [f.stream_id for f in frames[1:]] == bulk[2:6]  # then round robin goes on where it stopped


def test_data_is_interleaved_in_bounded_chunks() -> None:
    link = Link(max_frame=1024)
    one, two = link.a.open_stream(), link.a.open_stream()
    link.pump()
    link.a.send(one, b"1" * 10_000)
    link.a.send(two, b"2" * 10_000)
    frames = FrameDecoder().feed(b"".join(link.a.data_to_send(1 << 30)))
    assert max(len(f.payload) for f in frames) == 1024
    assert [f.stream_id for f in frames[:4]] == [one, two, one, two]


def test_send_window_limits_data_until_the_reader_consumes() -> None:
    link = Link()
    sid = link.a.open_stream()
    link.a.send(sid, b"z" * (INITIAL_WINDOW + 5000))
    link.pump()
    assert link.a.pending(sid) == 5000
    assert link.b.buffered(sid) == INITIAL_WINDOW
    assert len(link.read_all(link.b, sid)) == INITIAL_WINDOW
    link.pump()
    assert link.a.pending(sid) == 0
    assert len(link.read_all(link.b, sid)) == 5000


def test_window_grows_while_the_window_limits_the_stream_and_stops_at_the_maximum() -> None:
    link = Link(max_window=4 * 1024 * 1024)
    link.b.rtt_sample(0.050)  # a 50 ms link: half a window per millisecond is window-limited
    sid = link.a.open_stream()
    sizes = []
    for _ in range(200):
        link.a.send(sid, b"f" * 65536)
        link.pump()
        link.read_all(link.b, sid)
        link.now += 0.001
        sizes.append(link.b.window(sid))
    assert sizes[0] == INITIAL_WINDOW
    assert sizes == sorted(sizes)
    assert sizes[-1] == 4 * 1024 * 1024


def test_window_does_not_grow_without_an_rtt_or_when_the_link_is_fast() -> None:
    for rtt in (None, 0.0001):
        link = Link()
        if rtt is not None:
            link.b.rtt_sample(rtt)  # 0.1 ms: consuming half a window per ms is the reader's pace
        sid = link.a.open_stream()
        for _ in range(100):
            link.a.send(sid, b"f" * 65536)
            link.pump()
            link.read_all(link.b, sid)
            link.now += 0.001
        assert link.b.window(sid) == INITIAL_WINDOW


def test_window_does_not_grow_for_a_stopped_reader() -> None:
    link = Link()
    link.b.rtt_sample(1.0)
    sid = link.a.open_stream()
    link.a.send(sid, b"s" * (8 * INITIAL_WINDOW))
    link.pump()
    assert link.b.window(sid) == INITIAL_WINDOW
    assert link.b.buffered(sid) == INITIAL_WINDOW
    assert link.a.pending(sid) == 7 * INITIAL_WINDOW


def test_window_does_not_grow_for_a_reader_that_lags() -> None:
    link = Link()
    link.b.rtt_sample(1.0)  # any pace counts as fast: only the lag can stop growth
    sid = link.a.open_stream()
    link.a.send(sid, b"s" * (64 * INITIAL_WINDOW))
    for _ in range(200):
        link.pump()
        events = link.take(link.b)
        got = sum(len(e.data) for e in events if isinstance(e, DataReceived))
        assert got <= INITIAL_WINDOW
        link.b.consumed(sid, 4096 * 3, link.now)  # a little at a time: the buffer never empties
        link.now += 0.001
    assert link.b.buffered(sid) > 0
    assert link.b.window(sid) == INITIAL_WINDOW


def test_window_budget_caps_total_growth() -> None:
    link = Link(window_budget=INITIAL_WINDOW)
    link.b.rtt_sample(1.0)
    one, two = link.a.open_stream(), link.a.open_stream()
    for _ in range(50):
        for sid in (one, two):
            link.a.send(sid, b"f" * 65536)
        link.pump()
        link.read_all(link.b, one)
        link.read_all(link.b, two)
    assert link.b.window(one) + link.b.window(two) == 3 * INITIAL_WINDOW


def test_reset_drops_queued_data_and_tells_the_peer() -> None:
    link = Link()
    sid = link.a.open_stream()
    link.a.send(sid, b"q" * (INITIAL_WINDOW * 2))
    link.pump()
    link.a.reset_stream(sid)
    assert link.a.pending(sid) == 0
    link.pump()
    assert StreamResetReceived(sid) in link.take(link.b)
    assert sid not in link.b


def test_ping_is_answered_and_pong_reported() -> None:
    link = Link()
    link.a.ping(99)
    link.pump()
    assert link.take(link.a) == [PongReceived(99)]


def test_go_away_refuses_new_streams_both_ways() -> None:
    link = Link()
    link.b.go_away()
    link.pump()
    assert link.take(link.a) == [GoAwayReceived(0)]
    with pytest.raises(SessionClosed, match="go-away"):
        link.a.open_stream()
    with pytest.raises(SessionClosed, match="go-away"):
        link.b.open_stream()


def test_stream_opened_after_go_away_is_refused_with_rst() -> None:
    link = Link()
    link.b.go_away()  # not yet delivered: the client opens a stream meanwhile
    sid = link.a.open_stream()
    link.pump()
    assert StreamResetReceived(sid) in link.take(link.a)
    assert sid not in link.b


def feed_raw(session: Session, *frames: bytes) -> None:
    session.receive_data(b"".join(frames))


def test_data_beyond_the_window_is_a_protocol_error() -> None:
    b = Session(client=False)
    feed_raw(b, encode_header(1, Flag.SYN, 1, 0))
    feed_raw(b, encode_header(0, 0, 1, INITIAL_WINDOW), bytes(INITIAL_WINDOW))
    with pytest.raises(ProtocolError, match="received 1 bytes with only 0 bytes of window left"):
        feed_raw(b, encode_header(0, 0, 1, 1), b"!")
    assert b.wants_write  # a go-away with the protocol-error code is queued
    frames = FrameDecoder().feed(b"".join(b.data_to_send()))
    assert (frames[-1].type, frames[-1].length) == (FrameType.GO_AWAY, 1)


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        ([encode_header(0, 0, 1, 1) + b"x"], "DATA frame for stream 1, which was never opened"),
        ([encode_header(1, 0, 4, 10)], "stream 4, which was never opened"),
        ([encode_header(1, Flag.SYN, 2, 0)], "reserved for this side"),
        ([encode_header(1, Flag.SYN, 3, 0), encode_header(1, Flag.SYN, 1, 0)], "opened stream 1 again"),
        ([encode_header(1, Flag.SYN | Flag.ACK, 1, 0)], "both SYN and ACK"),
        (
            [encode_header(1, Flag.SYN, 1, 0), encode_header(1, Flag.ACK, 1, 0)],
            "ACK on stream 1, which the peer",
        ),
        (
            [
                encode_header(1, Flag.SYN, 1, 0),
                encode_header(0, Flag.FIN, 1, 0),
                encode_header(0, 0, 1, 1) + b"x",
            ],
            "DATA on stream 1 after the peer's FIN",
        ),
        (
            [
                encode_header(1, Flag.SYN, 1, 0),
                encode_header(0, Flag.FIN, 1, 0),
                encode_header(1, Flag.FIN, 1, 0),
            ],
            "second FIN on stream 1",
        ),
        ([encode_header(1, Flag.SYN, 1, 0), encode_header(1, 0, 1, 2**32 - 1)], "beyond 2\\*\\*32-1"),
    ],
)
def test_frames_in_the_wrong_state_are_protocol_errors(frames: list[bytes], message: str) -> None:
    b = Session(client=False)
    with pytest.raises(ProtocolError, match=message):
        feed_raw(b, *frames)
    with pytest.raises(ProtocolError):  # the session stays failed
        b.receive_data(b"")


def test_late_frames_for_a_closed_stream_are_ignored() -> None:
    link = Link()
    sid = link.a.open_stream()
    link.pump()
    link.b.reset_stream(sid)
    link.pump()
    feed_raw(link.b, encode_header(0, 0, sid, 3) + b"old", encode_header(1, 0, sid, 100))
    assert link.b.events_received() == []


session_frames = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.sampled_from([0, 1, 2, 4, 8, 5, 3]),
        st.sampled_from([0, 1, 2, 3, 4, 5, 6]),
        st.integers(0, 300_000),
    ),
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(session_frames, st.booleans())
def test_fuzz_session_yields_events_or_protocol_error(
    frames: list[tuple[int, int, int, int]], client: bool
) -> None:
    session = Session(client=client)
    try:
        for type_, flags, sid, length in frames:
            payload = bytes(min(length, 1000)) if type_ == 0 else b""
            size = len(payload) if type_ == 0 else length
            session.receive_data(encode_header(type_, flags, sid, size) + payload)
            session.events_received()
            session.data_to_send()
    except ProtocolError as exc:
        assert str(exc)


def test_data_in_flight_is_limited_until_the_peer_confirms_it() -> None:
    link = Link(min_flight=256 * 1024, max_frame=16 * 1024)
    one, two = link.a.open_stream(), link.a.open_stream()
    link.a.send(one, b"1" * 1_000_000)
    link.a.send(two, b"2" * 1_000_000)
    batches = [b"".join(link.a.data_to_send(1 << 30)) for _ in range(5)]
    frames = [FrameDecoder().feed(b) for b in batches[:4]]
    assert [sum(len(f.payload) for f in batch) for batch in frames] == [64 * 1024] * 4
    assert frames[0][-1].type == FrameType.PING  # each batch ends with its flight ping
    assert batches[4] == b""  # a quarter of the limit per batch, four batches: the limit is reached
    assert not link.a.wants_write
    link.b.receive_data(b"".join(batches[:2]))
    link.a.receive_data(b"".join(link.b.data_to_send()))  # ACKs, then the answers to two flight pings
    assert link.a.flight.in_flight == sum(len(b) - 12 for b in batches[2:4])
    assert link.a.wants_write  # room for another batch
    assert PongReceived not in {type(e) for e in link.a.events_received()}  # internal, not an event


def test_flight_limit_follows_rate_times_rtt() -> None:
    flight = FlightControl(floor=256 * 1024)
    now, rtt, link_rate = 0.0, 0.050, 40e6  # a 50 ms, 40 MB/s link
    limits = []
    for opaque in range(1, 20):
        sent = min(flight.room() or 0, int(link_rate * rtt))
        flight.on_sent(sent, opaque, now)
        now += rtt
        flight.on_pong(opaque, now)
        limits.append(flight.limit)
    assert limits[0] == 2 * 256 * 1024  # one round trip of the floor, times the gain
    assert limits[1] == 2 * limits[0]  # doubles per round trip while the link has room
    assert limits[-1] == int(2 * link_rate * rtt)  # settles at twice the bandwidth-delay product


def test_flight_limit_stays_at_the_floor_on_a_fast_short_link() -> None:
    flight = FlightControl(floor=256 * 1024)
    flight.rtt_sample(0.0001)
    flight.on_sent(256 * 1024, 1, 0.0)
    flight.on_pong(1, 0.0003)  # 0.3 ms under load, for a 0.1 ms path
    assert flight.limit == 256 * 1024


def test_ping_opaque_values_with_the_top_bit_are_reserved() -> None:
    with pytest.raises(ValueError, match="2\\*\\*31"):
        Session(client=True).ping(2**31)


def test_unexpected_flight_answers_are_ignored() -> None:
    flight = FlightControl(floor=1000)
    flight.on_sent(600, 0x80000001, None)
    flight.on_sent(600, 0x80000002, None)
    flight.on_pong(0x80000007, None)  # never sent: must not lose track of the real ones
    assert flight.in_flight == 1200 and flight.room() == 0
    flight.on_pong(0x80000002, None)  # answers the later ping: everything before it arrived too
    assert flight.in_flight == 0 and flight.room() == 1000
