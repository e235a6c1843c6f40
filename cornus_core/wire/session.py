"""The yamux session as a sans-IO state machine: bytes in, events out; calls in, bytes out.

No sockets, no asyncio and no clock of its own: the I/O layer feeds :meth:`Session.receive_data`,
reads :meth:`Session.events_received`, writes whatever :meth:`Session.data_to_send` returns, and passes
the time and round-trip samples in where flow control needs them.

Flow control is per stream (yamux has no session window). Each stream starts with the 256 KiB window
both sides assume. The receive window doubles (up to ``max_window``) at a window update when the
window, not the reader, limits the stream: the reader emptied its buffer since the previous update, and
half a window was consumed within two round trips (the smallest RTT the pings measured, so queueing
delay does not count). That finds the bandwidth-delay product of a WAN link, and keeps windows small
where a bigger one would only queue data in socket buffers ahead of other streams' traffic. A reader
that falls behind never triggers growth; a stopped reader holds at most its current window. Total growth
across streams is capped by ``window_budget``.

The data in flight for the whole session is limited too (see :mod:`.flight`), so that the queue in
the path stays short whatever the number of busy streams.

Scheduling: control frames (SYN/ACK, window updates, pings, RST, go-away) always go first; data is
served in chunks of at most ``max_frame`` bytes, round robin, with a "new" lane in front of the bulk
lane (as in FQ-CoDel): a stream that becomes ready after being idle sends its first chunk before the
streams that keep the link busy, so small request/response streams stay fast under bulk load.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .errors import ProtocolError, SessionClosed, WireError, WriteAfterClose
from .events import (
    DataReceived,
    Event,
    GoAwayReceived,
    PongReceived,
    StreamClosed,
    StreamEnded,
    StreamOpened,
    StreamResetReceived,
)
from .flight import FlightControl
from .frames import MAX_U32, Flag, FrameDecoder, FrameType, GoAwayCode, Payload, encode_header

INITIAL_WINDOW = 256 * 1024
MAX_WINDOW = 16 * 1024 * 1024

_DATA = int(FrameType.DATA)
_WINDOW_UPDATE = int(FrameType.WINDOW_UPDATE)
_PING = int(FrameType.PING)
_GO_AWAY = int(FrameType.GO_AWAY)
_SYN = int(Flag.SYN)
_ACK = int(Flag.ACK)
_FIN = int(Flag.FIN)
_RST = int(Flag.RST)
_FLIGHT = 0x80000000  # ping opaque values with this bit set clock the data in flight


@dataclass(frozen=True, slots=True)
class SessionConfig:
    max_window: int = MAX_WINDOW  # largest receive window a stream may grow to
    window_budget: int = 128 * 1024 * 1024  # total window growth beyond INITIAL_WINDOW, all streams
    max_frame: int = 64 * 1024  # largest DATA payload sent in one scheduling turn
    min_flight: int | None = 1024 * 1024  # data in flight before rate x RTT allows more; None: no limit
    flight_gain: float = 2.0

    def __post_init__(self) -> None:
        if self.max_window < INITIAL_WINDOW or self.max_window > MAX_U32:
            raise ValueError(f"max_window must be in [{INITIAL_WINDOW}, {MAX_U32}], got {self.max_window}")
        if self.max_frame < 1:
            raise ValueError(f"max_frame must be positive, got {self.max_frame}")


class _Stream:
    __slots__ = (
        "buffered",
        "closed",
        "drained",
        "fin_queued",
        "fin_received",
        "fin_sent",
        "id",
        "last_update",
        "local",
        "pending",
        "pending_bytes",
        "queued",
        "recv_window",
        "send_window",
        "target",
        "unacked",
    )

    def __init__(self, stream_id: int, local: bool) -> None:
        self.id = stream_id
        self.local = local  # opened by this side
        self.closed = False
        # receive side
        self.target = INITIAL_WINDOW  # current receive window size
        self.recv_window = INITIAL_WINDOW  # credit the peer still holds, by our ledger
        self.buffered = 0  # delivered, not yet consumed by the application
        self.unacked = 0  # consumed, not yet credited back
        self.drained = False  # the reader emptied its buffer since the last window update
        self.last_update: float | None = None  # when the last window update was queued
        self.fin_received = False
        # send side
        self.send_window = INITIAL_WINDOW
        self.pending: deque[memoryview] = deque()
        self.pending_bytes = 0
        self.queued = False  # in one of the scheduler lanes
        self.fin_queued = False
        self.fin_sent = False


def _readonly_view(data: Payload | bytearray) -> memoryview:
    """A view the caller cannot mutate behind our back (copies only mutable buffers)."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    if not view.readonly:
        view = memoryview(bytes(view))
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


