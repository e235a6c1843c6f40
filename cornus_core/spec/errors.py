"""The one error type of the spec package: every problem says where it comes from."""

from __future__ import annotations

import shlex
from collections.abc import Sequence


class SpecError(Exception):
    """A spec, Compose file or command-line flag is wrong.

    ``source`` names where: ``file:line:column``, a flag and its value (``--egress-route '*.x=foo'``),
    or a rule (``egress.rules[2] '*.x:0'``). ``message`` says what. When one input has several
    problems, ``problems`` holds every ``(source, message)`` pair, the first one repeated in
    ``source``/``message``.
    """

    def __init__(self, source: str, message: str, *, more: Sequence[tuple[str, str]] = ()) -> None:
        self.source = source
        self.message = message
        self.problems: tuple[tuple[str, str], ...] = ((source, message), *more)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(f"{source}: {message}" if source else message for source, message in self.problems)


def flag_source(flag: str, value: str) -> str:
    """How an error names a command-line flag: ``--egress-route '*.corp=nowhere'``."""
    return f"{flag} {shlex.quote(value)}"


class PolicyCompileError(SpecError):
    """The spec is well formed but its egress policy does not compile (a PAC script's syntax, say)."""
