"""Where Markdown code lies in a text: fenced code blocks and inline code spans.

Work item text is Markdown. `[[RFC-0001]]` written inside code is an example of the syntax,
not a link, so the link rules read the text through `code_mask`, which blanks every character
of code and keeps the offsets and newlines of everything else.

The rules are CommonMark's for a document without containers (lists, block quotes) and without
indented code blocks:

- a fence is a line of >= 3 backticks or tildes after any indentation (a backtick fence's info
  string holds no backtick; indented by more than 3 spaces, it cannot interrupt a paragraph and
  continues it instead); it closes at a line of the same character, at least as long,
  followed only by blanks, else at the end of the text;
- a code span opens at a run of n backticks and closes at the next run of exactly n; a run with
  no partner is literal text; a backslash escapes the backtick after it;
- a code span does not cross a blank line or a fence (either ends the paragraph).

Indented code blocks (4 spaces) are not recognised: wrapped TOML strings are often indented, and
reading them as code would hide real links. Without them, indentation no longer keeps a line
from being a fence, as in markdown-it with its indented-code rule off. A test holds this module
equal to markdown-it-py, a CommonMark parser, run that way.
"""

from __future__ import annotations

import re
import string

_FENCE_OPEN_RE = re.compile(r"([ \t]*)(`{3,}|~{3,})(.*)")
_LINE_RE = re.compile(r"[^\n]*\n|[^\n]+")  # str.splitlines would also split at \x0c, \u2028...
_BACKTICKS_RE = re.compile(r"`+")
_ASCII_PUNCT = frozenset(string.punctuation)


def code_mask(text: str) -> str:
    """`text` with each character inside code replaced by a space; newlines are kept.

    Offsets into the result are offsets into `text`, so a match found in the mask can be
    reported at its place in the original.
    """
    if "`" not in text and "~~~" not in text:
        return text
    out: list[str] = []
    para: list[str] = []  # lines of the current paragraph (spans may cross its line breaks)
    fence: str | None = None  # the opening run of the open fence
    for line in _LINE_RE.findall(text):
        body = line.rstrip("\r\n")
        if fence is not None:
            out.append(_blank(line))
            closing = body.lstrip(" \t")
            if closing.startswith(fence) and closing.rstrip(" \t").strip(fence[0]) == "":
                fence = None
            continue
        m = _FENCE_OPEN_RE.fullmatch(body)
        # a fence interrupts a paragraph only when indented <= 3 (deeper, the line continues it)
        if (
            m
            and not (m.group(2)[0] == "`" and "`" in m.group(3))
            and (not para or _columns(m.group(1)) <= 3)
        ):
            out.append(_mask_spans("".join(para)))
            para = []
            out.append(_blank(line))
            fence = m.group(2)
        elif body.strip(" \t") == "":
            out.append(_mask_spans("".join(para)))
            para = []
            out.append(line)
        else:
            para.append(line)
    out.append(_mask_spans("".join(para)))
    return "".join(out)


def _columns(indent: str) -> int:
    """Width of leading blanks, a tab advancing to the next multiple of 4 (CommonMark)."""
    col = 0
    for c in indent:
        col = col + 4 - col % 4 if c == "\t" else col + 1
    return col


def _blank(s: str) -> str:
    """Spaces for every character of `s` but line breaks."""
    return re.sub(r"[^\r\n]", " ", s)


def _mask_spans(para: str) -> str:
    """One paragraph with its inline code spans (backticks included) blanked."""
    if "`" not in para:
        return para
    chars = list(para)
    i, n = 0, len(para)
    while i < n:
        c = para[i]
        if c == "\\" and i + 1 < n and para[i + 1] in _ASCII_PUNCT:
            i += 2  # an escaped character (`\\` too) is literal: an escaped backtick opens nothing
            continue
        if c != "`":
            i += 1
            continue
        run = _BACKTICKS_RE.match(para, i)
        assert run is not None
        width = run.end() - i
        end = _closing_run(para, run.end(), width)
        if end is None:
            i = run.end()  # no partner: the run is literal text
            continue
        for k in range(i, end):
            if chars[k] not in "\r\n":
                chars[k] = " "
        i = end
    return "".join(chars)


def _closing_run(para: str, start: int, width: int) -> int | None:
    """End offset of the first run of exactly `width` backticks at or after `start`."""
    for m in _BACKTICKS_RE.finditer(para, start):
        if m.end() - m.start() == width:
            return m.end()
    return None
