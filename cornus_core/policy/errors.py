"""The policy engine's two error types.

``PolicyError`` is a compile error of the policy as written (a rule, the default, the script); it is
what :func:`compile_policy` and :func:`parse_pattern` raise. ``PacError`` is a PAC script that does
not compile or an evaluation that failed; at evaluation time it always means ``deny``. When a script
does not compile, :func:`compile_policy` raises a ``PolicyError`` that carries the script's line and
column and chains the ``PacError`` as its ``__cause__``.
"""

from __future__ import annotations


class PolicyError(ValueError):
    """A policy that does not compile; the message names what was wrong and where.

    ``source`` says where: ``"rules[2]"``, ``"default"``, ``"script"`` (or ``"pattern"`` when a
    pattern is parsed on its own). ``rule_index``/``pattern`` name the rule, ``line``/``column``
    (1-based) the place in the PAC script.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str = "policy",
        rule_index: int | None = None,
        pattern: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.rule_index = rule_index
        self.pattern = pattern
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return f"{self.source}: {self.message}"


class PacError(Exception):
    """A PAC script that does not compile, or one evaluation that failed (which routes to ``deny``).

    ``kind`` is one word a program can branch on:

    * at compile time: ``syntax`` (with ``line`` and, when it can be told, ``column``), ``entry``
      (no ``FindProxyForURL`` function), ``load`` (the script's top level threw), ``structure``
      (the text is not one self-contained program), ``input`` (a NUL character);
    * per evaluation: ``timeout``, ``memory``, ``stack``, ``exception`` (the script threw),
      ``return`` (neither a string nor null/undefined), ``input`` (an argument the sandbox refuses),
      ``worker`` (the isolation process failed), ``internal``.

    ``alerts`` holds what the script passed to ``alert()`` before it failed.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        alerts: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.line = line
        self.column = column
        self.alerts = alerts

    def __str__(self) -> str:
        where = ""
        if self.line is not None:
            where = (
                f"line {self.line}" + (f", column {self.column}" if self.column is not None else "") + ": "
            )
        return f"{where}{self.message}"
