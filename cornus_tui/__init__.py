"""cornus-tui: the caller's dashboard and command line."""
