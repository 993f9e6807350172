"""``glm-config``: show and set a DSA model's IndexCache settings in its config.json.

    glm-config show MODEL_DIR [--format json] [--check]
    glm-config set MODEL_DIR index_topk_freq=4 [index_skip_topk_offset=2 ...] [--dry-run]

Exit codes: 0 success; 1 ``show --check`` found fields the installed transformers loads wrong (or
it cannot load the config at all); 2 bad input (nothing is written).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from glm_config._edit import SETTABLE, describe, parse_assignments, plan_edits, write_config
from glm_config._settings import read_config_json
from glm_config._show import inspect, render_json, render_text
from glm_config.errors import GlmConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="glm-config", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="DSA/IndexCache settings: config.json, loaded, should be")
    show.add_argument("model_dir", type=Path, help="model directory (or its config.json)")
    show.add_argument("--format", choices=("text", "json"), default="text")
    show.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a field loads wrong or the config does not load",
    )
    edit = sub.add_parser(
        "set",
        help="edit IndexCache settings in config.json (backup, atomic write)",
        epilog=f"settable keys: {', '.join(SETTABLE)}",
    )
    edit.add_argument("model_dir", type=Path, help="model directory (or its config.json)")
    edit.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    edit.add_argument("--dry-run", action="store_true", help="print the edits, write nothing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``glm-config`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return _show(args) if args.command == "show" else _set(args)
    except GlmConfigError as exc:
        print(f"glm-config: error: {exc}", file=sys.stderr)
        return 2


def _show(args: argparse.Namespace) -> int:
    result = inspect(args.model_dir)
    if args.format == "json":
        print(json.dumps(render_json(result), indent=2))
    else:
        print(render_text(result))
    return 1 if args.check and (result.needs_repair or result.load_error) else 0


def _set(args: argparse.Namespace) -> int:
    updates = parse_assignments(args.assignments)
    path, raw, text = read_config_json(args.model_dir)
    new, edits = plan_edits(raw, updates)
    if not edits:
        print(f"{path}: already set; nothing written")
        return 0
    for e in edits:
        print(f"{path}: {describe(e)}")
    if args.dry_run:
        print("dry run: nothing written")
        return 0
    try:
        backup = write_config(path, new, text)
    except OSError as exc:
        print(f"glm-config: error: cannot write {path}: {exc}; it is unchanged", file=sys.stderr)
        return 2
    print(f"backup: {backup}")
    print(f"wrote {path}")
    return 0
