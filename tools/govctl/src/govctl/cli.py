"""Command line: `govctl check` and `govctl work ...`.

`main()` parses argv into a `ParseResult`; `execute()` runs it (building a `Checker` for
`check`) and returns the exit status: 0 clean, 1 errors (or warnings with -W), 2 usage errors
(one line, as in every cpkv command: `cpkv_cli`), 130 interrupted (Ctrl-C, one line). A reader
that closes stdout early (`| head -1`) ends the output quietly; the status stays the command's.
Heavy imports (tomlkit, jsonschema) happen inside the commands that need them.
"""

from __future__ import annotations

import argparse
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cpkv_cli import OneLineParser, QuietStdout, run

from govctl._config import ID_STRATEGIES
from govctl._edit import ADDABLE
from govctl.errors import GovctlError, UsageError

STATUSES = ("queue", "active", "done", "cancelled")


@dataclass
class ParseResult:
    """The parsed command line.

    Attributes:
        command: "check", "version", or "work <verb>" (e.g. "work new", "work journal add").
        paths: `check` PATHS (files or directories); empty = gov/work of the repository.
        format: output format of `check` / `work list` / `work show`.
        deny_warnings: `check -W`: warnings fail the run.
        opts: the remaining options of a `work` command.
    """

    command: str
    paths: list[Path] = field(default_factory=list)
    format: str = "text"
    deny_warnings: bool = False
    opts: dict[str, Any] = field(default_factory=dict)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="govctl", description="Validate and author governance work items (gov/work/*.toml)."
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", metavar="{check,work}")
    c = sub.add_parser("check", help="validate work items (schema, lifecycle, dates, refs, cycles)")
    c.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATHS",
        help="files or directories (default: gov/work of the repository)",
    )
    c.add_argument("--format", choices=("text", "json", "github"), default="text")
    c.add_argument("-W", "--deny-warnings", action="store_true", help="exit 1 on warnings too")

    w = sub.add_parser("work", help="author work items").add_subparsers(
        dest="verb", metavar="VERB", required=True
    )
    n = w.add_parser("new", help='create gov/work/<date>-<slug>.toml: govctl work new "Title"')
    n.add_argument("title")
    n.add_argument(
        "--active", action="store_true", help="start it now (status active, started today)"
    )
    n.add_argument("--date", help="creation date YYYY-MM-DD (default: today)")
    n.add_argument(
        "--description", "-d", help="what and why (default: a placeholder, warned by check)"
    )
    n.add_argument(
        "--ref",
        action="append",
        default=[],
        dest="refs",
        help="RFC-NNNN, ADR-NNNN or WI-...; repeatable",
    )
    n.add_argument("--depends-on", action="append", default=[], help="a work item ID; repeatable")
    n.add_argument("--tag", action="append", default=[], dest="tags", help="repeatable")
    n.add_argument(
        "--criterion",
        "-c",
        action="append",
        default=[],
        dest="criteria",
        help='acceptance criterion, "category: text" (add/fix/change/remove/chore...); repeatable',
    )
    n.add_argument(
        "--id-strategy",
        choices=ID_STRATEGIES,
        help="override gov/config.toml [work_item] id_strategy",
    )
    m = w.add_parser("move", help="change status: queue -> active -> done, or -> cancelled")
    m.add_argument("id")
    m.add_argument("status", choices=STATUSES)
    m.add_argument("--date", help="date stamped into started/completed (default: today)")
    t = w.add_parser("tick", help="set the status of the acceptance criterion matching PATTERN")
    t.add_argument("id")
    t.add_argument(
        "pattern", help="exact text, else a case-insensitive substring matching one criterion"
    )
    t.add_argument("-s", "--status", choices=("done", "cancelled"), default="done")
    j = w.add_parser("journal", help="journal entries").add_subparsers(
        dest="jverb", metavar="add", required=True
    )
    ja = j.add_parser("add", help="append a [[content.journal]] entry")
    ja.add_argument("id")
    ja.add_argument("text")
    ja.add_argument("--scope", help="topic/module of the entry")
    ja.add_argument("--date", help="YYYY-MM-DD (default: today)")
    a = w.add_parser(
        "add", help="append to a list: acceptance_criteria, refs, depends_on, tags, notes"
    )
    a.add_argument("id")
    a.add_argument("field", choices=ADDABLE)
    a.add_argument("value")
    ls = w.add_parser("list", help="list work items")
    ls.add_argument("--status", choices=STATUSES, action="append", help="repeatable")
    ls.add_argument("--format", choices=("text", "json"), default="text")
    s = w.add_parser("show", help="print one work item")
    s.add_argument("id")
    s.add_argument("--format", choices=("text", "json"), default="text")
    r = w.add_parser("render", help="print one work item as Markdown")
    r.add_argument("id")
    r.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")
    return p


