"""From a simple command's words to what it runs: the executable, its arguments, wrappers peeled.

`A=1 env B=2 timeout 600 uv run --frozen --with x cpkv-validate --cp 4` runs `env`, `timeout`,
`uv` and, in the end, `cpkv-validate`: each is returned as an Invocation, outermost first, so each
is checked. Reserved words (`then`, `do`, `{`, …) are stripped; `for NAME in …`, `case` and
`[[ … ]]` run nothing that could be missing and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ._shell import Word

__all__ = ["Invocation", "PythonTarget", "invocations", "python_target"]

_PREFIX_WORDS = frozenset({"!", "{", "}", "then", "do", "else", "elif", "if", "while", "until"})
_PREFIX_WORDS |= {"fi", "done", "esac", "time"}
_SKIPPED = frozenset({"for", "select", "case", "[[", "coproc"})
PYTHON = re.compile(r"python(3(\.\d+)?)?")

# Wrappers: the options that take a value, and how many operands precede the wrapped command.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "command": (frozenset(), 0),
}
_PYTHON_VALUE_OPTIONS = frozenset({"-W", "-X", "--check-hash-based-pycs"})


@dataclass(frozen=True)
class Invocation:
    """One executable a command runs, with the words after it (a wrapper's include the rest).

    `line` is where the simple command starts (its prefixes may continue onto later lines).
    """

    exe: Word
    args: tuple[Word, ...]
    line: int


@dataclass(frozen=True)
class PythonTarget:
    """What `python …` runs: `-m module` (kind "module") or a script path (kind "script")."""

    kind: str
    word: Word


def _after_options(words: list[Word], value_options: Iterable[str]) -> list[Word]:
    """`words` from the first operand on: options skipped, with the value of each that takes one.

    `--` ends the options; `--opt=value` and `-xVALUE` carry their value in the same word.
    """
    value_options = set(value_options)
    i = 0
    while i < len(words) and words[i].text.startswith("-") and words[i].text != "-":
        if words[i].text == "--":
            return words[i + 1 :]
        i += 2 if words[i].text in value_options else 1
    return words[i:]


def invocations(
    words: list[Word], uv_run_value_options: Callable[[], Iterable[str]]
) -> list[Invocation]:
    """The executables `words` runs, outermost first ([] for an assignment or a `for` header).

    Args:
        words: one simple command, as `split_commands` returns it.
        uv_run_value_options: `uv run`'s options that take a value (asked only for `uv run`).
    """
    rest = list(words)
    while rest and not rest[0].dynamic and rest[0].text in _PREFIX_WORDS:
        rest = rest[1:]
    if not rest or rest[0].text in _SKIPPED:
        return []
    found: list[Invocation] = []
    while True:
        while rest and rest[0].assignment:  # `A=b cmd`: environment for cmd
            rest = rest[1:]
        if not rest:
            return found
        exe, args = rest[0], rest[1:]
        found.append(Invocation(exe, tuple(args), words[0].line))
        name = "" if exe.dynamic else exe.text
        if name == "uv" and args and args[0].text == "run":
            rest = _after_options(args[1:], uv_run_value_options())
            flags = {w.text for w in args[1 : len(args) - len(rest)]}
            if rest and flags & {"-m", "--module"}:  # `uv run -m mod`: python -m mod
                rest = [Word("python", rest[0].line), Word("-m", rest[0].line), *rest]
        elif name in _WRAPPERS:
            value_options, operands = _WRAPPERS[name]
            if name == "command" and any(w.text in ("-v", "-V") for w in args[:1]):
                return found  # `command -v x` asks, runs nothing
            rest = _after_options(list(args), value_options)[operands:]
        else:
            return found


def python_target(args: tuple[Word, ...]) -> PythonTarget | None:
    """What `python ARGS` runs: `-m module`, a script, or None (`-c code`, stdin, `--version`)."""
    i = 0
    while i < len(args):
        text = args[i].text
        if text == "-m" and i + 1 < len(args):
            return PythonTarget("module", args[i + 1])
        if text.startswith("-m") and len(text) > 2:
            return PythonTarget("module", Word(text[2:], args[i].line, args[i].dynamic))
        if text.startswith("-c") or text in ("-", "--version", "-V", "-h"):
            return None
        if not text.startswith("-"):
            return PythonTarget("script", args[i])
        i += 2 if text in _PYTHON_VALUE_OPTIONS else 1
    return None
