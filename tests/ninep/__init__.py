"""9P2000.L tests."""