def parse(argv: list[str] | None) -> ParseResult:
    """argv -> ParseResult; argparse exits with status 2 on bad usage."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.version:
        return ParseResult("version")
    if ns.cmd is None:
        parser.error("a command is required: check or work")
    if ns.cmd == "check":
        return ParseResult(
            "check", paths=ns.paths, format=ns.format, deny_warnings=ns.deny_warnings
        )
    verb = "journal add" if ns.verb == "journal" else ns.verb
    opts = {
        k: v for k, v in vars(ns).items() if k not in {"cmd", "verb", "jverb", "version", "format"}
    }
    return ParseResult(f"work {verb}", format=getattr(ns, "format", "text"), opts=opts)


def expand_paths(paths: list[Path]) -> list[Path]:
    """Files as given; a directory -> its *.toml (a gov/ directory -> gov/work/*.toml).

    Raises:
        UsageError: a path does not exist, or a directory holds no ``*.toml``: "ok -- 0 files
            checked" for a mistyped or emptied directory would pass a check that saw nothing.
    """
    out: list[Path] = []
    for p in paths:
        kind = _kind(p)
        if kind == "directory":
            if (p / "config.toml").is_file() and (p / "work").is_dir():
                p = p / "work"
            found = sorted(p.glob("*.toml"))
            if not found:
                raise UsageError(_no_items(p))
            out.extend(found)
        elif kind == "file":
            out.append(p)
        else:
            raise UsageError(f"{p}: {kind}")
    return out


def _kind(path: Path) -> str:
    """``"directory"``, ``"file"`` (regular), or why ``path`` is neither, as the error says it.

    A FIFO or a device exists: "no such file or directory" sent the user looking for a typo (and
    reading ``/dev/zero`` would never end)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file or directory"
    except OSError as exc:  # no permission, a name too long, a symlink loop
        return f"cannot read it: {exc.strerror}"
    except ValueError:  # an embedded NUL byte
        return "no such file or directory (the name holds a NUL byte)"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "file"
    what = {
        stat.S_IFIFO: "a FIFO (named pipe)",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
        stat.S_IFSOCK: "a socket",
    }.get(stat.S_IFMT(mode), "not a regular file")
    return f"{what}, not a work item; pass a work item's .toml file or a directory of them"


def _no_items(directory: Path) -> str:
    return (
        f"{directory} holds no work items (*.toml), so there is nothing to check; pass the "
        f"directory that holds them (gov/work), or add one with govctl work new"
    )


def run_check(pr: ParseResult, out: TextIO) -> int:
    from govctl._checker import Checker
    from govctl._config import find_root
    from govctl._reporters import REPORTERS

    cwd = Path.cwd()
    root = find_root(cwd)
    if pr.paths:
        files = expand_paths(pr.paths)
    else:
        work = root / "gov" / "work"
        if not work.is_dir():
            raise UsageError(
                f"no gov/work directory under {root} (run inside the repository, or pass PATHS)"
            )
        files = sorted(work.glob("*.toml"))
        if not files:
            raise UsageError(_no_items(work))
    result = Checker(files, root=root, cwd=cwd).run()
    REPORTERS[pr.format](result, out)
    return result.exit_code(deny_warnings=pr.deny_warnings)


def run_work(pr: ParseResult, out: TextIO) -> int:
    from govctl import _render, _work
    from govctl._config import load_config, require_root
    from govctl._load import shown_path

    cfg = load_config(require_root(Path.cwd()))
    o = pr.opts

    def rel(p: Path) -> str:
        return shown_path(p, Path.cwd())

    if pr.command == "work new":
        item_id, path = _work.new(
            cfg,
            o["title"],
            date=o["date"],
            active=o["active"],
            description=o["description"],
            refs=o["refs"],
            depends_on=o["depends_on"],
            tags=o["tags"],
            criteria=o["criteria"],
            strategy=o["id_strategy"],
        )
        out.write(f"created {item_id} {rel(path)}\n")
    elif pr.command == "work move":
        path = _work.move(cfg, o["id"], o["status"], date=o["date"])
        out.write(f"moved {o['id']} to {o['status']} ({rel(path)})\n")
    elif pr.command == "work tick":
        path, text = _work.tick(cfg, o["id"], o["pattern"], o["status"])
        out.write(f"{o['status']}: {text} ({rel(path)})\n")
    elif pr.command == "work journal add":
        path = _work.journal_add(cfg, o["id"], o["text"], scope=o["scope"], date=o["date"])
        out.write(f"journal entry added to {o['id']} ({rel(path)})\n")
    elif pr.command == "work add":
        path = _work.add(cfg, o["id"], o["field"], o["value"])
        out.write(f"added to {o['id']} {o['field']} ({rel(path)})\n")
    elif pr.command == "work list":
        items = sorted((wf for wf in _work.all_items(cfg) if wf.item_id), key=lambda w: w.item_id)
        for wf in items:
            wf.shown = rel(wf.path)
        rows = [
            _render.summary(wf)
            for wf in items
            if not o["status"] or wf.get("govctl", "status") in o["status"]
        ]
        out.write((_render.to_json if pr.format == "json" else _render.list_text)(rows))
    elif pr.command == "work show":
        wf = _work.locate(cfg, o["id"])
        wf.shown = rel(wf.path)
        out.write(_render.to_json(wf.doc) if pr.format == "json" else _render.show_text(wf))
    elif pr.command == "work render":
        md = _render.render_markdown(_work.locate(cfg, o["id"]))
        if o["output"] is None:
            out.write(md)
        else:
            o["output"].write_text(md, encoding="utf-8")
            out.write(f"wrote {o['output']}\n")
    return 0


def _version() -> str:
    """govctl's version: of the ``govctl`` distribution, else of the one shipping the module.

    pre-commit installs govctl from this repository's root, whose distribution is the workspace's
    (``pyproject.toml``), not ``govctl``.
    """
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    for dist in ("govctl", *packages_distributions().get("govctl", ())):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def execute(pr: ParseResult, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a parsed command; GovctlError -> message on stderr and its exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if pr.command == "version":
            out.write(f"govctl {_version()}\n")
            return 0
        if pr.command == "check":
            return run_check(pr, out)
        return run_work(pr, out)
    except GovctlError as exc:
        err.write(f"govctl: error: {exc}\n")
        return exc.exit_code


def main(argv: list[str] | None = None) -> int:
    """Console entry point (`govctl = govctl.cli:main`)."""
    return run("govctl", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    try:
        pr = parse(argv)
    except SystemExit as exc:  # argparse: --help (0) or bad usage (2)
        return exc.code if isinstance(exc.code, int) else 2
    return execute(pr, out=QuietStdout())


if __name__ == "__main__":
    sys.exit(main())