class Session:
    """One yamux session. ``client=True`` on the dialing side (odd stream ids), else even ids."""

    def __init__(self, *, client: bool, config: SessionConfig | None = None) -> None:
        self.client = client
        self.config = config or SessionConfig()
        self._parity = 1 if client else 0
        self._next_id = 1 if client else 2
        self._last_peer_id = 0
        self._streams: dict[int, _Stream] = {}
        self._events: list[Event] = []
        self._control = bytearray()
        self._acks: list[int] = []
        self._new: deque[_Stream] = deque()
        self._old: deque[_Stream] = deque()
        self._decoder = FrameDecoder(self.config.max_window)
        self._grown = 0
        self.flight = FlightControl(self.config.min_flight, self.config.flight_gain)
        self._flight_seq = 0
        self._failed: ProtocolError | None = None
        self.go_away_sent = False
        self.go_away_received: int | None = None

    # ------------------------------------------------------------------ inbound

    def receive_data(self, data: bytes | bytearray | memoryview, now: float | None = None) -> None:
        """Process bytes from the peer that arrived at ``now`` (monotonic seconds; it times the
        pings that clock the data in flight). Raises :class:`ProtocolError` (and queues a go-away)."""
        if self._failed is not None:
            raise self._failed
        try:
            for frame in self._decoder.feed(data):
                type_ = frame.type
                if type_ <= _WINDOW_UPDATE:
                    self._on_stream_frame(type_, frame.flags, frame.stream_id, frame.length, frame.payload)
                elif type_ == _PING:
                    if frame.flags & _SYN:
                        self._control += encode_header(_PING, _ACK, 0, frame.length)
                    elif frame.length & _FLIGHT:
                        self.flight.on_pong(frame.length, now)
                    else:
                        self._events.append(PongReceived(frame.length))
                else:
                    self.go_away_received = frame.length
                    self._events.append(GoAwayReceived(frame.length))
        except ProtocolError as exc:
            self._failed = exc
            self.go_away(GoAwayCode.PROTOCOL_ERROR)
            raise

    def _on_stream_frame(self, type_: int, flags: int, sid: int, length: int, payload: Payload) -> None:
        st = self._streams.get(sid)
        kind = "DATA" if type_ == _DATA else "WINDOW_UPDATE"
        if flags & _SYN:
            if (sid & 1) == self._parity:
                raise ProtocolError(f"peer opened stream {sid}, an id reserved for this side")
            if sid <= self._last_peer_id:
                raise ProtocolError(
                    f"peer opened stream {sid} again (highest id it used is {self._last_peer_id})"
                )
            if flags & _ACK:
                raise ProtocolError(f"{kind} frame on stream {sid} carries both SYN and ACK")
            self._last_peer_id = sid
            if self.go_away_sent:  # no new streams after our go-away: refuse it
                self._control += encode_header(_WINDOW_UPDATE, _RST, sid, 0)
                return
            st = _Stream(sid, local=False)
            self._streams[sid] = st
            self._acks.append(sid)
            self._events.append(StreamOpened(sid))
        elif st is None:
            ours = (sid & 1) == self._parity
            if sid >= self._next_id if ours else sid > self._last_peer_id:
                raise ProtocolError(f"{kind} frame for stream {sid}, which was never opened")
            return  # late frame for a stream already closed or reset: ignore it
        elif flags & _ACK and not st.local:
            raise ProtocolError(f"{kind} frame with ACK on stream {sid}, which the peer opened itself")

        if type_ == _DATA:
            if length:
                if st.fin_received:
                    raise ProtocolError(f"DATA on stream {sid} after the peer's FIN")
                if length > st.recv_window:
                    raise ProtocolError(
                        f"stream {sid} received {length} bytes with only {st.recv_window} bytes of window left"
                    )
                st.recv_window -= length
                st.buffered += length
                self._events.append(DataReceived(sid, payload))
        elif length:
            st.send_window += length
            if st.send_window > MAX_U32:
                raise ProtocolError(f"window update on stream {sid} grows its send window beyond 2**32-1")
            if st.pending_bytes and not st.queued:
                st.queued = True
                self._old.append(st)
        if flags & _FIN:
            if st.fin_received:
                raise ProtocolError(f"second FIN on stream {sid}")
            st.fin_received = True
            self._events.append(StreamEnded(sid))
            if st.fin_sent:
                self._forget(st)
        if flags & _RST:
            self._events.append(StreamResetReceived(sid))
            self._forget(st)

    def events_received(self) -> list[Event]:
        """Events produced since the last call, oldest first."""
        events = self._events
        self._events = []
        return events

    # ------------------------------------------------------------------ local actions

    def open_stream(self) -> int:
        """Allocate a stream id and queue its SYN; data may be sent right away."""
        if self._failed is not None:
            raise SessionClosed(f"session failed: {self._failed}")
        if self.go_away_received is not None:
            raise SessionClosed(
                f"peer sent go-away (code {self.go_away_received}); it accepts no new streams"
            )
        if self.go_away_sent:
            raise SessionClosed("this side sent go-away; no new streams")
        sid = self._next_id
        if sid > MAX_U32:
            raise SessionClosed("stream ids exhausted")
        self._next_id += 2
        self._streams[sid] = _Stream(sid, local=True)
        self._control += encode_header(_WINDOW_UPDATE, _SYN, sid, 0)
        return sid

    def send(self, sid: int, data: Payload | bytearray) -> None:
        """Queue data on a stream; it leaves as the send window allows."""
        st = self._live(sid)
        if st.fin_queued:
            raise WriteAfterClose(f"stream {sid}: write after close")
        view = _readonly_view(data)
        n = len(view)
        if not n:
            return
        st.pending.append(view)
        st.pending_bytes += n
        if not st.queued and st.send_window > 0:
            st.queued = True
            self._new.append(st)

    def end_stream(self, sid: int) -> None:
        """Half-close: FIN follows the data already queued."""
        st = self._streams.get(sid)
        if st is None or st.fin_queued:
            return
        st.fin_queued = True
        if not st.pending_bytes:
            self._control += encode_header(_DATA, _FIN, sid, 0)
            self._fin_sent(st)

    def reset_stream(self, sid: int) -> None:
        """Abort a stream (RST): queued data is dropped."""
        st = self._streams.get(sid)
        if st is None:
            return
        self._control += encode_header(_WINDOW_UPDATE, _RST, sid, 0)
        self._forget(st)

    def consumed(self, sid: int, n: int, now: float) -> None:
        """The application read ``n`` bytes of the stream at time ``now`` (seconds, monotonic): return
        credit, and grow the window if it is what limits the stream."""
        st = self._streams.get(sid)
        if st is None:
            return
        st.buffered -= n
        if not st.buffered:
            st.drained = True
        if st.fin_received:
            return
        st.unacked += n
        if st.unacked < st.target >> 1:
            return
        delta = st.unacked
        if (
            st.drained
            and st.last_update is not None
            and self.flight.min_rtt is not None
            and now - st.last_update < 2 * self.flight.min_rtt
        ):
            grow = min(st.target, self.config.max_window - st.target, self.config.window_budget - self._grown)
            if grow > 0:
                st.target += grow
                self._grown += grow
                delta += grow
        st.drained = False
        st.last_update = now
        st.unacked = 0
        st.recv_window += delta
        self._control += encode_header(_WINDOW_UPDATE, 0, sid, delta)

    def rtt_sample(self, rtt: float) -> None:
        """A measured round-trip time (seconds); the smallest one guides window growth."""
        self.flight.rtt_sample(rtt)

    @property
    def min_rtt(self) -> float | None:
        return self.flight.min_rtt

    def ping(self, opaque: int) -> None:
        """Queue a ping; ``opaque`` must be below 2**31 (higher values clock the data in flight)."""
        if not 0 <= opaque < _FLIGHT:
            raise ValueError(f"ping opaque value must be in [0, 2**31), got {opaque}")
        self._control += encode_header(_PING, _SYN, 0, opaque)

    def go_away(self, code: int = GoAwayCode.NORMAL) -> None:
        """Tell the peer this side accepts no new streams (existing streams continue)."""
        if not self.go_away_sent:
            self.go_away_sent = True
            self._control += encode_header(_GO_AWAY, 0, 0, code)

    # ------------------------------------------------------------------ outbound

    @property
    def wants_write(self) -> bool:
        return bool(self._control or self._acks or ((self._new or self._old) and self._flight_room() != 0))

    def _flight_room(self) -> int | None:
        """Data this batch may carry under the flight limit (None: no limit). A batch carries at most a
        quarter of the limit, so several pings are in flight and the pipe stays busy while they return;
        and waits for a full frame of room, so that acknowledgements do not cut the data into tiny
        batches."""
        room = self.flight.room()
        if room is None or self.flight.limit is None:
            return None
        share = self.flight.limit // 4
        room = min(room, share)
        return room if room >= min(share, self.config.max_frame) else 0

    def data_to_send(self, limit: int = 256 * 1024, now: float | None = None) -> list[Payload]:
        """Pieces of the next batch (about ``limit`` bytes) sent at ``now``: control frames first, then
        data chunks as far as the windows and the session's flight limit allow."""
        out: list[Payload] = []
        size = 0
        if self._acks:  # sent lazily so that a stream refused meanwhile gets only its RST
            acks = b"".join(
                encode_header(_WINDOW_UPDATE, _ACK, sid, 0) for sid in self._acks if sid in self._streams
            )
            self._acks.clear()
            if acks:
                out.append(acks)
                size = len(acks)
        if self._control:
            out.append(bytes(self._control))
            size += len(self._control)
            self._control.clear()
        new, old = self._new, self._old
        max_frame = self.config.max_frame
        room = self._flight_room()
        if room is not None:
            limit = min(limit, size + room)
        before_data = size
        while size < limit:
            if new:
                st = new.popleft()
            elif old:
                st = old.popleft()
            else:
                break
            st.queued = False
            n = min(st.pending_bytes, st.send_window, max_frame)
            if st.closed or n <= 0:
                continue
            st.pending_bytes -= n
            st.send_window -= n
            flags = _FIN if st.fin_queued and not st.pending_bytes else 0
            out.append(encode_header(_DATA, flags, st.id, n))
            self._take(st.pending, n, out)
            size += 12 + n
            if flags:
                self._fin_sent(st)
            elif st.pending_bytes and st.send_window > 0:
                st.queued = True
                old.append(st)
        if size > before_data:  # the answer to this ping says the peer took in all the data before it
            self._flight_seq = (self._flight_seq + 1) & (_FLIGHT - 1)
            opaque = _FLIGHT | self._flight_seq
            self.flight.on_sent(size - before_data, opaque, now)
            out.append(encode_header(_PING, _SYN, 0, opaque))
        return out

    @staticmethod
    def _take(pending: deque[memoryview], n: int, out: list[Payload]) -> None:
        while n:
            first = pending[0]
            size = len(first)
            if size <= n:
                out.append(pending.popleft())
                n -= size
            else:
                out.append(first[:n])
                pending[0] = first[n:]
                return

    # ------------------------------------------------------------------ introspection

    def pending(self, sid: int) -> int:
        """Bytes queued on the stream and not yet handed to :meth:`data_to_send`."""
        st = self._streams.get(sid)
        return st.pending_bytes if st is not None else 0

    def window(self, sid: int) -> int:
        """The stream's current receive window size (grows with auto-tuning)."""
        st = self._streams.get(sid)
        return st.target if st is not None else 0

    def send_window(self, sid: int) -> int:
        st = self._streams.get(sid)
        return st.send_window if st is not None else 0

    def buffered(self, sid: int) -> int:
        """Bytes delivered to the application and not yet consumed."""
        st = self._streams.get(sid)
        return st.buffered if st is not None else 0

    def __contains__(self, sid: object) -> bool:
        return sid in self._streams

    @property
    def stream_count(self) -> int:
        return len(self._streams)

    # ------------------------------------------------------------------ internals

    def _live(self, sid: int) -> _Stream:
        st = self._streams.get(sid)
        if st is None:
            raise WireError(f"stream {sid} is not open")
        return st

    def _fin_sent(self, st: _Stream) -> None:
        st.fin_sent = True
        if st.fin_received:
            self._forget(st)

    def _forget(self, st: _Stream) -> None:
        if self._streams.pop(st.id, None) is None:
            return
        st.closed = True
        st.pending.clear()
        st.pending_bytes = 0
        self._grown -= st.target - INITIAL_WINDOW
        self._events.append(StreamClosed(st.id))
