"""Fenced code blocks of a Markdown file, and the shell script each shell block holds.

Which blocks are shell (the rule, also in `scripts/check-doc-links --help`):
- tagged `bash`, `sh`, `shell`, `console`, `shell-session` or `zsh`: shell;
- tagged anything else (`toml`, `json`, `python`, `text`, …): not shell, skipped;
- untagged: shell. Guessing from the text would miss exactly what this check exists for: a
  placeholder or a typo makes a command look like prose. Output, listings and diagrams are tagged
  `text`; a problem found in an untagged block says so.

In a block where some line starts with a `$ ` prompt, only the prompted lines (and the lines
they continue onto with `\\`) are commands; the rest is their output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SHELL_TAGS", "CodeBlock", "code_blocks"]

SHELL_TAGS = frozenset({"bash", "sh", "shell", "console", "shell-session", "shellsession", "zsh"})

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_PROMPT = re.compile(r"^\s*\$( |$)")


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block.

    Attributes:
        tag: the info string's first word, lower-case (`""` when untagged).
        first_line: the Markdown line of the block's first content line.
        lines: the content lines, the fence's indentation removed.
    """

    tag: str
    first_line: int
    lines: tuple[str, ...]

    @property
    def is_shell(self) -> bool:
        return self.tag in SHELL_TAGS or not self.tag

    def script(self) -> str:
        """The shell text, one line per content line (so line k is Markdown line first_line + k).

        Prompts are removed; with prompts present, output lines become blank.
        """
        if not any(_PROMPT.match(line) for line in self.lines):
            return "\n".join(self.lines)
        out, continued = [], False
        for line in self.lines:
            if m := _PROMPT.match(line):
                out.append(line[m.end() :])
            else:
                out.append(line if continued else "")
            continued = out[-1].endswith("\\")
        return "\n".join(out)


def code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block of `text` (CommonMark fences: ``` or ~~~, closed by a longer-or-equal
    run of the same character; an unclosed fence runs to the end of the document)."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        tag = re.match(r"\{?\.?([\w+-]*)", m["info"].strip())[1].lower()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body, j = [], i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(_dedent(lines[j], indent))
            j += 1
        blocks.append(CodeBlock(tag, i + 2, tuple(body)))
        i = j + 1
    return blocks


def _dedent(line: str, width: int) -> str:
    """`line` without up to `width` leading spaces (a fence nested in a list item is indented)."""
    strip = len(line) - len(line.lstrip(" "))
    return line[min(strip, width) :]
