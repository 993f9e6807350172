"""Writes: a refused mutation leaves the file byte-identical; edits keep comments and layout."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from govctl._store import atomic_write, write_checked
from govctl.errors import UsageError, WriteRefused

ID = "WI-2026-08-01-a3f9"
# hand-written: comments, odd spacing, a literal string, CRLF-free but unusual layout
ITEM = """\
#:schema ../schema/work.schema.json
# Owned by the runtime team.

[govctl]
id      = "WI-2026-08-01-a3f9"   # aligned by hand
title   = 'Localise the current KV'
status  = "active"
created = "2026-08-01"
started = "2026-08-02"

[content]
description = \"\"\"
Slice the all-gathered KV to local tokens.\"\"\"

# criteria below
[[content.acceptance_criteria]]
text = "Only local tokens reach the cache write"   # the bug
status = "pending"
category = "fixed"
"""


@pytest.fixture
def item(gov_repo: Path) -> Path:
    path = gov_repo / "gov/work/2026-08-01-localise.toml"
    path.write_text(ITEM)
    os.chmod(path, 0o640)
    return path


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["work", "journal", "add", ID, "too early", "--date", "2026-07-01"], "E016"),
        (["work", "move", ID, "done", "--date", "2026-07-01"], None),  # gate: pending criterion
        (["work", "add", ID, "refs", "ADR-0404"], "E021"),
        (["work", "add", ID, "depends_on", ID], "E023"),
        (["work", "add", ID, "tags", "Not A Tag"], "E009"),
        (["work", "move", ID, "cancelled", "--date", "2026-07-01"], "E012"),
    ],
    ids=["journal-date", "done-gate", "dangling-ref", "self-cycle", "bad-tag", "date-order"],
)
def test_failed_mutation_leaves_file_byte_identical(
    item: Path, run_line, gov_repo: Path, args, code
) -> None:
    before, names, mode = item.read_bytes(), _siblings(item), item.stat().st_mode
    r = run_line(args, cwd=gov_repo)
    assert r.exit_code == 1
    if code:
        assert f"error[{code}]" in r.stderr and "refusing to write" in r.stderr
    assert item.read_bytes() == before
    assert _siblings(item) == names  # no temp file left behind
    assert item.stat().st_mode == mode


def test_edit_keeps_comments_and_layout(item: Path, run_line, gov_repo: Path) -> None:
    assert run_line(["work", "tick", ID, "local tokens"], cwd=gov_repo).exit_code == 0
    assert item.read_text() == ITEM.replace('status = "pending"', 'status = "done"')
    assert stat.S_IMODE(item.stat().st_mode) == 0o640


def test_stamp_goes_after_its_predecessor(item: Path, run_line, gov_repo: Path) -> None:
    run_line(["work", "tick", ID, "local tokens"], cwd=gov_repo)
    assert (
        run_line(["work", "move", ID, "done", "--date", "2026-08-03"], cwd=gov_repo).exit_code == 0
    )
    assert 'started = "2026-08-02"\ncompleted = "2026-08-03"\n\n[content]' in item.read_text()
    assert 'status  = "done"' in item.read_text()


def test_write_checked_tolerates_errors_the_file_already_had(item: Path, gov_repo: Path) -> None:
    broken = ITEM.replace('started = "2026-08-02"', 'started = "2026-07-02"')  # E012 already
    item.write_text(broken)
    fixed_tick = broken.replace('status = "pending"', 'status = "done"')
    write_checked(item, fixed_tick, root=gov_repo)  # no new error: allowed
    assert item.read_text() == fixed_tick
    with pytest.raises(WriteRefused) as exc:
        write_checked(
            item, fixed_tick.replace('status  = "active"', 'status  = "queue"'), root=gov_repo
        )
    assert [d.code for d in exc.value.diagnostics] == ["E013"]
    assert item.read_text() == fixed_tick


def test_write_checked_create_and_missing(gov_repo: Path, item: Path) -> None:
    with pytest.raises(UsageError, match="already exists"):
        write_checked(item, ITEM, root=gov_repo, create=True)
    with pytest.raises(UsageError, match="does not exist"):
        write_checked(item.with_name("2026-08-01-other.toml"), ITEM, root=gov_repo)


def test_atomic_write_replaces_and_cleans_up(tmp_path: Path) -> None:
    target = tmp_path / "a.toml"
    target.write_text("old")
    atomic_write(target, "new ✓\n")
    assert target.read_bytes() == "new ✓\n".encode()
    assert _siblings(target) == ["a.toml"]


def test_atomic_write_failure_keeps_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "a.toml"
    target.write_text("old")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert _siblings(target) == ["a.toml"]
