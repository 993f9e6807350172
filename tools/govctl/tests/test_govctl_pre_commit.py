"""The ``govctl-check`` hook from another repository, the way pre-commit runs it there.

``pre-commit try-repo`` of this checkout (its local path; uncommitted edits to tracked files
included, as pre-commit shadows them into a commit) from a scratch repository: pre-commit builds
the hook's environment itself (``language: python``: ``pip install .`` of this repository's root,
whose wheel is govctl and cpkv_cli), then runs ``govctl check`` there. One good work item passes;
adding a bad one fails with govctl's diagnostic. With ``language: system`` the first run failed with
"Executable `govctl` not found" unless govctl was installed by hand.

pip fetches hatchling, jsonschema and tomlkit from the package index (once per module: both runs
share one ``PRE_COMMIT_HOME``), as it does for every repository using the hook.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from _govctl_support import FIXTURES

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[3]
GOOD = FIXTURES / "positive" / "2026-08-09-queue-minimal.toml"
BAD = FIXTURES / "negative" / "E012" / "2026-08-01-completed-before-started.toml"
_GIT_ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """Another repository: gov/config.toml and one good work item, committed."""
    if not (ROOT / ".git").exists():
        pytest.fail(f"{ROOT} is not a git checkout; pre-commit try-repo needs one")
    repo = tmp_path / "other"
    (repo / "gov" / "work").mkdir(parents=True)
    (repo / "gov" / "config.toml").write_text("# another repository's govctl configuration\n")
    shutil.copy(GOOD, repo / "gov" / "work" / GOOD.name)
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    return repo


def _try_repo(repo: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_GIT_ID, "PRE_COMMIT_HOME": str(home)}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # the hook's environment is pre-commit's own: this venv (and its govctl) is off PATH
    env.pop("VIRTUAL_ENV", None)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "govctl-check", "--all-files"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    print(proc.stdout, proc.stderr)
    return proc


def test_try_repo_installs_the_hook_passes_a_good_item_and_fails_a_bad_one(
    scratch: Path, pre_commit_home: Path
) -> None:
    good = _try_repo(scratch, pre_commit_home)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "govctl check" in good.stdout and "Passed" in good.stdout

    shutil.copy(BAD, scratch / "gov" / "work" / BAD.name)
    _git("add", ".", cwd=scratch)
    bad = _try_repo(scratch, pre_commit_home)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Failed" in bad.stdout and "not found" not in bad.stdout
    assert "error[E012]: 'completed' (2026-08-03) precedes 'started' (2026-08-04)" in bad.stdout
    assert f"(gov/work/{BAD.name}:9)" in bad.stdout


def test_the_root_wheel_carries_govctls_dependencies() -> None:
    """The root's dependencies restate govctl's (pip installs the root for the hook), but for
    the workspace packages govctl depends on, which the root's wheel carries itself (pip could
    not find them on the package index)."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    govctl = tomllib.loads((ROOT / "tools" / "govctl" / "pyproject.toml").read_text())
    workspace = set(govctl["tool"]["uv"]["sources"])
    ours = [d for d in govctl["project"]["dependencies"] if d in workspace]
    assert ours == ["cpkv-cli"]
    others = [d for d in govctl["project"]["dependencies"] if d not in workspace]
    assert root["project"]["dependencies"] == others
    assert "scripts" not in root["project"]  # uv warns on every sync otherwise; the hook uses -m
    wheel = root["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert wheel == ["tools/govctl/src/govctl", "packages/cpkv-cli/src/cpkv_cli"]
    cli = tomllib.loads((ROOT / "packages" / "cpkv-cli" / "pyproject.toml").read_text())
    assert cli["project"]["dependencies"] == []  # nothing more for pip to find
