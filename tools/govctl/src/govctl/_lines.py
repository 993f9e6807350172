"""Map TOML key paths to the line that defines them, by scanning the raw text.

`tomllib` gives values but no positions, so diagnostics find their line here. The scan is
only run for files that have a diagnostic (lazily, see `WorkFile.line_of`), and only on text
that `tomllib` already accepted, so it can stay a simple line scanner: it tracks the current
table header, counts `[[array.of.tables]]` entries, and skips the inside of multi-line strings
and multi-line arrays/inline tables.

    [govctl]                         ("govctl",)                            -> 3
    started = "2026-01-02"           ("govctl", "started")                  -> 7
    [[content.acceptance_criteria]]  ("content", "acceptance_criteria", 1)  -> 20
    status = "done"                  ("content", "acceptance_criteria", 1, "status") -> 22
"""

from __future__ import annotations

import re

_BARE_OR_QUOTED = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_KEY_RE = re.compile(rf"\s*({_BARE_OR_QUOTED}(?:\s*\.\s*{_BARE_OR_QUOTED})*)\s*=\s*")
_PART_RE = re.compile(_BARE_OR_QUOTED)

Path = tuple[str | int, ...]


def split_key(dotted: str) -> tuple[str, ...]:
    """`a."b.c".d` -> ("a", "b.c", "d")."""
    parts = []
    for m in _PART_RE.finditer(dotted):
        p = m.group(0)
        parts.append(p[1:-1] if p[0] in "\"'" else p)
    return tuple(parts)


def _scan_value(s: str, i: int, depth: int) -> tuple[int, str | None]:
    """Scan `s[i:]` tracking bracket depth; return (depth, open multi-line delimiter or None)."""
    n = len(s)
    while i < n:
        c = s[i]
        if c == "#":
            break
        if s.startswith('"""', i) or s.startswith("'''", i):
            delim = s[i : i + 3]
            end = _find_close(s, i + 3, delim)
            if end < 0:
                return depth, delim
            i = end + 3
            continue
        if c == '"':
            i += 1
            while i < n and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
        elif c == "'":
            j = s.find("'", i + 1)
            i = n if j < 0 else j
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return depth, None


def _find_close(s: str, i: int, delim: str) -> int:
    """Index of the closing multi-line delimiter in `s[i:]`, or -1."""
    while True:
        j = s.find(delim, i)
        if j < 0:
            return -1
        if delim == '"""':
            k = j - 1
            while k >= i and s[k] == "\\":
                k -= 1
            if (j - 1 - k) % 2 == 1:  # an odd number of backslashes escapes the first quote
                i = j + 1
                continue
        # `""""` closes at the last three quotes; the extra quote belongs to the content
        while s.startswith(delim[0], j + 3):
            j += 1
        return j


def key_lines(text: str) -> dict[Path, int]:
    """Return {key path: 1-based line} for every table header and key in `text`."""
    out: dict[Path, int] = {}
    counters: dict[tuple[str, ...], int] = {}
    table: Path = ()
    ml_delim: str | None = None  # inside a multi-line string
    depth = 0  # inside a multi-line array / inline table
    for lineno, line in enumerate(text.splitlines(), 1):
        if ml_delim is not None:
            end = _find_close(line, 0, ml_delim)
            if end < 0:
                continue
            rest, ml_delim = line[end + 3 :], None
            depth, ml_delim = _scan_value(rest, 0, depth)
            continue
        if depth > 0:
            depth, ml_delim = _scan_value(line, 0, depth)
            continue
        s = line.lstrip()
        if not s or s[0] == "#":
            continue
        if s.startswith("[["):
            name = split_key(s[2 : s.find("]]")])
            counters[name] = counters.get(name, -1) + 1
            table = (*name, counters[name])
            out.setdefault(table, lineno)
            continue
        if s[0] == "[":
            table = split_key(s[1 : s.find("]")])
            out.setdefault(table, lineno)
            continue
        m = _KEY_RE.match(line)
        if m is None:
            continue
        out.setdefault((*table, *split_key(m.group(1))), lineno)
        depth, ml_delim = _scan_value(line, m.end(), 0)
    return out


def lookup(lines: dict[Path, int], path: Path) -> int:
    """Line of `path`, or of its longest defined prefix (an array element -> its key); else 1."""
    p = tuple(path)
    while p:
        hit = lines.get(p)
        if hit is not None:
            return hit
        p = p[:-1]
    return 1
