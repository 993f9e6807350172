"""``glm-config``: show and set a DSA model's IndexCache settings in its config.json.

    glm-config show MODEL_DIR [--format json] [--check]
    glm-config set MODEL_DIR index_topk_freq=4 [index_skip_topk_offset=2 ...] [--dry-run] [--force]

Exit codes: 0 success; 1 ``show --check`` found fields the installed transformers loads wrong (or
it cannot load the config at all); 2 bad input, one line on stderr naming it and the fix (nothing
is written); 130 interrupted (Ctrl-C, one line). ``set`` edits only the values it changes (every
other byte of the file is kept), writes nothing when nothing changes, backs the old file up
first, and refuses a config.json that already has errors or is read-only unless ``--force`` is
given, and one on a read-only filesystem whatever is given (it names the filesystem). A reader
that closes stdout early (``| head -1``) ends the output quietly; the command still finishes with
its own exit status.
"""

from __future__ import annotations

import argparse
import errno
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cpkv_cli import OneLineParser, emit, run

from glm_config._edit import SETTABLE, describe, parse_assignments, plan_edits
from glm_config._files import (
    read_config_json,
    read_only,
    read_only_filesystem,
    replace_config,
)
from glm_config._jsonedit import edit_text
from glm_config._settings import is_dsa
from glm_config._show import inspect, render_json, render_text
from glm_config._validate import file_errors, summary
from glm_config.errors import GlmConfigError, NotDsaError, WriteRefusedError


class _IntermixedParser(OneLineParser):
    """A sub-command parser that takes its options anywhere among its positionals.

    ``argparse`` matches all of a command's positionals at the first run of them, so in
    ``set DIR --force index_topk_freq=2`` the assignment after ``--force`` was an "unrecognized
    argument"; ``parse_known_intermixed_args`` reads the options first, then the positionals.
    """

    _intermixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._intermixing:  # parse_known_intermixed_args' own two passes
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="glm-config", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_IntermixedParser)
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
        help="edit IndexCache settings in config.json (minimal diff, backup, atomic write)",
        epilog=f"settable keys: {', '.join(SETTABLE)}",
    )
    edit.add_argument("model_dir", type=Path, help="model directory (or its config.json)")
    edit.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    edit.add_argument("--dry-run", action="store_true", help="print the edits, write nothing")
    edit.add_argument(
        "--force",
        action="store_true",
        help="edit a config.json that already has errors, or a read-only one (it stays read-only)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``glm-config`` console script; returns the exit code.

    Ctrl-C (also while ``show`` imports transformers, seconds of the run) is one line and exit
    130; a ``set`` interrupted mid-write leaves the old file (see ``_files``).
    """
    return run("glm-config", lambda: _main(argv), errors=(GlmConfigError,))


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    return _show(args) if args.command == "show" else _set(args)


def _show(args: argparse.Namespace) -> int:
    result = inspect(args.model_dir)
    if args.format == "json":
        emit(json.dumps(render_json(result), indent=2))
    else:
        emit(render_text(result))
    return 1 if args.check and (result.needs_repair or result.load_error) else 0


def _set(args: argparse.Namespace) -> int:
    updates = parse_assignments(args.assignments)
    path, raw, text = read_config_json(args.model_dir)
    if not is_dsa(raw):
        raise NotDsaError(
            f"{path}: model_type {raw.get('model_type')!r} has no DSA indexer (no index_topk); "
            f"refusing to add IndexCache settings to it."
        )
    existing = file_errors(raw, text)
    if existing and not args.force:
        raise WriteRefusedError(
            f"{path} already has {summary(existing)} glm-config set edits a valid file only; "
            f"pass --force to edit it anyway (errors the edit does not touch stay)."
        )
    new, edits = plan_edits(raw, updates, allowed=existing)
    new_text, redumped = edit_text(text, new)
    if not edits or new_text == text:
        emit(f"{path}: already set; nothing written")
        return 0
    if (fs := read_only_filesystem(path)) is not None:
        raise WriteRefusedError(
            f"{path} is on a read-only filesystem, {fs} (EROFS): no file mode or --force can "
            f"write there. Fix: remount it read-write, or copy the model directory to a "
            f"writable place and edit the copy."
        )
    if (why := read_only(path)) and not args.force:
        raise WriteRefusedError(
            f"{path} is read-only ({why}); refusing to replace it. Fix: make it writable "
            f"(chmod u+w), or pass --force (the new file keeps the same mode)."
        )
    for e in edits:
        emit(f"{path}: {describe(e)}")
    if existing:
        emit(f"warning: --force: editing despite {summary(existing)}")
    if redumped:
        emit(f"note: the whole of {path} is rewritten: its layout could not be edited in place")
    if args.dry_run:
        emit("dry run: nothing written")
        return 0
    try:
        written = replace_config(path, text, new_text)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno == errno.EROFS:  # remounted read-only since the check above
            why += f" ({read_only_filesystem(path) or 'its filesystem'} is read-only)"
        raise WriteRefusedError(
            f"cannot write {path}: {why}; it is unchanged and no backup is left. Fix: free space "
            f"or fix permissions in {path.parent}, then run it again."
        ) from None
    emit(f"backup: {written.backup}")
    for note in written.notes:
        emit(f"note: {note}")
    emit(f"wrote {path}")
    return 0
