"""Tables (Markdown and console) and generated sections of hand-written Markdown records.

A record's ``.md`` mixes prose a person wrote with tables a benchmark renders. The rendered parts
sit between ``<!-- KEY:begin -->`` and ``<!-- KEY:end -->`` lines; :func:`write_sections` replaces
only what lies between them, so the prose around them survives every re-run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ._record import write_text_atomic
from ._stats import UNITS


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A Markdown table; ``align`` has one letter per column, ``l`` or ``r`` (default ``l``)."""
    if align and len(align) != len(header):
        raise ValueError(f"align={align!r} has {len(align)} letters for {len(header)} columns")
    rule = {"l": "---", "r": "---:"}
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"table row {i} has {len(row)} cells for {len(header)} columns")
    lines = [
        _md_row(header),
        "|" + "|".join(rule[a] for a in (align or "l" * len(header))) + "|",
        *(_md_row(row) for row in rows),
    ]
    return "\n".join(lines)


def _md_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table with padded columns, for a benchmark's console output."""
    cells = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)  # fmt: skip


def human_time(value: float | None, unit: str = "us") -> str:
    """A duration as people read it: ``182 µs``, ``7.4 µs``, ``12.14 ms``, ``3.21 s``; None: n/a."""
    if value is None:
        return "n/a"
    seconds = value * UNITS[unit]
    if seconds < 1e-3:
        us = seconds * 1e6
        return f"{us:.0f} µs" if us >= 10 else f"{us:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def section_markers(key: str) -> tuple[str, str]:
    """The begin and end lines of generated section ``key``."""
    if not key or "\n" in key or "--" in key:
        raise ValueError(f"section key {key!r}: use one line of text without '--'")
    return f"<!-- {key}:begin -->", f"<!-- {key}:end -->"


def splice_section(doc: str, key: str, body: str, *, name: str = "the document") -> str:
    """``doc`` with section ``key``'s body replaced by ``body`` (appended if it has no such
    section). ``name`` goes into errors.

    Raises:
        ValueError: the markers are unpaired, out of order or repeated.
    """
    begin, end = section_markers(key)
    block = f"{begin}\n{body.strip()}\n{end}"
    counts = doc.count(begin), doc.count(end)
    if counts == (0, 0):
        return doc.rstrip() + ("\n\n" if doc.strip() else "") + block + "\n"
    start, stop = doc.find(begin), doc.find(end)
    if counts != (1, 1) or stop < start:
        raise ValueError(
            f"{name}: section {key!r} needs exactly one '{begin}' followed by one '{end}' "
            f"(found {counts[0]} begin, {counts[1]} end); fix the markers by hand"
        )
    return doc[:start] + block + doc[stop + len(end) :]


def write_sections(path: Path | str, sections: Mapping[str, str]) -> None:
    """Replace (or append) each generated section of the Markdown file ``path``.

    Everything outside the markers is left byte for byte; the file is created if missing. All
    sections are checked before anything is written, so a bad marker changes nothing.
    """
    path = Path(path)
    doc = path.read_text() if path.exists() else ""
    for key, body in sections.items():
        doc = splice_section(doc, key, body, name=str(path))
    write_text_atomic(path, doc)


def read_section(doc: str, key: str) -> str | None:
    """The body of section ``key`` in ``doc`` (without its markers), or None if absent."""
    begin, end = section_markers(key)
    start, stop = doc.find(begin), doc.find(end)
    if start < 0 or stop < start:
        return None
    return doc[start + len(begin) : stop].strip("\n")
