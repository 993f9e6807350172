"""SGLang's own server arguments, checked without importing SGLang: names, values, choices.

``cpkv-serve`` hands every argument it does not own to SGLang. A misspelt one (``--cp-stratgy``) or
a bad choice (``--cp-strategy bogus``) used to surface only after SGLang's import, about 50 s on a
2-core box, as SGLang's 479-line usage text. ``sglang_options.json`` is SGLang's ``sglang serve``
parser (``argparse`` + ``ServerArgs.add_cli_args``) read once by ``scripts/gen_sglang_options.py``:
every option's strings, how many values it takes, its type (``int``/``float``; other converters are
left to SGLang) and its choices (facts of the parser; no text of SGLang's is stored: ``--help``
lists the options from the table, ``--help-sglang`` asks SGLang for its own descriptions).
:func:`check_sglang_argv` rebuilds an ``argparse`` parser from it and parses argv with it, so
abbreviations, ``--opt=value``, ambiguity and value counts follow argparse's own rules; a refusal
is one line. The check applies only when the installed sglang is the release the table was read
from (any other release: SGLang's parser decides, after its import).
``tests/test_upstream_sglang_options.py`` holds the table equal to SGLang's parser and this check's
verdicts equal to SGLang's on generated command lines.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from cpkv_cli import InputError, printable

__all__ = [
    "TABLE",
    "build_parser",
    "check_sglang_argv",
    "options_table",
    "print_sglang_help",
    "sglang_help",
    "strip_model_type",
    "table_applies",
]

TABLE = Path(__file__).with_name("sglang_options.json")
_TYPES = {"int": int, "float": float}


@functools.cache
def options_table() -> dict[str, Any]:
    """The table: ``{"sglang": version, "python": ..., "columns": ..., "options": [...]}``."""
    return json.loads(TABLE.read_text(encoding="utf-8"))


def table_applies(installed: str | None) -> bool:
    """Whether the table describes the installed sglang (same version string)."""
    return installed is not None and installed == options_table()["sglang"]


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


def build_parser() -> argparse.ArgumentParser:
    """An argparse parser with SGLang's options, their value counts, types and choices."""
    parser = _Parser(prog="sglang serve", add_help=False)
    for opt in options_table()["options"]:
        if opt["nargs"] == 0:
            parser.add_argument(*opt["strings"], action="store_const", const=True)
        else:
            parser.add_argument(
                *opt["strings"],
                nargs=opt["nargs"],
                type=_TYPES.get(opt["type"]),
                choices=opt["choices"],
            )
    return parser


def strip_model_type(argv: list[str]) -> tuple[list[str], str]:
    """argv without ``--model-type X`` (``sglang serve`` takes it off first), and X."""
    out, kind, i = [], "auto", 0
    while i < len(argv):
        if argv[i] == "--model-type" and i + 1 < len(argv):
            kind, i = argv[i + 1], i + 2
            continue
        if argv[i].startswith("--model-type="):
            kind = argv[i].split("=", 1)[1]
        else:
            out.append(argv[i])
        i += 1
    return out, kind


def check_sglang_argv(argv: Sequence[str], installed: str | None, own: Sequence[str] = ()) -> None:
    """Refuse what SGLang's parser would refuse in ``argv`` (SGLang's arguments only).

    Args:
        argv: SGLang's arguments, cpkv's removed, the positional model path already made
            ``--model-path``.
        installed: the installed sglang version; the check is skipped unless it is the table's.
        own: cpkv-serve's own option strings: an unknown option closest to one of them is a
            misspelt cpkv flag (``--dry-runn``), and the line suggests it, not an SGLang option.

    Raises:
        InputError: an unknown or ambiguous option, a value it cannot take, a value missing.
    """
    if not table_applies(installed):
        return
    args, kind = strip_model_type(list(argv))
    if kind not in ("auto", "llm") or "-h" in args or "--help" in args:
        return  # another serve backend's arguments; help is printed elsewhere
    try:
        build_parser().parse_args(args)
    except _Refused as err:
        raise InputError(_message(str(err), args, own)) from None


def _message(error: str, args: list[str], own: Sequence[str] = ()) -> str:
    hint = ""
    version = options_table()["sglang"]
    if error.startswith("unrecognized arguments"):
        names = [s for opt in options_table()["options"] for s in opt["strings"]]
        for arg in args:
            name = arg.split("=", 1)[0]
            if name.startswith("--") and not any(n.startswith(name) for n in names):
                close = difflib.get_close_matches(name, [*own, *names], n=1)
                if close and close[0] in own:
                    return (
                        f"unrecognized argument {printable(name)}; did you mean {close[0]}? "
                        f"(a cpkv-serve flag; cpkv-serve --cpkv-help lists them)"
                    )
                hint = f"; did you mean {close[0]}?" if close else ""
                break
    return (
        f"SGLang would refuse this: {_short(error)}{hint} (sglang {version}'s "
        f"arguments, checked before its import; cpkv-serve --help lists them)"
    )


def _short(error: str, limit: int = 240) -> str:
    """argparse's message on one line, cut when long (an ambiguous ``--m`` lists 40 options)."""
    text = " ".join(error.split()) if error.isprintable() else printable(error, limit)
    return text if len(text) <= limit else f"{text[: limit - 40]}... ({len(text)} characters)"


def sglang_help() -> str:
    """``sglang serve``'s options as the table knows them: strings, value and choices, one option
    a line (SGLang's own descriptions: ``cpkv-serve --help-sglang``, which imports SGLang)."""
    table = options_table()
    lines = [
        f"options of sglang {table['sglang']}'s server (read from its parser; their "
        f"descriptions: cpkv-serve --help-sglang, which imports SGLang):"
    ]
    for opt in table["options"]:
        if opt["strings"] == ["-h", "--help"]:
            continue
        nargs = opt["nargs"]
        value = "" if nargs == 0 else " VALUE" if nargs is None else f" {nargs}"
        if opt["choices"]:
            value = " {" + ",".join(map(str, opt["choices"])) + "}"
        lines.append(f"  {', '.join(opt['strings'])}{value}")
    return "\n".join(lines) + "\n"


def print_sglang_help(installed: str | None) -> bool:
    """Print :func:`sglang_help` when the table is the installed release's; whether it did."""
    if not table_applies(installed):
        return False
    print(sglang_help(), end="")
    return True
