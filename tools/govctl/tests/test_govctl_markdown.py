"""Links in free text: not inside Markdown code, not placeholders; held equal to markdown-it-py.

The oracle is markdown-it-py (a CommonMark parser, installed with `rich`) with its indented-code
rule off, as `_markdown` documents: the link targets it leaves in text tokens, outside code
spans and fences, are the links.
"""

from __future__ import annotations

import re

import pytest
from _govctl_support import MAX_EXAMPLES
from govctl._markdown import code_mask
from govctl._mentions import LINK_RE, bare_mentions, links
from govctl._render import _links as render_links
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

MD = MarkdownIt("commonmark").disable("code")


def oracle_links(text: str) -> list[str]:
    """`[[ID]]` targets in the text tokens markdown-it produces (code tokens excluded)."""
    parts: list[str] = []
    for tok in MD.parse(text):
        if tok.type != "inline":
            continue
        for child in tok.children or ():
            if child.type == "text":
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append("\n")
            else:  # code_inline and anything else separates text runs
                parts.append("\0")
        parts.append("\0")
    return LINK_RE.findall("".join(parts))


TABLE = [
    ("see [[RFC-0001]]", ["RFC-0001"]),
    ("`[[RFC-0001]]`", []),
    ("``[[RFC-0001]]``", []),
    ("`` a ` [[RFC-0001]] ``", []),  # a single backtick inside a double-backtick span
    ("``[[RFC-0001]]`", ["RFC-0001"]),  # runs of different length: no span
    ("\\`[[RFC-0001]]`", ["RFC-0001"]),  # escaped opener: the second backtick has no partner
    ("\\\\`[[RFC-0001]]`", []),  # escaped backslash: the backtick opens a span
    ("`a\n[[RFC-0001]]`", []),  # a span crosses a line break
    ("`a\n\n[[RFC-0001]]`", ["RFC-0001"]),  # but not a blank line
    ("```\n[[ADR-0002]]\n```\n[[ADR-0003]]", ["ADR-0003"]),
    ("~~~toml\n[[ADR-0002]]\n~~~", []),
    ("```\n[[ADR-0002]]\n", []),  # an unclosed fence runs to the end
    ("````\n```\n[[ADR-0002]]\n````\n[[ADR-0003]]", ["ADR-0003"]),  # closes at >= 4 only
    ("``` a`b\n[[ADR-0002]]", ["ADR-0002"]),  # backtick in the info string: not a fence
    ("text\n    ```\n[[ADR-0002]]", ["ADR-0002"]),  # indented 4: continues the paragraph
    ("\n    ```\n[[ADR-0002]]\n    ```", []),  # after a blank line: a fence
    ("[[RFC-NNNN]] [[WI-YYYY-MM-DD-NNN]] [[ADR-XXXX]]", []),  # placeholders: no digit
    ("[[RFC-12]]", ["RFC-12"]),  # a digit makes it a ref, malformed or not
    ("[[RFC-0001:C-KV-LOCAL]]", ["RFC-0001:C-KV-LOCAL"]),
]


@pytest.mark.parametrize(("text", "want"), TABLE)
def test_links_table(text: str, want: list[str]) -> None:
    assert list(links(text)) == want


@pytest.mark.parametrize(("text", "want"), TABLE)
def test_table_agrees_with_markdown_it(text: str, want: list[str]) -> None:
    """The hand-written table is CommonMark's reading (placeholders aside, a rule of ours)."""
    assert [t for t in oracle_links(text) if re.search(r"\d", t)] == want


ATOMS = [
    "[[RFC-0001]]",
    "[[ADR-0002]]",
    "[[WI-2026-01-01-001]]",
    "`",
    "``",
    "```",
    "~~~",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    " ",
    "    ",
    "a",
    "b c",
    "\\`",
    "\\\\",
]


@settings(max_examples=MAX_EXAMPLES * 10, deadline=None)
@given(st.lists(st.sampled_from(ATOMS), max_size=30).map("".join))
def test_links_agree_with_markdown_it(text: str) -> None:
    assert list(links(text)) == oracle_links(text)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.text(alphabet=st.sampled_from(["`", "~", "\n", " ", "a", "\\"]), max_size=40))
def test_mask_keeps_offsets_and_line_breaks(text: str) -> None:
    mask = code_mask(text)
    assert len(mask) == len(text)
    assert all(m == t or m == " " for m, t in zip(mask, text, strict=True))
    assert [i for i, c in enumerate(mask) if c == "\n"] == [
        i for i, c in enumerate(text) if c == "\n"
    ]


def test_render_leaves_code_and_placeholders_alone() -> None:
    text = "See [[WI-2026-01-01-001]], `[[RFC-0001]]` and [[RFC-NNNN]]."
    assert render_links(text) == (
        "See [WI-2026-01-01-001](WI-2026-01-01-001.md), `[[RFC-0001]]` and [[RFC-NNNN]]."
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("after WI-2026-01-01-001 landed", ["WI-2026-01-01-001"]),
        ("[[WI-2026-01-01-001]] is a link", []),
        ("`ADR-0002` in code is still a mention", ["ADR-0002"]),  # as upstream reads it
        ("RFC-0001:C-KV-LOCAL and RFC-0001", ["RFC-0001:C-KV-LOCAL", "RFC-0001"]),
        ("XADR-0002 and ADR-00021 are not IDs", []),  # word boundaries
        ("WI-2026-01-01-A3F9 is not an ID (upper-case hex)", []),
    ],
)
def test_bare_mentions_table(text: str, want: list[str]) -> None:
    assert [m.group(1) for m in bare_mentions(text)] == want
