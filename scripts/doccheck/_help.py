"""The subcommands a `--help` page lists, for the two layouts our CLIs print.

argparse: the usage line shows a subparser group as `{a,b} ...` or `METAVAR ...` (a positional
with `nargs="+"` reads `X [X ...]`, one with choices `{a,b}` without the dots). Under
`positional arguments:` the group is `  {a,b}` or `  METAVAR`, followed by one line per
subcommand indented four spaces, `    name (alias)  help`.
click/typer (`hf`): sections such as `Commands:` or `Main commands:` with one `  name  help` line
each (`[alias: x]` in the help), or the same inside rich's boxes.
"""

from __future__ import annotations

import re

__all__ = ["listed_subcommands"]

_SECTION = re.compile(r"^\S.*:\s*$")  # `positional arguments:`, `Main commands:`, …
_ARGPARSE_GROUP = re.compile(r"(?<![\[\w])(\{[^}]*\}|[^\s\[\]{}]+) \.\.\.")
_ARGPARSE_ENTRY = re.compile(r"^    ([^\s({]+)(?: \(([^)]*)\))?(?:\s{2,}|$)")
_CLICK_HEADER = re.compile(r"^(?:[A-Z][\w ]*)?[Cc]ommands:\s*$")
_CLICK_ENTRY = re.compile(r"^  ([^\s-]\S*)(?:\s{2,}(.*))?$")
_BOX_HEADER = re.compile(r"^╭─ (?:[\w ]*)?[Cc]ommands ─")
_BOX_ENTRY = re.compile(r"^│ ([^\s-]\S*)(?:\s{2,}(.*))?")
_ALIAS = re.compile(r"\[alias(?:es)?: ([^\]]+)\]")


def listed_subcommands(text: str) -> tuple[str, ...]:
    """Subcommand names (aliases included) on a help page, in order; () when it lists none."""
    names = _argparse_subcommands(text) + _click_subcommands(text)
    return tuple(dict.fromkeys(names))


def _argparse_subcommands(text: str) -> list[str]:
    usage = text.split("\n\n", 1)[0] if text.lstrip().startswith("usage:") else ""
    group = _ARGPARSE_GROUP.search(" ".join(usage.split()))
    if not group:
        return []
    metavar = group[1]
    names = [n.strip() for n in metavar.strip("{}").split(",")] if metavar[0] == "{" else []
    in_group = False
    for line in text.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            in_group = line.split()[0] == metavar
        elif in_group and (m := _ARGPARSE_ENTRY.match(line)):
            names += [m[1], *(a.strip() for a in (m[2] or "").split(",") if a.strip())]
        elif _SECTION.match(line):
            in_group = False
    return names


def _click_subcommands(text: str) -> list[str]:
    names: list[str] = []
    section = ""
    for line in text.splitlines():
        if _SECTION.match(line) or _BOX_HEADER.match(line) or line.startswith("╰"):
            section = line.strip()
        elif not (_CLICK_HEADER.match(section) or _BOX_HEADER.match(section)):
            continue
        elif m := _CLICK_ENTRY.match(line) or _BOX_ENTRY.match(line):
            names.append(m[1])
            aliases = _ALIAS.findall(m[2] or "")
            names += [a.strip() for found in aliases for a in found.split(",")]
    return names
