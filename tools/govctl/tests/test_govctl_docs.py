"""README (code table, runnable example), config.toml and .pre-commit-hooks.yaml stay true."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
from govctl import CODES
from govctl._config import ID_STRATEGIES

HERE = Path(__file__).parents[1]
ROOT = Path(__file__).parents[3]
README = (HERE / "README.md").read_text()


def test_readme_code_table_matches_codes() -> None:
    rows = re.findall(r"^\| `([EW]\d{3})` \| (\w+) \| (.*) \|$", README, re.M)
    assert [(c, lvl, s) for c, lvl, s in rows] == [(c, lvl, s) for c, (lvl, s) in CODES.items()]


def test_readme_example_runs(tmp_path: Path, run_line) -> None:
    block = README.split("## Example", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    demo = tmp_path / "demo"
    (demo / "gov" / "work").mkdir(parents=True)
    (demo / "gov" / "config.toml").touch()
    commands = [
        line for line in block.replace("\\\n", " ").splitlines() if line.startswith("govctl ")
    ]
    assert len(commands) == 7
    for line in commands:
        cmd, _, comment = line.partition("#")
        r = run_line(shlex.split(cmd)[1:], cwd=demo)
        assert r.exit_code == (1 if "refused" in comment else 0)
    assert r.stdout.strip() == comment.strip()


def test_repo_config() -> None:
    cfg = tomllib.loads((ROOT / "gov" / "config.toml").read_text())
    assert cfg["work_item"]["id_strategy"] in ID_STRATEGIES


def test_pre_commit_hook() -> None:
    yaml = pytest.importorskip("yaml")
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "govctl-check"
    assert hook["entry"] == "python -m govctl check"  # the hook environment's python
    assert hook["language"] == "python"
    assert hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    assert files.search("gov/work/2026-11-29-x.toml") and files.search("gov/config.toml")
    assert not files.search("packages/cpkv-runtime/src/x.py")
