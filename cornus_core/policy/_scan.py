"""A quick lexical look at a PAC script: does it use regular expressions?

A backtracking regex cannot be interrupted inside this process (the engine's time limit is only
checked between bytecodes), and the host it runs on is chosen by the app. Scripts that use one are
evaluated in a worker process that can be killed at the deadline. This scan routes the ordinary
cases there from the start; it need not be exact, because the in-process sandbox also has a runtime
tripwire on every regex operation that moves the script to the worker (see ``_prelude``).
"""

from __future__ import annotations

# Names that build or run a regex: the constructor, and the string methods that turn a string
# argument into one (replace/split with a string argument do not).
_REGEX_NAMES = frozenset({"RegExp", "match", "matchAll", "search"})
# After these keywords a '/' starts a regex literal, not a division.
_KEYWORDS_BEFORE_EXPRESSION = frozenset(
    {
        "return",
        "typeof",
        "instanceof",
        "in",
        "of",
        "new",
        "delete",
        "void",
        "throw",
        "case",
        "do",
        "else",
        "yield",
        "await",
    }
)


def uses_regex(source: str) -> bool:
    """True when the script (outside comments and strings) names a regex API or has a regex literal."""
    i, n = 0, len(source)
    slash_divides = False  # after a value, '/' is division; after an operator or keyword, a regex
    while i < n:
        char = source[i]
        if char.isspace():
            i += 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif char in "'\"`":
            i = _skip_string(source, i)
            slash_divides = True
        elif char.isalpha() or char in "_$":
            start = i
            while i < n and (source[i].isalnum() or source[i] in "_$"):
                i += 1
            word = source[start:i]
            if word in _REGEX_NAMES:
                return True
            slash_divides = word not in _KEYWORDS_BEFORE_EXPRESSION
        elif char.isdigit() or (char == "." and i + 1 < n and source[i + 1].isdigit()):
            while i < n and (source[i].isalnum() or source[i] == "."):
                i += 1
            slash_divides = True
        elif char == "/":
            if not slash_divides:
                return True
            i += 1
            slash_divides = False
        else:
            i += 1
            slash_divides = char in ")]"
    return False


def _skip_string(source: str, start: int) -> int:
    quote, i, n = source[start], start + 1, len(source)
    while i < n:
        if source[i] == "\\":
            i += 2
        elif source[i] == quote:
            return i + 1
        elif source[i] == "\n" and quote != "`":
            return i  # an unterminated string: the compiler will say so
        else:
            i += 1
    return n
