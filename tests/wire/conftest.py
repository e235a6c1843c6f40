"""Fixtures for the wire tests."""

from __future__ import annotations

import pytest

from .pairs import socket_mux_pair, websocket_mux_pair


@pytest.fixture(params=["socketpair", "websocket"])
def mux_pair(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A context-manager factory for a (client, server) mux pair over each transport."""
    return socket_mux_pair if request.param == "socketpair" else websocket_mux_pair
