"""JSON settings files edited in place, comments allowed where the host allows them.

Gemini CLI reads settings.json through strip-json-comments, so a person's file may hold `//` and
`/* */` comments. `loads` reads such text; `edit` rewrites it to hold a new value by changing only
the bytes that must change (a member added at the end of its object, an entry removed with its
line, a value replaced), so comments, spacing, key order and the rest of the text stay as they
were. Plain JSON is the same language without comments (`comments=False`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any


class JSONCError(ValueError):
    """Text that is not JSON (with comments, where allowed)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


@dataclass
class _Child:
    start: int  # where the member (its key) or the element starts
    node: "_Node"
    key: str | None = None
    comma: int | None = None  # the comma after it, if any

    @property
    def end(self) -> int:
        return self.node.end


@dataclass
class _Node:
    start: int
    end: int
    value: Any
    kind: str  # object, array, scalar
    children: list[_Child] = field(default_factory=list)


class _Parser:
    def __init__(self, text: str, comments: bool):
        self.s = text
        self.i = 0
        self.comments = comments

    def fail(self, what: str) -> JSONCError:
        line = self.s.count("\n", 0, self.i) + 1
        col = self.i - (self.s.rfind("\n", 0, self.i) + 1) + 1
        return JSONCError(f"{what}: line {line} column {col}")

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def skip(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif self.comments and s.startswith("//", self.i):
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j
            elif self.comments and s.startswith("/*", self.i):
                j = s.find("*/", self.i + 2)
                if j < 0:
                    raise self.fail("a comment that never ends")
                self.i = j + 2
            else:
                return

    def document(self) -> _Node:
        node = self.value()
        self.skip()
        if self.i != len(self.s):
            raise self.fail("extra text after the JSON value")
        return node

    def value(self) -> _Node:
        self.skip()
        c = self.peek()
        if c in ("{", "["):
            return self.container(c)
        if not c:
            raise self.fail("the text ends where a value was expected")
        start = self.i
        try:
            value, end = _DECODER.raw_decode(self.s, start)
        except ValueError:
            raise self.fail("expected a value") from None
        self.i = end
        return _Node(start, end, value, "scalar")

    def container(self, opener: str) -> _Node:
        closer = "}" if opener == "{" else "]"
        node = _Node(self.i, self.i, {} if opener == "{" else [], "object" if opener == "{" else "array")
        self.i += 1
        self.skip()
        if self.peek() == closer:
            self.i += 1
            node.end = self.i
            return node
        while True:
            self.skip()
            start, key = self.i, None
            if opener == "{":
                if self.peek() != '"':
                    raise self.fail("expected a key in quotes")
                key, self.i = _DECODER.raw_decode(self.s, self.i)
                self.skip()
                if self.peek() != ":":
                    raise self.fail("expected ':' after a key")
                self.i += 1
            child = _Child(start, self.value(), key)
            node.children.append(child)
            self.skip()
            c = self.peek()
            if c == ",":
                child.comma = self.i
                self.i += 1
                self.skip()
                if self.peek() == closer:
                    raise self.fail("a comma before the closing bracket")
            elif c == closer:
                self.i += 1
                break
            else:
                raise self.fail(f"expected ',' or '{closer}'")
        node.end = self.i
        if opener == "{":
            node.value = {c.key: c.node.value for c in node.children}
        else:
            node.value = [c.node.value for c in node.children]
        return node


def _parse(text: str, comments: bool) -> _Node:
    try:
        return _Parser(text, comments).document()
    except RecursionError:
        raise JSONCError("nested too deeply for a settings file") from None


def loads(text: str, *, comments: bool = True) -> Any:
    """The value `text` holds; JSONCError (a ValueError) naming the line and column if none."""
    return _parse(text, comments).value


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


class _Editor:
    """One step of an edit: the first change that brings the text closer to the new value."""

    def __init__(self, text: str, unit: str):
        self.s = text
        self.unit = unit

    # -- text positions --------------------------------------------------------------------

    def line_start(self, pos: int) -> int | None:
        """Start of the line holding `pos` when only blanks come before `pos` on it."""
        j = self.s.rfind("\n", 0, pos) + 1
        return j if self.s[j:pos].strip() == "" else None

    def line_rest_end(self, pos: int) -> int | None:
        """Just past the newline ending `pos`'s line, when only blanks or a // comment follow."""
        j = self.s.find("\n", pos)
        rest = self.s[pos: len(self.s) if j < 0 else j].strip()
        if rest and not rest.startswith("//"):
            return None
        return len(self.s) if j < 0 else j + 1

    def indent_of(self, pos: int) -> str:
        j = self.s.rfind("\n", 0, pos) + 1
        line = self.s[j:pos]
        return line[: len(line) - len(line.lstrip(" \t"))]

    def render(self, value: Any, indent: str, inline: bool = False) -> str:
        if inline:
            return json.dumps(value, ensure_ascii=False)
        return json.dumps(value, indent=self.unit, ensure_ascii=False).replace("\n", "\n" + indent)

    def item(self, key: str | None, value: Any, indent: str, inline: bool = False) -> str:
        text = self.render(value, indent, inline)
        return text if key is None else json.dumps(key, ensure_ascii=False) + ": " + text

    # -- edits -----------------------------------------------------------------------------

    def first(self, node: _Node, new: Any) -> list[tuple[int, int, str]] | None:
        if _same(node.value, new):
            return None
        if node.kind == "object" and isinstance(new, dict):
            keys = [c.key for c in node.children]
            for i, c in enumerate(node.children):
                if c.key not in new:
                    return self.remove(node, i)
            for c in {c.key: c for c in node.children}.values():  # JSON.parse keeps a key's last value
                step = self.first(c.node, new[c.key])
                if step:
                    return step
            for k, v in new.items():
                if k not in keys:
                    return self.append(node, k, v)
            return None  # only the order of keys differs
        if node.kind == "array" and isinstance(new, list):
            old = node.value
            if len(old) == len(new):
                for c, v in zip(node.children, new):
                    step = self.first(c.node, v)
                    if step:
                        return step
                return None
            canon = SequenceMatcher(None, [json.dumps(x, sort_keys=True) for x in old],
                                    [json.dumps(x, sort_keys=True) for x in new], autojunk=False)
            for tag, i1, i2, j1, j2 in canon.get_opcodes():
                if tag == "equal":
                    continue
                if tag == "replace" and i2 - i1 == j2 - j1:
                    return self.first(node.children[i1].node, new[j1])
                if tag in ("delete", "replace") and i2 - i1 > j2 - j1:
                    return self.remove(node, i1)
                if i1 == len(old):
                    return self.append(node, None, new[j1])
                return self.insert_before(node, i1, new[j1])
        return [(node.start, node.end, self.render(new, self.indent_of(node.start)))]

    def remove(self, node: _Node, i: int) -> list[tuple[int, int, str]]:
        c = node.children[i]
        ls = self.line_start(c.start)
        if c.comma is not None:  # an item follows: take this one, its comma and the blanks after
            end = self.line_rest_end(c.comma + 1)
            if ls is not None and end is not None:
                return [(ls, end, "")]
            j = c.comma + 1
            while j < len(self.s) and self.s[j] in " \t":
                j += 1
            return [(c.start, j, "")]
        end = self.line_rest_end(c.end)
        if i == 0:
            return [(ls, end, "")] if ls is not None and end is not None else [(c.start, c.end, "")]
        comma = node.children[i - 1].comma
        assert comma is not None  # an item that is not the last has one
        if ls is not None and end is not None:  # the comma before it goes; comments in between stay
            return [(comma, comma + 1, ""), (ls, end, "")]
        return [(comma, c.end, "")]

    def append(self, node: _Node, key: str | None, value: Any) -> list[tuple[int, int, str]]:
        close = node.end - 1
        base = self.indent_of(node.start)
        if not node.children:
            child = base + self.unit
            text = child + self.item(key, value, child) + "\n"
            ls = self.line_start(close)
            if ls is not None and "\n" in self.s[node.start:close]:
                return [(ls, ls, text)]
            return [(node.start + 1, close, "\n" + text + base)]
        last = node.children[-1]
        if "\n" not in self.s[node.start:node.end]:  # a one-line container stays on one line
            return [(last.end, last.end, ", " + self.item(key, value, "", inline=True))]
        ls = self.line_start(last.start)
        child = self.s[ls:last.start] if ls is not None else base + self.unit
        end = self.line_rest_end(last.end)
        if end is not None:
            return [(last.end, last.end, ","), (end, end, child + self.item(key, value, child) + "\n")]
        return [(last.end, last.end, ",\n" + child + self.item(key, value, child))]

    def insert_before(self, node: _Node, i: int, value: Any) -> list[tuple[int, int, str]]:
        c = node.children[i]
        ls = self.line_start(c.start)
        indent = self.indent_of(c.start)
        sep = "\n" + indent if ls is not None else " "
        return [(c.start, c.start, self.item(None, value, indent) + "," + sep)]


def _unit(text: str) -> str:
    """The file's indentation step: the first indented line's, else two spaces."""
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            return line[: len(line) - len(stripped)]
    return "  "


def edit(text: str, new: Any, *, comments: bool = True) -> str:
    """`text` changed to hold `new`, everything else in it kept; JSONCError if `text` does not parse."""
    if not text.strip():
        return json.dumps(new, indent=2, ensure_ascii=False) + "\n"
    unit = _unit(text)
    for _ in range(10_000):  # each step is one local change; a settings file needs a few
        root = _parse(text, comments)
        step = _Editor(text, unit).first(root, new)
        if not step:
            break
        for start, end, replacement in sorted(step, reverse=True):
            text = text[:start] + replacement + text[end:]
    else:  # pragma: no cover - a step that changes nothing would loop
        raise JSONCError("pmem could not work out the edit")
    if not _same(loads(text, comments=comments), new):  # pragma: no cover - a bug, never a half-written file
        raise JSONCError("pmem could not edit the file without changing more than it should")
    return text
