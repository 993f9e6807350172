"""TOML text helpers for authoring: string literals, criterion prefixes, tomlkit insertions.

tomlkit keeps comments and layout on a round trip; these helpers add keys and array-of-table
entries where a person would have written them (after their predecessor, one blank line apart).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from govctl.errors import UsageError

# "prefix: text" -> category, as upstream parses `work add ID acceptance_criteria "fix: ..."`
CATEGORY_PREFIXES = {
    **dict.fromkeys(("add", "added", "feat", "feature"), "added"),
    **dict.fromkeys(("change", "changed", "refactor", "perf"), "changed"),
    **dict.fromkeys(("deprecate", "deprecated"), "deprecated"),
    **dict.fromkeys(("remove", "removed"), "removed"),
    **dict.fromkeys(("fix", "fixed"), "fixed"),
    **dict.fromkeys(("security", "sec"), "security"),
    **dict.fromkeys(("chore", "internal", "test", "tests", "doc", "docs", "ci", "build"), "chore"),
}
# key order of [govctl] as upstream writes it; a new key goes after its predecessors
# fmt: off
META_ORDER = ("id", "title", "status", "created", "started", "completed", "refs", "depends_on",
              "tags")
# fmt: on
# the list fields `work add` appends to
ADDABLE = ("acceptance_criteria", "refs", "depends_on", "tags", "notes")


def toml_str(s: str) -> str:
    """A TOML basic string: JSON's escapes are valid TOML; TOML also bans a raw DEL."""
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_ml_str(s: str) -> str:
    """A TOML multi-line basic string starting on the next line: \"\"\"\n...\"\"\"."""
    body = "".join(
        c
        if c in "\n\t" or (ord(c) >= 0x20 and c != "\x7f" and c not in '"\\')
        else ("\\" + c if c in '"\\' else f"\\u{ord(c):04x}")
        for c in s
    )
    return f'"""\n{body}"""'


def parse_criterion(text: str) -> tuple[str, str]:
    """`"fix: handle B=1"` -> ("handle B=1", "fixed").

    The category prefix is required: a criterion without one used to become "added" silently,
    which is right for few of them. UsageError for a missing or unknown prefix, or no text.
    """
    head, sep, rest = text.partition(":")
    category = CATEGORY_PREFIXES.get(head.strip().lower()) if sep else None
    if category is None:
        why = f"unknown prefix {head.strip()!r}" if sep and " " not in head.strip() else "no prefix"
        raise UsageError(
            f"criterion {text!r}: {why}; write 'PREFIX: text' with PREFIX one of "
            f"{', '.join(CATEGORY_PREFIXES)} (e.g. 'fix: {rest.strip() if sep else text.strip()}')"
        )
    if not rest.strip():
        raise UsageError(f"criterion {text!r}: no text after the prefix")
    return rest.strip(), category


def append_table(doc: Any, content: Any, key: str, row: dict[str, Any]) -> None:
    """Append `row` to the array of tables content[key], separated by one blank line."""
    import tomlkit

    entry = tomlkit.table()
    for k, v in row.items():
        entry[k] = v
    aot = content.get(key)
    before = aot[-1].as_string() if aot else tomlkit.dumps(doc)
    if before.endswith("\n\n"):
        # the blank line after the previous entry separates it from what follows; keep one
        # after the new entry instead
        entry.add(tomlkit.nl())
    else:
        entry.trivia.indent = "\n"
    if aot is None:
        aot = tomlkit.aot()
        aot.append(entry)
        content[key] = aot  # new arrays of tables go last; tomlkit has no clean mid-table insert
    else:
        aot.append(entry)


def set_after(table: Any, key: str, value: Any, after: Sequence[str]) -> None:
    """Set `table[key]`, placing a new key after the last present key of `after`."""
    if key in table:
        table[key] = value
        return
    anchor = next((k for k in reversed(after) if k in table), None)
    container = getattr(table, "value", None)
    # tomlkit has no public "insert after"; Container._insert_after keeps the key order natural
    if anchor is not None and hasattr(container, "_insert_after"):
        container._insert_after(anchor, key, value)
    else:
        table[key] = value
