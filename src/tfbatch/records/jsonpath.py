"""The JSONPath subset SageMaker Batch Transform accepts in InputFilter / OutputFilter.

Forms (developer guide, "Supported JSONPath Operators"): ``$``, ``.name``, ``*``,
``['a','b']``, ``[1,3,5]`` (negative indexes count from the end), ``[start:end]`` with either
bound omitted. Index lists may mix in slices (the API reference shows ``$[0,5:]``). A dot
before a bracket is accepted (``$.a.['b','c']``), as the guide's examples use it.

Facts encoded from that guide, which differ from other JSONPath dialects:
- slices include their end: "``$[1:4]`` specifies the second through fifth columns" and
  "``[:5]`` ... from the first column (index 0) through the sixth column";
- an index outside the array is an error, not an empty result;
- ``['a','b']`` on an object selects an object with those keys (as Jayway JsonPath does),
  so ``$['id','SageMakerOutput']`` keeps both fields with their names.

A path made only of definite steps (names, single indexes) returns one value; any
wildcard, list or slice makes it return a list. CSV rows are lists, so index forms pick
columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tfbatch.errors import InvalidInput, ConfigError

SUPPORTED_FORMS = "$, $.a, $.a.b, $.*, $.a.*, $['a','b'], $[1,3], $[-1], $[2:5], $[2:], $[:3]"
_NAME = re.compile(r"[^.\[\]'\"\s*,]+")
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class _Key:
    name: str


@dataclass(frozen=True)
class _Keys:
    names: tuple[str, ...]


@dataclass(frozen=True)
class _Wildcard:
    pass


@dataclass(frozen=True)
class _Index:
    index: int


@dataclass(frozen=True)
class _Slice:
    start: int | None
    end: int | None  # inclusive


@dataclass(frozen=True)
class _Union:
    items: tuple[_Index | _Slice, ...]


_Step = _Key | _Keys | _Wildcard | _Index | _Union


class JsonPath:
    """A compiled path; ``apply`` raises InvalidInput when the value lacks what it names."""

    def __init__(self, expr: str, steps: tuple[_Step, ...]):
        self.expr = expr
        self.steps = steps
        self.is_identity = not steps
        self.definite = all(isinstance(s, (_Key, _Keys, _Index)) for s in steps)
        # CSV rows are arrays: only index-like steps can apply to them.
        self.index_only = all(isinstance(s, (_Index, _Union, _Wildcard)) for s in steps)
        # ``$.key``, the usual InputFilter of JSON records: one dict lookup, not the step loop.
        self._key = steps[0].name if len(steps) == 1 and isinstance(steps[0], _Key) else None
        # ``$['id','SageMakerOutput']``, the usual OutputFilter of a JSON join: one dict built.
        self._keys = steps[0].names if len(steps) == 1 and isinstance(steps[0], _Keys) else None

    @property
    def top_keys(self) -> tuple[str, ...] | None:
        """The keys a path of one key step (``$.a``, ``$['a','b']``) picks from an object; None
        for any other path."""
        if self._key is not None:
            return (self._key,)
        return self._keys

    def __repr__(self) -> str:
        return f"JsonPath({self.expr!r})"

    def positions(self, n: int) -> int | list[int] | None:
        """What ``apply`` picks from an array of ``n`` elements, as their positions, where the
        path picks by position alone (one index, union or wildcard step): an int for a definite
        path, else a list. None for any other path, or where ``apply`` fails on ``n`` elements
        (then ``apply`` itself raises the error)."""
        if len(self.steps) != 1 or not isinstance(self.steps[0], (_Index, _Union, _Wildcard)):
            return None
        try:
            return self.apply(list(range(n)))
        except InvalidInput:
            return None

    def apply(self, value: Any) -> Any:
        if type(value) is dict:
            if self._key is not None and self._key in value:
                return value[self._key]
            if self._keys is not None:  # a loop, not a comprehension: no function made per call
                picked = {}
                for k in self._keys:
                    if k in value:
                        picked[k] = value[k]
                return picked
        nodes = [value]
        definite = True
        for step in self.steps:
            # Once a step may select several nodes, absent keys are skipped, not errors.
            nodes = self._step(step, nodes, strict=definite)
            if isinstance(step, (_Wildcard, _Union)):
                definite = False
        return nodes[0] if definite else nodes

    def _step(self, step: _Step, nodes: list[Any], strict: bool) -> list[Any]:
        out: list[Any] = []
        for node in nodes:
            if isinstance(step, _Key):
                if isinstance(node, dict) and step.name in node:
                    out.append(node[step.name])
                elif strict:
                    raise self._missing(f"key {step.name!r}", node)
            elif isinstance(step, _Keys):
                if isinstance(node, dict):
                    out.append({k: node[k] for k in step.names if k in node})
                elif strict:
                    raise self._missing(f"keys {list(step.names)}", node)
            elif isinstance(step, _Wildcard):
                if isinstance(node, dict):
                    out.extend(node.values())
                elif isinstance(node, list):
                    out.extend(node)
            elif isinstance(step, _Index):
                if isinstance(node, list) and -len(node) <= step.index < len(node):
                    out.append(node[step.index])
                elif strict:
                    raise self._missing(f"index {step.index}", node)
            else:
                if not isinstance(node, list):
                    if strict:
                        raise self._missing("an array", node)
                    continue
                self._union(step, node, out)
        return out

    def _union(self, step: _Union, node: list[Any], out: list[Any]) -> None:
        """The union's items of ``node`` appended to ``out`` in order; a slice is taken as a
        list slice (C speed: a CSV row's ``$[1:]`` is one call, not one lookup per cell)."""
        n = len(node)
        for item in step.items:
            if isinstance(item, _Index):
                if not -n <= item.index < n:
                    raise InvalidInput(
                        f"JSONPath {self.expr!r}: index {item.index} is outside an array of "
                        f"{n} elements"
                    )
                out.append(node[item.index])
            else:
                start = 0 if item.start is None else item.start
                end = n - 1 if item.end is None else item.end
                start = max(start + n, 0) if start < 0 else start
                end = end + n if end < 0 else min(end, n - 1)
                if end >= start:  # both within [0, n) then: no negative index reaches the slice
                    out.extend(node[start:end + 1])

    def _missing(self, what: str, node: Any) -> InvalidInput:
        if isinstance(node, dict):
            keys = ", ".join(repr(k) for k in list(node)[:10])
            found = f"an object with keys [{keys}{', ...' if len(node) > 10 else ''}]"
        elif isinstance(node, list):
            found = f"an array of {len(node)} elements"
        else:
            found = f"a {type(node).__name__} value"
        return InvalidInput(f"JSONPath {self.expr!r}: expected {what}, found {found}")


def compile_path(expr: str | None) -> JsonPath:
    """Parse ``expr``; None or "" means ``$``. Raises ConfigError for anything unsupported."""
    if expr is None or expr.strip() in ("", "$"):
        return JsonPath("$", ())
    return JsonPath(expr, tuple(_Parser(expr.strip()).parse()))


class _Parser:
    def __init__(self, expr: str):
        self.s = expr
        self.i = 0

    def fail(self, reason: str) -> ConfigError:
        return ConfigError(
            f"invalid JSONPath {self.s!r}: {reason} at position {self.i}; "
            f"supported forms: {SUPPORTED_FORMS}"
        )

    def parse(self) -> list[_Step]:
        if not self.s.startswith("$"):
            raise self.fail("a path must start with '$'")
        self.i = 1
        steps: list[_Step] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == ".":
                self.i += 1
                if self.s.startswith("..", self.i - 1):
                    raise self.fail("recursive descent '..' is not supported")
                if self.s.startswith("[", self.i):
                    continue
                if self.s.startswith("*", self.i):
                    self.i += 1
                    steps.append(_Wildcard())
                    continue
                m = _NAME.match(self.s, self.i)
                if not m:
                    raise self.fail("expected a name after '.'")
                steps.append(_Key(m.group()))
                self.i = m.end()
            elif c == "[":
                self.i += 1
                steps.append(self._bracket())
            else:
                raise self.fail(f"unexpected {c!r}")
        return steps

    def _bracket(self) -> _Step:
        self._space()
        if self.s.startswith("*", self.i):
            self.i += 1
            step: _Step = _Wildcard()
        elif self.s.startswith(("'", '"'), self.i):
            names = [self._quoted()]
            while self._comma():
                names.append(self._quoted())
            step = _Key(names[0]) if len(names) == 1 else _Keys(tuple(names))
        else:
            items = [self._index_or_slice()]
            while self._comma():
                items.append(self._index_or_slice())
            if len(items) == 1 and isinstance(items[0], _Index):
                step = items[0]
            else:
                step = _Union(tuple(items))
        self._space()
        if not self.s.startswith("]", self.i):
            raise self.fail("expected ']'")
        self.i += 1
        return step

    def _space(self) -> None:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def _comma(self) -> bool:
        self._space()
        if self.s.startswith(",", self.i):
            self.i += 1
            self._space()
            return True
        return False

    def _quoted(self) -> str:
        if not self.s.startswith(("'", '"'), self.i):
            raise self.fail("expected a quoted name (names and indexes cannot be mixed)")
        quote = self.s[self.i]
        self.i += 1
        out = []
        while self.i < len(self.s) and self.s[self.i] != quote:
            if self.s[self.i] == "\\" and self.i + 1 < len(self.s):
                self.i += 1
            out.append(self.s[self.i])
            self.i += 1
        if self.i >= len(self.s):
            raise self.fail("unterminated quoted name")
        self.i += 1
        return "".join(out)

    def _int(self) -> int | None:
        m = _INT.match(self.s, self.i)
        if not m:
            return None
        self.i = m.end()
        return int(m.group())

    def _index_or_slice(self) -> _Index | _Slice:
        start = self._int()
        if not self.s.startswith(":", self.i):
            if start is None:
                raise self.fail("expected an index, a slice, a quoted name or '*'")
            return _Index(start)
        self.i += 1
        end = self._int()
        if self.s.startswith(":", self.i):
            raise self.fail("slice steps ([a:b:c]) are not supported")
        return _Slice(start, end)
