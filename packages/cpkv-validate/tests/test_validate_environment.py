"""Environment variables are inputs: ``cpkv-validate`` refuses a bad one, or one its run cannot
meet, in one line and exit 2 (exit 1 is contamination, and nothing else).

Before: ``CPKV_BACKEND=nonsense`` or ``CPKV_CP_SPLIT_MAX_BYTES=abc`` (or ``-5``, or ``1``) ended
in a 60-line traceback from every rank and exit 1. A malformed value is now refused at start
(``cpkv_cli.environment``); a well-formed budget that a scenario does not fit (``1`` byte) is
refused by the runtime inside a rank, and that refusal reaches the user as the same one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cpkv_cli.environment import VARIABLES

CLI = str(Path(sys.executable).parent / "cpkv-validate")


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    return subprocess.run(
        [CLI, "--scenario", "tiny_extends", "--no-progress", *argv],
        capture_output=True, text=True, timeout=300, env={**clean, **env},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "argv", "says"),
    [
        ({"CPKV_BACKEND": "nonsense"}, (), "CPKV_BACKEND='nonsense': expected auto, torch"),
        ({"CPKV_CP_SPLIT_MAX_BYTES": "abc"}, (), "CPKV_CP_SPLIT_MAX_BYTES='abc': expected a byte"),
        ({"CPKV_CP_SPLIT_MAX_BYTES": "-5"}, (), "CPKV_CP_SPLIT_MAX_BYTES='-5': expected a byte"),
        ({"CPKV_CP_SPLIT_MAX_BYTES": "1"}, (), "over the budget of 1 bytes (CPKV_CP_SPLIT_MAX_"),
        ({"CPKV_LAYOUT_MAX_BYTES": "1"}, (), "over the budget of 1 bytes (CPKV_LAYOUT_MAX_BYT"),
        ({"CPKV_CP_SPLIT_MAX_BYTES": "1"}, ("--cp", "1"), "(CPKV_CP_SPLIT_MAX_BYTES=1); fix:"),
    ],
    ids=["backend", "budget-abc", "budget-negative", "budget-1", "layout-1", "budget-1-cp1"],
)
def test_a_bad_variable_is_one_line_and_exit_2_not_contamination(env, argv, says):
    proc = _run(env, *argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("cpkv-validate: error: ") and says in proc.stderr
