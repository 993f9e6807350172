"""Runs ``cpkv-serve ... --cpkv-shared-kv --dry-run --dry-run-format json`` for each argv in a
JSON file, in one fresh process (the shared-KV hooks, once applied, stay for the process).

Usage: ``python _skv_dry_run_driver.py CASES.json OUT.json``; each case is
``{"name": ..., "gpu": "sm90"|"sm100", "argv": [...]}``; each result holds the exit status, the
parsed report (or None) and stderr's last lines.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path


def main() -> None:
    from sglang_cpkv.serve.cli import main as serve_main

    cases = json.loads(Path(sys.argv[1]).read_text())
    results = {}
    for case in cases:
        out, err = io.StringIO(), io.StringIO()
        argv = [*case["argv"], "--cpkv-shared-kv", "--dry-run", "--gpu", case["gpu"],
                "--dry-run-format", "json"]  # fmt: skip
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = serve_main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        report = None
        if code == 0:
            text = out.getvalue()
            report = json.loads(text[text.index("{") :])
        results[case["name"]] = {"code": code, "report": report, "stderr": err.getvalue()[-3000:]}
    Path(sys.argv[2]).write_text(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
