"""Relative links in Markdown that point at nothing."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["broken_links"]

LINK = re.compile(r"\]\(([^)\s]+)\)")


def broken_links(root: Path, files: dict[str, str]) -> list[str]:
    """`file:line: broken link TARGET` for each relative link of `files` that resolves to nothing.

    Args:
        files: {path relative to `root`: Markdown text}.
    """
    bad = []
    for md, text in files.items():
        for match in LINK.finditer(text):
            target = match.group(1).split("#")[0]
            if not target or target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (root / Path(md).parent / target).exists():
                line = text.count("\n", 0, match.start()) + 1
                bad.append(f"{md}:{line}: broken link {match.group(1)}")
    return bad
