"""Artifact IDs in free text: `[[ID]]` links (E022) and bare mentions of known IDs (W004).

A link is `[[RFC-…]]`, `[[ADR-…]]` or `[[WI-…]]` outside Markdown code (`_markdown.code_mask`)
whose target holds a digit: `[[RFC-NNNN]]` is a placeholder that shows the syntax, not a ref.
A target that has digits but no valid shape (`[[RFC-12]]`) still counts, and does not resolve.

A bare mention is a well-formed ID written without brackets. Upstream govctl warns about one
when it names an artifact that exists, in an item that is not done, in its description,
criteria or notes; so do we (W004), code spans included, as upstream does: that keeps our
`check -W` a superset of upstream's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from govctl._load import WorkFile
from govctl._markdown import code_mask
from govctl._rules import REF_PATTERN

LINK_RE = re.compile(r"\[\[((?:RFC|ADR|WI)-[A-Za-z0-9:-]+)\]\]")
BARE_RE = re.compile(rf"\b({REF_PATTERN})\b")
_HAS_DIGIT_RE = re.compile(r"\d")


def texts(wf: WorkFile, *, prose_only: bool = False) -> Iterator[tuple[str, tuple[str | int, ...]]]:
    """(text, key path) of every free-text field that may carry IDs.

    `prose_only`: the fields upstream scans for bare mentions (description, criteria, notes);
    otherwise also the title and the journal.
    """
    if not prose_only and isinstance(title := wf.get("govctl", "title"), str):
        yield title, ("govctl", "title")
    if isinstance(d := wf.get("content", "description"), str):
        yield d, ("content", "description")
    notes = wf.get("content", "notes")
    for i, note in enumerate(notes if isinstance(notes, list) else ()):
        if isinstance(note, str):
            yield note, ("content", "notes", i)
    keys = (
        (("acceptance_criteria", "text"),)
        if prose_only
        else (
            ("journal", "content"),
            ("acceptance_criteria", "text"),
        )
    )
    for key, field in keys:
        entries = wf.get("content", key)
        for i, e in enumerate(entries if isinstance(entries, list) else ()):
            if isinstance(e, dict) and isinstance(e.get(field), str):
                yield e[field], ("content", key, i, field)


def link_matches(text: str) -> Iterator[re.Match[str]]:
    """The `[[ID]]` links of `text` (not in code, not placeholders), in order.

    The matches are made on the code mask; their spans and groups hold for `text` too.
    """
    if "[[" not in text:
        return
    for m in LINK_RE.finditer(code_mask(text)):
        if _HAS_DIGIT_RE.search(m.group(1)):
            yield m


def links(text: str) -> Iterator[str]:
    """Targets of the `[[ID]]` links in `text`, in order (see `link_matches`)."""
    for m in link_matches(text):
        yield m.group(1)


def bare_mentions(text: str) -> Iterator[re.Match[str]]:
    """Well-formed IDs in `text` that are not inside any `[[...]]`, in order (group 1: the ID)."""
    if "RFC-" not in text and "ADR-" not in text and "WI-" not in text:
        return
    inside = [m.span() for m in LINK_RE.finditer(text)]
    for m in BARE_RE.finditer(text):
        if not any(a <= m.start() and m.end() <= b for a, b in inside):
            yield m


def line_of_match(wf: WorkFile, path: tuple[str | int, ...], text: str, m: re.Match[str]) -> int:
    """Line in the raw file of match `m` in `text`, the value of key `path`.

    If `m` is the k-th occurrence of its string in `text`, it is the k-th one in the raw file
    from the key's line on (a multi-line string starts on its key's line); without one, the
    key's line.
    """
    needle = m.group(0)
    nth = text.count(needle, 0, m.start())
    start = wf.line_of(*path)
    hit = 0
    for _ in range(start - 1):
        hit = wf.text.find("\n", hit) + 1
    for _ in range(nth + 1):
        hit = wf.text.find(needle, hit)
        if hit < 0:
            return start
        hit += 1
    return wf.text.count("\n", 0, hit - 1) + 1
