"""YAML that remembers where each value was written.

PyYAML's safe loader builds plain Python objects and forgets the source positions. Pydantic later
reports errors at paths such as ``egress.rules[2].route``; to turn those back into ``file:line:column``
we compose the node tree ourselves, construct it with the safe constructor, and keep a map from
each path to the mark of its node. Duplicate keys (which PyYAML silently collapses) and alias
bombs are rejected here, since both hide what the author meant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import SpecError

PathElem = str | int
Path = tuple[PathElem, ...]

# A document may expand (through aliases) to at most this many nodes: real specs and Compose files
# stay far below; "billion laughs" documents go far above.
MAX_EXPANDED_NODES = 100_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Mark:
    """A 1-based position in a named text."""

    name: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.name}:{self.line}:{self.column}"


@dataclass
class YamlDocument:
    """Loaded YAML data plus the position of every value and mapping key, by path."""

    name: str
    data: object
    values: dict[Path, Mark] = field(default_factory=dict)
    keys: dict[Path, Mark] = field(default_factory=dict)
    literal_blocks: dict[Path, tuple[int, int]] = field(default_factory=dict)
    """For each ``|`` block scalar: the file line of its first content line, and its indentation."""

    def where(self, path: Sequence[PathElem], *, key: bool = False) -> str:
        """``file:line:column`` of ``path``, or of its closest ancestor that was written in the file.

        With ``key=True`` a mapping entry is located at its key (for "unknown key" errors).
        """
        path = tuple(path)
        if key and path in self.keys:
            return str(self.keys[path])
        for end in range(len(path), -1, -1):
            mark = self.values.get(path[:end])
            if mark is not None:
                return str(mark)
        return self.name


def load_yaml(text: str, name: str) -> YamlDocument:
    """Parse one YAML document with the safe loader; errors become ``SpecError`` at ``name:line:col``.

    An empty document loads as ``None``.
    """
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        raise _from_reader(exc, text, name) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(name, None)
        _check_duplicates_and_size(node, name)
        data = loader.construct_document(node)
        doc = YamlDocument(name, data)
        _record_marks(node, (), doc, set(), text.splitlines())
        return doc
    except yaml.MarkedYAMLError as exc:
        raise _from_marked(exc, name) from None
    except yaml.YAMLError as exc:
        # ReaderError (bad characters) and friends carry no mark but do say where in their text.
        raise SpecError(name, f"not valid YAML: {exc}") from None
    except RecursionError:
        raise SpecError(name, "not valid YAML here: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # The safe constructor raises these for values that match a YAML type but do not convert,
        # such as the timestamp 2024-13-45.
        raise SpecError(name, f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _from_reader(exc: yaml.reader.ReaderError, text: str, name: str) -> SpecError:
    line = text.count("\n", 0, exc.position) + 1
    column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
    return SpecError(
        f"{name}:{line}:{column}", f"not valid YAML: character {exc.character:#06x} is not allowed"
    )


def _from_marked(exc: yaml.MarkedYAMLError, name: str) -> SpecError:
    mark = exc.problem_mark or exc.context_mark
    where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
    parts = [p for p in (exc.context, exc.problem) if p]
    return SpecError(where, "not valid YAML: " + (", ".join(parts) or "cannot parse"))


def _mark(name: str, node: Node) -> Mark:
    return Mark(name, node.start_mark.line + 1, node.start_mark.column + 1)


def _check_duplicates_and_size(root: Node, name: str) -> None:
    """Reject duplicate mapping keys, recursive aliases and documents that expand too far."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def expanded(node: Node) -> int:
        ident = id(node)
        if ident in sizes:
            return sizes[ident]
        if ident in active:
            raise SpecError(str(_mark(name, node)), "recursive YAML aliases are not supported")
        active.add(ident)
        total = 1
        if isinstance(node, MappingNode):
            seen: dict[tuple[str, str], Node] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, ScalarNode) and key_node.tag != _MERGE_TAG:
                    ident_key = (key_node.tag, key_node.value)
                    if ident_key in seen:
                        first = _mark(name, seen[ident_key])
                        raise SpecError(
                            str(_mark(name, key_node)),
                            f"duplicate key {key_node.value!r} (first set at line {first.line})",
                        )
                    seen[ident_key] = key_node
                total += expanded(key_node) + expanded(value_node)
        elif isinstance(node, SequenceNode):
            total += sum(expanded(item) for item in node.value)
        active.discard(ident)
        sizes[ident] = total
        if total > MAX_EXPANDED_NODES:
            raise SpecError(
                str(_mark(name, node)), f"document expands to more than {MAX_EXPANDED_NODES} values"
            )
        return total

    expanded(root)


def _record_marks(node: Node, path: Path, doc: YamlDocument, walked: set[int], lines: list[str]) -> None:
    """Map every path to its node's position. An aliased node is walked once (at its first path)."""
    doc.values[path] = _mark(doc.name, node)
    if id(node) in walked:
        return
    walked.add(id(node))
    if isinstance(node, ScalarNode) and node.style == "|":
        # A literal block keeps its lines, so line N of the value is file line (indicator line + N).
        first = node.start_mark.line + 1
        body = [line for line in lines[first : node.end_mark.line + 1] if line.strip()]
        indent = len(body[0]) - len(body[0].lstrip(" ")) if body else 0
        doc.literal_blocks[path] = (first + 1, indent)
    elif isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                continue
            child = (*path, key_node.value)
            # After merge-key flattening, merged entries come first and the mapping's own win.
            doc.keys[child] = _mark(doc.name, key_node)
            _record_marks(value_node, child, doc, walked, lines)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _record_marks(item, (*path, index), doc, walked, lines)
