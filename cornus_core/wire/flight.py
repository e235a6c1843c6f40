"""How much data a session may have in flight: sent, but not yet taken in by the peer (sans-IO).

Per-stream windows bound what the peer's *reader* has not consumed; they do not bound the queue in the
path (socket buffers, the peer's receive queue). With many busy streams that queue grows to the sum of
their windows, and a small request waits behind all of it. So the sender also limits the bytes in
flight for the whole session, clocked by pings: after each batch of data it sends a ping, and the
answer, which the peer gives once it has taken in everything before the ping, acknowledges that data.

The limit follows the path, like BBR's congestion window: ``gain x max delivery rate x min RTT`` (the
bandwidth-delay product, with room to find more), never below ``floor``. On loopback that stays near
the floor, so queued data waits in the mux where small streams can go first; on a long link it grows
within a few round trips to what the link carries. The smallest RTT seen in the session is used, so
queueing delay cannot inflate the limit.
"""

from __future__ import annotations

from collections import deque

RATE_WINDOW = 1.0  # seconds over which the highest delivery rate is remembered


class FlightControl:
    def __init__(self, floor: int | None, gain: float = 2.0) -> None:
        self.floor = floor  # None: no session-wide limit
        self.gain = gain
        self.limit = floor
        self.sent = 0  # data bytes sent, ever
        self.acked = 0  # of which the peer confirmed taking in
        self.min_rtt: float | None = None
        self._marks: deque[tuple[int, int, int, float | None]] = deque()  # opaque, sent, acked then, time
        self._rates: deque[tuple[float, float]] = deque()  # (time, rate), rates decreasing

    @property
    def in_flight(self) -> int:
        return self.sent - self.acked

    def room(self) -> int | None:
        """Bytes that may still be sent now; None when unlimited."""
        if self.limit is None:
            return None
        return max(0, self.limit - self.in_flight)

    def on_sent(self, n: int, opaque: int, now: float | None) -> None:
        """``n`` data bytes went out, followed by a ping carrying ``opaque``."""
        self.sent += n
        self._marks.append((opaque, self.sent, self.acked, now))

    def on_pong(self, opaque: int, now: float | None) -> None:
        """The peer answered the ping carrying ``opaque`` (answers come in order; others are ignored)."""
        marks = self._marks
        if not any(mark[0] == opaque for mark in marks):
            return
        while True:
            mark, sent, acked_then, sent_at = marks.popleft()
            if mark == opaque:
                break
        self.acked = sent
        if now is not None and sent_at is not None and now > sent_at:
            rtt = now - sent_at
            self.rtt_sample(rtt)
            self._rate_sample((sent - acked_then) / rtt, now)

    def rtt_sample(self, rtt: float) -> None:
        if rtt > 0 and (self.min_rtt is None or rtt < self.min_rtt):
            self.min_rtt = rtt

    def _rate_sample(self, rate: float, now: float) -> None:
        rates = self._rates
        while rates and rates[-1][1] <= rate:
            rates.pop()
        rates.append((now, rate))
        while rates[0][0] < now - RATE_WINDOW:
            rates.popleft()
        if self.floor is not None and self.min_rtt is not None:
            self.limit = max(self.floor, int(self.gain * rates[0][1] * self.min_rtt))
