"""``python -m benchkit compare OLD.json NEW.json``: exit 1 unless NEW keeps every row of OLD."""

from __future__ import annotations

import argparse
import sys

from ._compare import lost_rows
from ._record import read_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cmp = sub.add_parser(
        "compare", help="check that every row of OLD is in NEW with every field equal"
    )
    cmp.add_argument("old", help="the record before (e.g. from `git show REV:path > old.json`)")
    cmp.add_argument("new", help="the record after")
    cmp.add_argument(
        "--ignore", action="append", default=[], metavar="FIELD",
        help="a field not compared (a path rewritten on purpose); repeatable",
    )  # fmt: skip
    args = parser.parse_args(argv)
    drop = set(args.ignore)
    old, new = ([{k: v for k, v in r.items() if k not in drop} for r in read_rows(path)]
                for path in (args.old, args.new))  # fmt: skip
    lost = lost_rows(old, new)
    ignored = f" (ignoring {', '.join(sorted(drop))})" if drop else ""
    done = f"all {len(old)} rows of {args.old} are in {args.new}{ignored}"
    print("\n".join(lost) if lost else done)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
