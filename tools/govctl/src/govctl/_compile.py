"""Compile a draft-07 schema into one fast, conservative `is_valid(doc) -> bool` predicate.

`jsonschema` costs ~0.1 s to import and ~0.2 ms per work item, which alone would spend most of
the 0.5 s budget for 1,000 files. Most files are valid, so `check` first runs this predicate
and only imports `jsonschema` for files it rejects; `jsonschema` then produces the actual
errors (and finds none when this predicate was merely conservative).

Contract (tested against `jsonschema.Draft7Validator` with its format checker as the oracle):
    compiled(doc) is True  =>  jsonschema finds no error in doc
It may return False for a valid doc (a float where an integer is expected, for instance); that
only costs time. Schemas using keywords outside the supported subset compile to None and the
caller validates every file with `jsonschema`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

Predicate = Callable[[Any], bool]

# Keywords that never affect validity.
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "definitions", "default", "examples"}
)
_SUPPORTED = _ANNOTATIONS | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "pattern",
    "format",
    "minLength",
    "uniqueItems",
    "$ref",
}
_TYPES: dict[str, Predicate] = {
    # exact types: bool is not an integer; a float 1.0 (valid in draft-07) is rejected,
    # conservatively
    "string": lambda x: type(x) is str,
    "integer": lambda x: type(x) is int,
    "number": lambda x: type(x) is int or type(x) is float,
    "boolean": lambda x: type(x) is bool,
    "object": lambda x: type(x) is dict,
    "array": lambda x: type(x) is list,
    "null": lambda x: x is None,
}
_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def ecma_regex(pattern: str) -> re.Pattern[str]:
    """A schema `pattern` compiled with ECMA-262's `$`: the end of the string, nothing else.

    Python's `$` also matches before a final newline, so `re.search("^ADR-\\d{4}$", "ADR-0001\\n")`
    succeeds; in the schema's own dialect (and in upstream govctl's validator) it fails. Each
    unescaped `$` outside a character class becomes `\\Z`.
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append("\\Z" if c == "$" and not in_class else c)
        i += 1
    return re.compile("".join(out))


class Unsupported(Exception):
    """The schema uses something this compiler does not implement."""


def is_date(x: Any) -> bool:
    """draft-07 "date" format as `jsonschema` checks it: YYYY-MM-DD and a real calendar day."""
    if type(x) is not str:
        return True
    if not _DATE_RE.fullmatch(x):
        return False
    try:
        dt.date.fromisoformat(x)
    except ValueError:
        return False
    return True


def compile_schema(schema: dict[str, Any]) -> Predicate | None:
    """Return the predicate for `schema`, or None when it uses unsupported keywords."""
    try:
        return _Compiler(schema).compile(schema, depth=0)
    except Unsupported:
        return None


class _Compiler:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#/"):
            raise Unsupported(ref)
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise Unsupported(ref)
            node = node[part]
        return node

    def compile(self, s: Any, depth: int) -> Predicate:
        if depth > 32:
            raise Unsupported("recursive schema")
        if s is True or s == {}:
            return lambda x: True
        if s is False:
            return lambda x: False
        if not isinstance(s, dict) or not s.keys() <= _SUPPORTED:
            raise Unsupported(s)
        if "$ref" in s:  # draft-07: keywords beside $ref are ignored
            return self.compile(self.resolve(s["$ref"]), depth + 1)
        checks: list[Predicate] = []
        if "type" in s:
            if not isinstance(s["type"], str) or s["type"] not in _TYPES:
                raise Unsupported(s["type"])
            checks.append(_TYPES[s["type"]])
        if "enum" in s:
            checks.append(_enum(s["enum"]))
        if "const" in s:
            checks.append(_const(s["const"]))
        if "pattern" in s:
            search = ecma_regex(s["pattern"]).search
            checks.append(lambda x: type(x) is not str or search(x) is not None)
        if "format" in s:
            if s["format"] != "date":
                raise Unsupported(s["format"])
            checks.append(is_date)
        if "minLength" in s:
            n = s["minLength"]
            checks.append(lambda x: type(x) is not str or len(x) >= n)
        if s.get("uniqueItems") is True:
            checks.append(_unique)
        if "items" in s:
            checks.append(self._items(s["items"], depth))
        if s.keys() & {"properties", "required", "additionalProperties"}:
            checks.append(self._object(s, depth))
        return _conjunction(checks)

    def _items(self, items: Any, depth: int) -> Predicate:
        if isinstance(items, list):
            raise Unsupported("tuple items")
        each = self.compile(items, depth + 1)

        def check(x: Any) -> bool:
            if type(x) is list:
                for v in x:
                    if not each(v):
                        return False
            return True

        return check

    def _object(self, s: dict[str, Any], depth: int) -> Predicate:
        props = {k: self.compile(v, depth + 1) for k, v in s.get("properties", {}).items()}
        required = tuple(s.get("required", ()))
        extra = s.get("additionalProperties", True)
        if extra not in (True, False):
            raise Unsupported("additionalProperties schema")
        closed = extra is False
        allowed = frozenset(props)

        def check(x: Any) -> bool:
            if type(x) is not dict:
                return True  # "type" (when present) has already rejected it
            for k in required:
                if k not in x:
                    return False
            if closed and not x.keys() <= allowed:
                return False
            for k, v in x.items():
                p = props.get(k)
                if p is not None and not p(v):
                    return False
            return True

        return check


def _conjunction(checks: list[Predicate]) -> Predicate:
    """`checks` joined by `and`, nested pairwise: no generator per call on the hot path."""
    if not checks:
        return lambda x: True
    head = checks[0]
    for nxt in checks[1:]:
        head = (lambda a, b: lambda x: a(x) and b(x))(head, nxt)
    return head


def _enum(values: list[Any]) -> Predicate:
    if not all(type(v) is str for v in values):
        raise Unsupported("non-string enum")
    allowed = frozenset(values)
    return lambda x: type(x) is str and x in allowed


def _const(value: Any) -> Predicate:
    if type(value) not in (str, int):
        raise Unsupported("const")
    return lambda x: type(x) is type(value) and x == value


def _unique(x: Any) -> bool:
    if type(x) is not list:
        return True
    if all(type(v) is str for v in x):
        return len(set(x)) == len(x)
    return False  # mixed items: let jsonschema decide
