"""Set top-level members of a JSON object in its own text, so only the changed values' bytes change.

A shipped config.json is compared by hash, reviewed as a diff and kept under version control;
re-dumping it would rewrite every line for a one-number edit. So :func:`edit_text` keeps every byte
outside the values it changes:

- a scalar value is replaced where it stands;
- a list of the same length (``indexer_types``) is edited entry by entry;
- any other value is written in the layout of the one it replaces (one line, or one entry per line
  at the file's indent);
- a key the file lacks is appended after the last member, with the separators and indent of the
  members before it.

The result is parsed back and must equal the intended object, key order included. Where it does
not (a layout this editor does not handle) the whole object is re-dumped and the caller says so.
Duplicate keys: ``json.loads`` keeps the last one, so the last one is edited (and
:func:`duplicate_keys` lets the caller report them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from json.decoder import scanstring
from typing import Any

_WS = " \t\n\r"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Member:
    """One ``"key": value`` of the top-level object: where its key and value are in the text."""

    key: str
    key_start: int  # the key's opening quote
    key_end: int  # just past the key's closing quote
    start: int  # the value's first character
    end: int  # just past the value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _expect(text: str, i: int, chars: str) -> str:
    if i >= len(text) or text[i] not in chars:
        raise ValueError(f"expected one of {chars!r} at {i}")
    return text[i]


def members(text: str) -> tuple[int, list[Member]]:
    """``(index of the opening brace, members in order)`` of the top-level object in ``text``."""
    i = _skip(text, 0)
    _expect(text, i, "{")
    brace, out = i, []
    i = _skip(text, i + 1)
    if _expect(text, i, '"}') == "}":
        return brace, out
    while True:
        _expect(text, i, '"')
        key, key_end = scanstring(text, i + 1)
        j = _skip(text, key_end)
        _expect(text, j, ":")
        j = _skip(text, j + 1)
        _, end = _DECODER.raw_decode(text, j)
        out.append(Member(key, i, key_end, j, end))
        i = _skip(text, end)
        if _expect(text, i, ",}") == "}":
            return brace, out
        i = _skip(text, i + 1)


def _elements(text: str, start: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each entry of the array whose ``[`` is at ``start``."""
    i = _skip(text, start + 1)
    out: list[tuple[int, int]] = []
    if text[i : i + 1] == "]":
        return out
    while True:
        _, end = _DECODER.raw_decode(text, i)
        out.append((i, end))
        i = _skip(text, end)
        if _expect(text, i, ",]") == "]":
            return out
        i = _skip(text, i + 1)


def duplicate_keys(text: str) -> dict[str, int]:
    """``{key: times written}`` of top-level keys written more than once (``json.loads`` keeps
    the last)."""
    counts: dict[str, int] = {}
    for m in members(text)[1]:
        counts[m.key] = counts.get(m.key, 0) + 1
    return {k: n for k, n in counts.items() if n > 1}


def same(a: Any, b: Any) -> bool:
    """Equal as JSON: ``1``, ``1.0`` and ``true`` differ (``==`` says they are equal)."""
    return json.dumps(a) == json.dumps(b)


@dataclass(frozen=True)
class _Style:
    """How the file writes JSON: one indent level, line end, and whether it escapes non-ASCII."""

    indent: str | None  # None: the file is on one line
    newline: str
    ascii: bool

    @classmethod
    def of(cls, text: str, found: list[Member]) -> _Style:
        newline = "\r\n" if "\r\n" in text else "\n"
        lead = _line_indent(text, found[0].key_start) if found else ""
        one_line = "\n" not in text.strip()
        return cls(None if one_line else (lead or "  "), newline, text.isascii())

    def dumps(self, value: Any, base: str = "", *, multiline: bool = False) -> str:
        """``value`` as JSON; a non-empty list or object over several lines if ``multiline``,
        each continuation line starting with ``base``."""
        if not multiline or self.indent is None or not isinstance(value, (list, dict)) or not value:
            return json.dumps(value, ensure_ascii=self.ascii)
        out = json.dumps(value, indent=self.indent, ensure_ascii=self.ascii)
        return out.replace("\n", self.newline + base)


def edit_text(text: str, new: Mapping[str, Any]) -> tuple[str, bool]:
    """``text`` with its top-level object set to ``new`` (same keys, or keys appended).

    Returns:
        ``(new text, redumped)``; ``redumped`` is True when the in-place edit could not be
        verified and the whole object was written out again (indent and final newline kept).
    """
    try:
        result = _edit_in_place(text, new)
        if json.dumps(json.loads(result)) == json.dumps(dict(new)):
            return result, False
        style = _Style.of(text, members(text)[1])
    except (ValueError, KeyError, IndexError):
        style = _Style("  ", "\n", text.isascii())
    out = json.dumps(dict(new), indent=style.indent, ensure_ascii=style.ascii)
    out = out.replace("\n", style.newline)
    return out + (style.newline if text.endswith("\n") else ""), True


def _edit_in_place(text: str, new: Mapping[str, Any]) -> str:
    old = json.loads(text)
    brace, found = members(text)
    last = {m.key: m for m in found}  # json.loads keeps the last of a duplicated key
    if set(old) - set(new):
        raise KeyError("a key is removed")
    style = _Style.of(text, found)
    cuts: list[tuple[int, int, str]] = []
    for key, value in new.items():
        if key in last and not same(old[key], value):
            cuts += _replace(text, last[key], old[key], value, style)
    added = [(k, v) for k, v in new.items() if k not in last]
    if added:
        cuts.append(_append(text, brace, found, added, style))
    for start, end, piece in sorted(cuts, reverse=True):
        text = text[:start] + piece + text[end:]
    return text


def _replace(
    text: str, m: Member, before: Any, after: Any, style: _Style
) -> list[tuple[int, int, str]]:
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        spans = _elements(text, m.start)
        return [
            (s, e, style.dumps(a))
            for (s, e), b, a in zip(spans, before, after, strict=True)
            if not same(a, b)
        ]
    multiline = "\n" in text[m.start : m.end]
    base = _line_indent(text, m.key_start)
    return [(m.start, m.end, style.dumps(after, base, multiline=multiline))]


def _append(
    text: str, brace: int, found: list[Member], added: list[tuple[str, Any]], style: _Style
) -> tuple[int, int, str]:
    if not found:
        piece = ", ".join(f"{style.dumps(k)}: {style.dumps(v)}" for k, v in added)
        return brace + 1, brace + 1, piece
    last = found[-1]
    before_key = found[-2].end if len(found) > 1 else brace + 1
    gap = text[before_key : last.key_start]  # ",\n  " between members (or "\n  " after "{")
    sep = gap[gap.index(",") + 1 :] if len(found) > 1 else gap
    colon = text[last.key_end : last.start]
    multiline = "\n" in sep
    base = sep.rsplit("\n", 1)[-1] if multiline else ""
    piece = "".join(
        f",{sep}{style.dumps(k)}{colon}{style.dumps(v, base, multiline=multiline)}"
        for k, v in added
    )
    return last.end, last.end, piece


def _line_indent(text: str, i: int) -> str:
    """The whitespace before position ``i`` on its line ("" if anything else precedes it)."""
    start = text.rfind("\n", 0, i) + 1
    lead = text[start:i]
    return lead if lead.strip() == "" else ""
