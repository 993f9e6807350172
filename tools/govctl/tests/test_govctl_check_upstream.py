"""scripts/check_upstream.py on a checkout in upstream's layout made of our own fixtures."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import pytest
from _govctl_support import FIXTURES

SCRIPT = Path(__file__).parents[1] / "scripts" / "check_upstream.py"
main = runpy.run_path(str(SCRIPT))["main"]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """positive/upstream-format plus the three lifecycle findings of negative/E014."""
    root = tmp_path / "checkout"
    shutil.copytree(FIXTURES / "positive" / "upstream-format", root)
    for f in (FIXTURES / "negative/E014/upstream-lifecycle/gov/work").glob("*.toml"):
        shutil.copy(f, root / "gov" / "work")
    (root / "Cargo.toml").write_text('[package]\nname = "x"\nversion = "9.8.7"\n\n[dependencies]\n')
    return root


def test_lists_failing_files_and_counts(checkout: Path, tmp_path: Path, capsys) -> None:
    out_json = tmp_path / "summary.json"
    assert main([str(checkout), "--json", str(out_json)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"checkout: {checkout} (Cargo.toml version 9.8.7)\n")
    failing = [line.split()[0] for line in out.splitlines() if line.endswith(" fails:")]
    assert failing == [
        "gov/work/2026-01-17-done-no-criteria.toml",
        "gov/work/2026-02-07-done-no-completed.toml",
        "gov/work/2026-02-25-done-pending-criteria.toml",
    ]
    assert out.endswith(
        "6 items checked: 3 fail, 3 pass; 4 errors, 0 warnings (E011 x1, E014 x1, E015 x2)\n"
    )
    summary = json.loads(out_json.read_text())
    assert summary["version"] == "9.8.7"
    assert summary["by_code"] == {"E011": 1, "E014": 1, "E015": 2}
    # the lines of the fixture's `# <- E015` marks
    assert [d["line"] for d in summary["failing"][failing[2]]] == [21, 24]


@pytest.mark.parametrize("sub", ["", "gov", "gov/work"])
def test_accepts_the_root_gov_or_gov_work(checkout: Path, sub: str, capsys) -> None:
    for f in (checkout / "gov" / "work").glob("2026-0[12]-[0-9]*-done-*.toml"):
        f.unlink()  # only the clean items remain
    assert main([str(checkout / sub)]) == 0
    assert capsys.readouterr().out.endswith(
        "3 items checked: 0 fail, 3 pass; 0 errors, 0 warnings\n"
    )


def test_a_path_without_gov_work_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="holds no gov/work directory"):
        main([str(tmp_path)])
