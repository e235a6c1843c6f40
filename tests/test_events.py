from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cornus_core.events import ConnEnd, EventError, HopDecision, Log, decode_event


def test_round_trip() -> None:
    for ev in (
        Log(source="app", line="hello"),
        HopDecision(conn="c1", hop="server", route="client", reason="rule 0 '*.corp'", version="abc", port=443),
        ConnEnd(conn="c1", hop="client", outcome="ok", bytes_up=3, bytes_down=4, duration_ms=1.5),
    ):
        assert decode_event(ev.encode()) == ev


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (b"nope", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"type":"martian"}', "unknown event type"),
        (b'{"type":"hop","conn":"c"}', "route"),
        (b'{"type":"conn_end","conn":"c","hop":"x","outcome":"ok","bytes_up":"many"}', "bytes_up"),
    ],
)
def test_bad_lines_name_the_problem(line: bytes, needle: str) -> None:
    with pytest.raises(EventError, match=needle):
        decode_event(line)


@given(st.binary(max_size=200))
def test_fuzz_only_event_error(data: bytes) -> None:
    try:
        decode_event(data)
    except EventError:
        pass
