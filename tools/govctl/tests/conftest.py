"""Fixtures: `run_line` (govctl's main() in-process), a scratch gov/ repository, fixture paths."""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from govctl.cli import main

sys.path.insert(0, str(Path(__file__).parent))  # _govctl_support
from _govctl_support import BUNDLED_SCHEMA, FIXTURES


@dataclass
class RunResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def run_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run `govctl ARGS` in-process (cwd: `cwd`, default a fresh tmp dir) and capture it.

    Prints exit code, stdout and stderr, so a failing test shows them.
    """

    def run(args: list[str], cwd: Path | None = None) -> RunResult:
        monkeypatch.chdir(cwd or tmp_path)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
        result = RunResult(code, out.getvalue(), err.getvalue())
        print(
            f"$ govctl {' '.join(map(str, args))}\n[exit {code}]\n--- stdout\n{result.stdout}"
            f"--- stderr\n{result.stderr}"
        )
        return result

    return run


@pytest.fixture
def gov_repo(tmp_path: Path) -> Path:
    """A scratch repository root: gov/config.toml (sequential IDs, the tags the tests use),
    gov/schema, empty gov/work."""
    root = tmp_path / "repo"
    (root / "gov" / "work").mkdir(parents=True)
    (root / "gov" / "schema").mkdir()
    shutil.copy(BUNDLED_SCHEMA, root / "gov" / "schema" / "work.schema.json")
    (root / "gov" / "config.toml").write_text(
        '[work_item]\nid_strategy = "sequential"\n\n[tags]\nallowed = ["jit", "runtime", "cp"]\n'
    )
    return root
