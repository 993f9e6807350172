"""Run `govctl check` over another repository's gov/work and say which items fail and why.

Made to compare our check with upstream govctl's on upstream's own data: point it at a checkout
of upstream (or any repository in its layout) and it checks every gov/work/*.toml against that
repository's gov/ (its config.toml policy, schema, RFCs, ADRs and guards), as `govctl check`
run at that root would.

    uv run --frozen python tools/govctl/scripts/check_upstream.py /path/to/checkout [--json F]

Output: one block per failing file (its diagnostics), then the count of items checked, failing
and clean, and the count per code. Exit status: 0 when every item is clean, 1 when any fails,
2 when PATH is not a repository with gov/work.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from govctl import Checker, CheckResult


def find_work_dir(path: Path) -> Path:
    """PATH's gov/work (PATH may be the checkout, its gov/ or gov/work itself)."""
    for cand in (path / "gov" / "work", path / "work", path):
        if cand.is_dir() and cand.name == "work" and cand.parent.name == "gov":
            return cand
    raise SystemExit(f"check_upstream: {path} holds no gov/work directory; pass a checkout root")


def upstream_version(root: Path) -> str | None:
    """`version` of the checkout's Cargo.toml [package], when it has one."""
    cargo = root / "Cargo.toml"
    if not cargo.is_file():
        return None
    m = re.search(r'(?m)^\[package\][^\[]*?^version\s*=\s*"([^"]+)"', cargo.read_text())
    return m.group(1) if m else None


def summarise(result: CheckResult) -> dict[str, object]:
    """Failing files with their diagnostics, and counts (a file fails on an error)."""
    by_file: dict[str, list[dict[str, object]]] = {}
    for d in result.diagnostics:
        by_file.setdefault(d.file, []).append(d.as_dict())
    failing = sorted(f for f, ds in by_file.items() if any(d["level"] == "error" for d in ds))
    return {
        "files_checked": result.files_checked,
        "files_failing": len(failing),
        "files_clean": result.files_checked - len(failing),
        "errors": len(result.errors),
        "warnings": len(result.warnings),
        "by_code": dict(sorted(Counter(d.code for d in result.diagnostics).items())),
        "failing": {f: by_file[f] for f in failing},
        "warned": {f: ds for f, ds in sorted(by_file.items()) if f not in failing},
    }


def render(summary: dict[str, object], root: Path, version: str | None) -> str:
    lines = [f"checkout: {root}" + (f" (Cargo.toml version {version})" if version else "")]
    for title, key in (("fails", "failing"), ("warns", "warned")):
        for file, diags in summary[key].items():  # type: ignore[union-attr]
            lines.append(f"\n{file} {title}:")
            lines += [
                f"  {d['level']}[{d['code']}] line {d['line']}: {d['message']}" for d in diags
            ]
    codes = ", ".join(f"{c} x{n}" for c, n in summary["by_code"].items())  # type: ignore[union-attr]
    lines.append(
        f"\n{summary['files_checked']} items checked: {summary['files_failing']} fail, "
        f"{summary['files_clean']} pass; {summary['errors']} errors, "
        f"{summary['warnings']} warnings" + (f" ({codes})" if codes else "")
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="the checkout's root (or its gov/ or gov/work)")
    p.add_argument("--json", type=Path, help="also write the summary here as JSON")
    args = p.parse_args(argv)
    work = find_work_dir(args.path.resolve())
    root = work.parent.parent
    result = Checker(sorted(work.glob("*.toml")), root=root, cwd=root).run()
    summary = summarise(result)
    version = upstream_version(root)
    sys.stdout.write(render(summary, root, version))
    if args.json:
        payload = {"checkout": str(root), "version": version, **summary}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 1 if summary["files_failing"] else 0


if __name__ == "__main__":
    sys.exit(main())
