"""Parts of the dockerhost backend that need no engine: the log framing, output lines, the busybox check."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cornus_core.events import Event, Log
from server.backends.base import Deployment
from server.backends.docker import LogDemuxer, LogError
from server.backends.docker.backend import AppOutput, statically_linked
from server.backends.docker.engine import engine_host


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_frames_come_out_whole_however_the_bytes_are_cut() -> None:
    data = frame(1, b"hello\n") + frame(2, b"oops\n") + frame(1, b"")
    for cut in range(len(data) + 1):
        demux = LogDemuxer()
        assert demux.feed(data[:cut]) + demux.feed(data[cut:]) == [
            ("stdout", b"hello\n"), ("stderr", b"oops\n"), ("stdout", b"")]


def test_a_bad_header_names_where_it_is() -> None:
    demux = LogDemuxer()
    demux.feed(frame(1, b"ok"))
    with pytest.raises(LogError, match=r"at byte 10: bad header 0700000000000001"):
        demux.feed(bytes([7, 0, 0, 0, 0, 0, 0, 1]))
    with pytest.raises(LogError, match="over"):
        LogDemuxer().feed(bytes([1, 0, 0, 0, 0x7F, 0, 0, 0]))


@given(st.binary(max_size=200), st.integers(min_value=0, max_value=200))
def test_any_bytes_give_frames_or_a_log_error(data: bytes, cut: int) -> None:
    demux = LogDemuxer()
    try:
        frames = demux.feed(data[:cut]) + demux.feed(data[cut:])
    except LogError:
        return
    assert all(stream in ("stdin", "stdout", "stderr") for stream, _ in frames)


def test_the_engine_is_docker_host_or_the_default_socket() -> None:
    assert engine_host({}) == "unix:///var/run/docker.sock"
    assert engine_host({"DOCKER_HOST": "unix:///tmp/d.sock"}) == "unix:///tmp/d.sock"


def test_app_output_makes_whole_lines_per_stream_and_counts_bytes() -> None:
    events: list[Event] = []
    dep = Deployment(id="d", spec=None, server_url="", caretaker_token="", caretaker_config={}, emit=events.append)
    output = AppOutput(dep)
    output.feed("stdout", b"one\ntw")
    output.feed("stderr", b"err")
    output.feed("stdout", b"o\nthree")
    output.flush()
    assert [(e.stream, e.line) for e in events if isinstance(e, Log)] == [
        ("stdout", "one"), ("stdout", "two"), ("stderr", "err"), ("stdout", "three")]
    assert output.seen == {"stdout": 13, "stderr": 3}


def test_only_a_statically_linked_busybox_will_do(tmp_path: Path) -> None:
    assert statically_linked(shutil.which("busybox") or "/bin/busybox")
    assert not statically_linked(sys.executable)  # a dynamically linked program needs the libraries of this machine
    (tmp_path / "not-elf").write_bytes(b"#!/bin/sh\n")
    assert not statically_linked(str(tmp_path / "not-elf"))
