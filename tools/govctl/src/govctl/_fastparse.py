"""A fast parser for the plain subset of TOML that work items use; None means "ask tomllib".

`tomllib` is pure Python and parses a typical work item in ~0.2 ms, most of `check`'s time on
1,000 files. Work items written by `govctl work` (and by hand) use a small subset: `[table]` and
`[[array.of.tables]]` headers with bare keys, `key = value` with a bare key, and values that are
basic strings without escapes, multi-line basic strings without escapes or quotes, decimal
integers, booleans, or one-line arrays of such strings. This parser handles exactly that subset
about 5x faster and returns None for anything else (an escape, a literal string, a dotted key,
an inline table, a date, a CRLF file, a redefined key...), so `tomllib` decides every case the
subset does not cover, including every syntax error.

Contract (tested against `tomllib` as the oracle on fixtures, generated items and generated
near-TOML text): `fast_loads(s)` is None, or equal to `tomllib.loads(s)`.
"""

from __future__ import annotations

import re
from typing import Any

_BAD_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # includes \r: CRLF files go to tomllib
_TAIL = r"[ \t]*(?:#.*)?\Z"  # trailing whitespace and an optional comment
_HEADER = re.compile(r"\[([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)\]" + _TAIL)
_AOT_HEADER = re.compile(r"\[\[([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)\]\]" + _TAIL)
_KEY = re.compile(r"([A-Za-z0-9_-]+)[ \t]*=[ \t]*")
_STR = re.compile(r'"([^"\\]*)"' + _TAIL)
_INT = re.compile(r"(0|[1-9][0-9]{0,17})" + _TAIL)  # well inside int64
_BOOL = re.compile(r"(true|false)" + _TAIL)
_ARR = re.compile(r'\[[ \t]*((?:"[^"\\]*"[ \t]*,[ \t]*)*(?:"[^"\\]*"[ \t]*)?)\]' + _TAIL)
_ARR_ITEM = re.compile(r'"([^"\\]*)"')


class _Bail(Exception):
    pass


def fast_loads(text: str) -> dict[str, Any] | None:
    """`tomllib.loads(text)` for the plain subset, else None."""
    if _BAD_CHARS.search(text):
        return None
    try:
        return _parse(text.split("\n"))
    except _Bail:
        return None


def _descend(doc: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    t = doc
    for p in parts:
        t = t.setdefault(p, {})
        if type(t) is not dict:  # an array of tables or a value: tomllib's rules apply
            raise _Bail
    return t


def _parse(lines: list[str]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    cur = doc
    defined: set[str] = set()  # tables defined by a [header]
    aots: set[int] = set()  # id() of the lists made by [[headers]] (not `key = [...]`)
    i, n = 0, len(lines)
    while i < n:
        raw = lines[i]
        i += 1
        line = raw.lstrip(" \t")
        if not line or line[0] == "#":
            continue
        if line[0] == "[":
            if m := _AOT_HEADER.match(line):
                *parents, last = m.group(1).split(".")
                table = _descend(doc, parents)
                if last not in table:
                    table[last] = []
                    aots.add(id(table[last]))
                aot = table[last]
                if id(aot) not in aots:  # a table or a static array: tomllib's rules apply
                    raise _Bail
                cur = {}
                aot.append(cur)
                continue
            m = _HEADER.match(line)
            if m is None or m.group(1) in defined:
                raise _Bail
            defined.add(m.group(1))
            cur = _descend(doc, m.group(1).split("."))
            if cur:  # it exists implicitly (a super-table after its sub-tables): tomllib decides
                raise _Bail
            continue
        m = _KEY.match(line)
        if m is None or m.group(1) in cur:
            raise _Bail
        key, value = m.group(1), line[m.end() :]
        if value.startswith('"""'):
            cur[key], i = _multiline(value[3:], lines, i)
        elif ms := _STR.match(value):
            cur[key] = ms.group(1)
        elif ms := _ARR.match(value):
            cur[key] = _ARR_ITEM.findall(ms.group(1))
        elif ms := _INT.match(value):
            cur[key] = int(ms.group(1))
        elif ms := _BOOL.match(value):
            cur[key] = ms.group(1) == "true"
        else:
            raise _Bail
    return doc


def _multiline(first: str, lines: list[str], i: int) -> tuple[str, int]:
    """A multi-line basic string opened on this line; (value, index of the next line)."""
    parts = [first]
    while '"""' not in parts[-1]:
        if i >= len(lines):
            raise _Bail
        parts.append(lines[i])
        i += 1
    if parts[0] == "":
        parts.pop(0)  # a newline right after the opening delimiter is trimmed
    s = "\n".join(parts)
    end = s.index('"""')
    body, rest = s[:end], s[end + 3 :]
    if '"' in body or "\\" in body or not re.fullmatch(_TAIL, rest):
        raise _Bail
    return body, i
