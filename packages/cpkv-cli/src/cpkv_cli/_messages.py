"""Errors a command reports in one line, and the helpers that make any text one line."""

from __future__ import annotations

import sys


class InputError(ValueError):
    """Bad input that is not a usage error (a file, an environment variable, a value out of
    range): reported as one ``prog: error: ...`` line naming the input and the fix, exit 2."""


class OutputError(Exception):
    """stdout cannot be written (a full disk, a file over its size limit, ``> /dev/full``, a
    closed descriptor): the output would be incomplete, so the command says so in one line."""


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(text.split())


def printable(text: str, limit: int = 200) -> str:
    """``text`` as typed when it is printable and short, else its ``repr`` (cut), for messages."""
    if text.isprintable() and len(text) <= limit:
        return text
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[: limit - 40]}... ({len(text)} characters)"


def refuse(prog: str, err: BaseException | str) -> int:
    """Print ``prog: error: <err>`` as one line on stderr; return exit status 2."""
    print(f"{prog}: error: {one_line(str(err))}", file=sys.stderr)
    return 2
