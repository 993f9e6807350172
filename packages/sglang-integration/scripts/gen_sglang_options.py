"""Read SGLang's ``sglang serve`` parser into ``src/sglang_cpkv/serve/sglang_options.json``
(names, value counts, types, choices; one option a line). No text of SGLang's is stored.

``cpkv-serve`` checks SGLang's argument names, value counts, types and choices before importing
SGLang (``sglang_cpkv.serve._sglang_options``), and lists SGLang's options in its ``--help``
from this table. Run it after changing the locked sglang; ``tests/test_upstream_sglang_options.py``
fails until the table is the installed SGLang's::

    uv run --frozen python packages/sglang-integration/scripts/gen_sglang_options.py

(``--print`` prints it as JSON instead of writing it: the test reads SGLang's parser in a
fresh process, as cpkv-serve's SGLang builds it, not in one other tests have imported into.)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

COLUMNS = 100
#: Options whose choices are registries a plugin may extend (SGLang lists whatever registered
#: before it built the parser, in registration order): their values are left to SGLang, and the
#: help lists them sorted.
REGISTRIES = frozenset({"--reasoning-parser", "--tool-call-parser"})
PACKAGE = Path(__file__).parents[1] / "src" / "sglang_cpkv" / "serve"
OUT = PACKAGE / "sglang_options.json"


def sglang_parser() -> argparse.ArgumentParser:
    """The parser ``sglang serve`` builds for a language model (``prepare_server_args``)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    for action in parser._actions:
        # a set's order changes with the hash seed, a registry's with what registered first:
        # sorted, for one table and one help text in every process (argparse tests `in`)
        unordered = isinstance(action.choices, (set, frozenset, type({}.keys())))
        if unordered or REGISTRIES & set(action.option_strings):
            action.choices = sorted(action.choices)
    return parser


def _type(action: argparse.Action) -> str | None:
    """``int``/``float`` when argparse converts with those, ``str`` when it keeps the text,
    ``other`` for SGLang's own converters (their values are left to SGLang)."""
    if action.type in (int, float):
        return action.type.__name__
    return "str" if action.type in (None, str) else "other"


def describe(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every option: strings, nargs, type, choices (as argparse compares them, in order)."""
    out = []
    for a in parser._actions:
        kind = _type(a)
        choices = None
        if a.choices is not None and kind in ("str", "int", "float"):
            choices = None if REGISTRIES & set(a.option_strings) else list(a.choices)
        out.append(
            {"strings": list(a.option_strings), "nargs": a.nargs, "type": kind, "choices": choices}
        )
    return out


def table() -> dict[str, Any]:
    """The options table of the installed SGLang."""
    parser = sglang_parser()
    head = {
        "sglang": importlib.metadata.version("sglang"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "columns": COLUMNS,
        "options": describe(parser),
    }
    return head


def dumps(head: dict[str, Any]) -> str:
    """JSON with one option a line (a reviewable diff when SGLang adds or changes one)."""
    lines = [json.dumps(o) for o in head["options"]]
    rest = {k: v for k, v in head.items() if k != "options"}
    return json.dumps(rest)[:-1] + ', "options": [\n' + ",\n".join(lines) + "\n]}\n"


def main() -> int:
    head = table()
    if sys.argv[1:] == ["--print"]:  # for the test: this process's reading, written nowhere
        print(json.dumps({"table": dumps(head)}))
        return 0
    OUT.write_text(dumps(head), encoding="utf-8")
    print(f"wrote {OUT} ({len(head['options'])} options) for sglang {head['sglang']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
