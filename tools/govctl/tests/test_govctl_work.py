"""Authoring commands end to end on a scratch gov/ repository (sequential IDs, fixed dates)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

ID = "WI-2026-11-29-001"


@pytest.fixture
def govctl(gov_repo: Path, run_line):
    """`govctl(*args)` run at the scratch repository's root."""
    return lambda *args: run_line(list(args), cwd=gov_repo)


@pytest.fixture
def new(govctl):
    """`new(TITLE, *ARGS, d=TEXT)`: `govctl work new TITLE --date 2026-11-29 [-d TEXT] ARGS`."""

    def run(title: str, *args: str, d: str | None = "Real."):
        return govctl(
            "work", "new", title, "--date", "2026-11-29", *(("-d", d) if d else ()), *args
        )

    return run


@pytest.fixture
def item(new, gov_repo: Path) -> Path:
    r = new(
        "Key the JIT cache by torch version",
        "-c",
        "fix: a torch upgrade triggers a rebuild",
        "-c",
        "chore: tests pass",
        d="A torch upgrade must rebuild the kernels.",
    )
    assert r.exit_code == 0
    return gov_repo / "gov/work/2026-11-29-key-the-jit-cache-by-torch-version.toml"


def test_new_writes_a_checked_file(item: Path, govctl) -> None:
    assert (
        item.read_text()
        == f"""\
#:schema ../schema/work.schema.json

[govctl]
id = "{ID}"
title = "Key the JIT cache by torch version"
status = "queue"
created = "2026-11-29"

[content]
description = \"\"\"
A torch upgrade must rebuild the kernels.\"\"\"

[[content.acceptance_criteria]]
text = "a torch upgrade triggers a rebuild"
status = "pending"
category = "fixed"

[[content.acceptance_criteria]]
text = "tests pass"
status = "pending"
category = "chore"
"""
    )
    assert govctl("check", "-W").exit_code == 0


def test_new_ids_per_strategy(govctl, new) -> None:
    made = []
    for strategy in ("sequential", "sequential", "random", "author-hash"):
        r = new(f"Item {len(made)}", "--id-strategy", strategy)
        made.append(r.stdout.split()[1])
    assert made[:2] == ["WI-2026-11-29-001", "WI-2026-11-29-002"]
    assert re.fullmatch(r"WI-2026-11-29-[0-9a-f]{4}", made[2])
    assert re.fullmatch(r"WI-2026-11-29-[0-9a-f]{4}-001", made[3])
    assert govctl("check", "-W").exit_code == 0


def test_default_strategy_is_random(govctl, gov_repo: Path) -> None:
    (gov_repo / "gov/config.toml").write_text("# no [work_item] table: defaults\n")
    r = govctl("work", "new", "Anything", "-d", "Real text.")
    assert re.fullmatch(r"created WI-\d{4}-\d{2}-\d{2}-[0-9a-f]{4} gov/work/\S+\.toml\n", r.stdout)


def test_bad_config_is_a_usage_error(govctl, gov_repo: Path) -> None:
    (gov_repo / "gov/config.toml").write_text('[work_item]\nid_strategy = "uuid"\n')
    r = govctl("work", "new", "Anything")
    assert r.exit_code == 2
    assert "id_strategy = 'uuid'" in r.stderr


def test_new_without_description_warns(govctl, new) -> None:
    assert new("Later", d=None).exit_code == 0
    r = govctl("check")
    assert (r.exit_code, r.stdout.splitlines()[0][:12]) == (0, "warning[W001")


def test_new_refuses_an_existing_file_name(new, item: Path) -> None:
    r = new("Key the JIT cache by torch version", d=None)
    assert r.exit_code == 2
    assert "already exists" in r.stderr


def test_new_refuses_dangling_depends_on(new, gov_repo: Path) -> None:
    r = new("X", "--depends-on", "WI-2026-01-01-001")
    assert r.exit_code == 1
    assert "E021" in r.stderr
    assert list((gov_repo / "gov/work").iterdir()) == []


def test_lifecycle(govctl, item: Path) -> None:
    r = govctl("work", "move", ID, "done")
    assert (r.exit_code, "'queue' -> 'done' is not allowed" in r.stderr) == (1, True)
    assert govctl("work", "move", ID, "active", "--date", "2026-11-30").exit_code == 0
    r = govctl("work", "move", ID, "done", "--date", "2026-12-01")
    assert (r.exit_code, "2 criteria still pending" in r.stderr) == (1, True)
    assert govctl("work", "tick", ID, "torch upgrade").exit_code == 0
    assert govctl("work", "tick", ID, "TESTS PASS", "--status", "cancelled").exit_code == 0
    assert govctl("work", "move", ID, "done", "--date", "2026-12-01").exit_code == 0
    text = item.read_text()
    stamped = 'created = "2026-11-29"\nstarted = "2026-11-30"\ncompleted = "2026-12-01"\n'
    assert f'status = "done"\n{stamped}' in text
    assert 'status = "cancelled"\ncategory = "chore"' in text
    r = govctl("work", "move", ID, "active")
    assert (r.exit_code, "nothing (final)" in r.stderr) == (1, True)
    assert govctl("check", "-W").exit_code == 0


def test_move_refuses_dates_out_of_order(govctl, item: Path) -> None:
    before = item.read_bytes()
    r = govctl("work", "move", ID, "active", "--date", "2026-11-01")
    assert r.exit_code == 1
    assert "E012" in r.stderr
    assert item.read_bytes() == before


def test_cancel_from_queue_stamps_completed_only(govctl, item: Path) -> None:
    assert govctl("work", "move", ID, "cancelled", "--date", "2026-11-30").exit_code == 0
    text = item.read_text()
    assert 'completed = "2026-11-30"' in text
    assert "started" not in text


def test_tick_needs_exactly_one_match(govctl, item: Path) -> None:
    r = govctl("work", "tick", ID, "a")  # matches both criteria
    assert (r.exit_code, "2 criteria match" in r.stderr) == (2, True)
    r = govctl("work", "tick", ID, "nothing like it")
    assert (r.exit_code, "no criterion match" in r.stderr) == (2, True)


def test_journal(govctl, item: Path) -> None:
    assert (
        govctl(
            "work",
            "journal",
            "add",
            ID,
            "Keyed by torch version.",
            "--scope",
            "jit",
            "--date",
            "2026-11-29",
        ).exit_code
        == 0
    )
    assert govctl("work", "journal", "add", ID, "Two\nlines", "--date", "2026-11-30").exit_code == 0
    text = item.read_text()
    assert text.endswith(
        '\n\n[[content.journal]]\ndate = "2026-11-29"\nscope = "jit"\n'
        'content = "Keyed by torch version."\n'
        '\n[[content.journal]]\ndate = "2026-11-30"\ncontent = """Two\nlines"""\n'
    )
    r = govctl("work", "journal", "add", ID, "Too early", "--date", "2026-11-01")
    assert (r.exit_code, "E016" in r.stderr) == (1, True)
    r = govctl("work", "journal", "add", ID, "x", "--date", "2026-13-01")
    assert (r.exit_code, "expected a real date" in r.stderr) == (2, True)


def test_add(govctl, gov_repo: Path, item: Path) -> None:
    assert govctl("work", "add", ID, "acceptance_criteria", "docs: README updated").exit_code == 0
    assert govctl("work", "add", ID, "tags", "jit").exit_code == 0
    assert govctl("work", "add", ID, "notes", "Hash covers the git hash too").exit_code == 0
    assert govctl("work", "add", ID, "refs", ID).exit_code == 0
    text = item.read_text()
    assert 'created = "2026-11-29"\nrefs = ["WI-2026-11-29-001"]\ntags = ["jit"]\n' in text
    assert 'text = "README updated"\nstatus = "pending"\ncategory = "chore"\n' in text
    assert 'notes = ["Hash covers the git hash too"]' in text
    r = govctl("work", "add", ID, "refs", "ADR-0001")
    assert (r.exit_code, "E021" in r.stderr) == (1, True)


def test_add_refuses_a_cycle(govctl, new, item: Path) -> None:
    assert new("Second", "--depends-on", ID).exit_code == 0
    r = govctl("work", "add", ID, "depends_on", "WI-2026-11-29-002")
    assert r.exit_code == 1
    assert (
        "E023" in r.stderr
        and "WI-2026-11-29-001 -> WI-2026-11-29-002 -> WI-2026-11-29-001" in r.stderr
    )


def test_list_show_render(govctl, new, item: Path) -> None:
    new("Another", "--active")
    r = govctl("work", "list")
    assert r.stdout == (
        f"{ID}  queue   2026-11-29  Key the JIT cache by torch version\n"
        "WI-2026-11-29-002  active  2026-11-29  Another\n"
    )
    rows = json.loads(govctl("work", "list", "--status", "active", "--format", "json").stdout)
    assert [r["id"] for r in rows] == ["WI-2026-11-29-002"]
    assert rows[0]["file"] == "gov/work/2026-11-29-another.toml"
    show = govctl("work", "show", ID).stdout
    assert show.startswith(f"{ID}  [queue]  Key the JIT cache by torch version\n")
    assert "    [ ] a torch upgrade triggers a rebuild (fixed)\n" in show
    assert json.loads(govctl("work", "show", ID, "--format", "json").stdout)["govctl"]["id"] == ID
    md = govctl("work", "render", ID).stdout
    assert (
        md
        == f"""\
# {ID}: Key the JIT cache by torch version

| Field | Value |
|---|---|
| Status | queue |
| Created | 2026-11-29 |

## Description

A torch upgrade must rebuild the kernels.

## Acceptance criteria

- [ ] a torch upgrade triggers a rebuild *(fixed)*
- [ ] tests pass *(chore)*
"""
    )


def test_render_links_and_output_file(govctl, new, gov_repo: Path, item: Path) -> None:
    new("Linked", "--ref", ID, d=f"Follows [[{ID}]].")
    out = gov_repo / "linked.md"
    assert govctl("work", "render", "WI-2026-11-29-002", "-o", out).exit_code == 0
    md = out.read_text()
    assert f"| Refs | [{ID}]({ID}.md) |" in md
    assert f"Follows [{ID}]({ID}.md)." in md


def test_unknown_id_is_a_usage_error(govctl, item: Path) -> None:
    r = govctl("work", "show", "WI-2026-01-01-999")
    assert (r.exit_code, "no work item WI-2026-01-01-999" in r.stderr) == (2, True)


def test_usage_errors(run_line, tmp_path: Path) -> None:
    assert run_line([]).exit_code == 2
    assert run_line(["check", "--format", "xml"]).exit_code == 2
    r = run_line(["check", tmp_path / "missing.toml"])
    assert (r.exit_code, "no such file" in r.stderr) == (2, True)
    r = run_line(["check"])  # tmp dir: no gov/work
    assert (r.exit_code, "no gov/work directory" in r.stderr) == (2, True)
    assert run_line(["--help"]).exit_code == 0
    assert run_line(["--version"]).stdout.startswith("govctl ")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: os.mkfifo(p), "a FIFO (named pipe), not a work item"),
        (lambda p: p.symlink_to("/dev/zero"), "a character device, not a work item"),
    ],
    ids=["fifo", "dev-zero"],
)
def test_check_names_what_a_path_that_exists_is(run_line, tmp_path: Path, make, said) -> None:
    """``govctl check some.fifo`` and ``govctl check /dev/zero`` said "no such file or
    directory" of paths that exist; now the line says what they are, without reading them."""
    path = tmp_path / "item.toml"
    make(path)
    r = run_line(["check", path])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == f"govctl: error: {path}: {said}; pass a work item's .toml file or a " + (
        "directory of them\n"
    )
    assert run_line(["check", "/dev/zero"]).stderr.startswith(
        "govctl: error: /dev/zero: a character device"
    )


@pytest.mark.parametrize("given", [None, "gov", "gov/work", "empty"])
def test_check_with_no_work_items_is_a_usage_error(run_line, gov_repo: Path, given) -> None:
    """An empty or mistyped directory used to pass: "ok -- 0 files checked", exit 0."""
    (gov_repo / "empty").mkdir()
    (gov_repo / "empty" / "notes.md").write_text("not a work item\n")
    r = run_line(["check"] if given is None else ["check", given], cwd=gov_repo)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "holds no work items (*.toml)" in r.stderr
    where = "empty" if given == "empty" else "work"
    assert r.stderr.startswith("govctl: error: ") and f"{where} holds no" in r.stderr


def test_check_a_gov_directory_and_a_single_file(govctl, gov_repo: Path, item: Path) -> None:
    assert govctl("check", "gov").stdout == "ok -- 1 file checked\n"
    assert govctl("check", item).stdout == "ok -- 1 file checked\n"


def test_single_file_resolves_refs_against_the_rest_of_gov_work(
    govctl, new, gov_repo: Path, item: Path
) -> None:
    new("Dependent", "--depends-on", ID)
    dependent = gov_repo / "gov/work/2026-11-29-dependent.toml"
    assert govctl("check", "-W", dependent).exit_code == 0


@pytest.mark.parametrize(
    ("criterion", "says", "lists_prefixes"),
    [
        ("nonsense", "no prefix", True),  # used to become category "added" silently
        ("Cache key: has the torch version", "no prefix", True),  # a phrase is not a prefix
        ("bogus: text", "unknown prefix 'bogus'", True),
        ("fix:   ", "no text after the prefix", False),
    ],
)
def test_criterion_needs_a_known_prefix(
    govctl, new, gov_repo: Path, criterion, says, lists_prefixes
) -> None:
    r = new("X", "-c", criterion)
    assert r.exit_code == 2
    assert says in r.stderr
    assert ("one of add, added, feat" in r.stderr) is lists_prefixes
    assert list((gov_repo / "gov/work").iterdir()) == []


def test_add_criterion_needs_a_known_prefix(govctl, item: Path) -> None:
    before = item.read_bytes()
    r = govctl("work", "add", ID, "acceptance_criteria", "nonsense")
    assert (r.exit_code, "no prefix" in r.stderr) == (2, True)
    assert item.read_bytes() == before


def test_work_outside_a_repository_is_refused(run_line, tmp_path: Path) -> None:
    lone = tmp_path / "not-a-repo"
    lone.mkdir()
    r = run_line(["work", "new", "Anything", "-d", "Real."], cwd=lone)
    assert r.exit_code == 2
    assert "no gov/config.toml" in r.stderr
    assert list(lone.iterdir()) == []  # no ./gov/work made here


def test_move_refuses_an_item_that_already_fails_check(govctl, item: Path) -> None:
    text = item.read_text()
    item.write_text(
        text.replace('created = "2026-11-29"', 'created = "2026-11-29"\nrefs = ["ADR-0404"]')
    )
    before = item.read_bytes()
    r = govctl("work", "move", ID, "active", "--date", "2026-11-30")
    assert r.exit_code == 1
    assert "has errors; fix them before moving it" in r.stderr and "E021" in r.stderr
    assert item.read_bytes() == before
    # repairs stay possible: tick still writes (the error was there before)
    assert govctl("work", "tick", ID, "tests pass").exit_code == 0


def test_one_pending_criterion_is_singular(govctl, item: Path) -> None:
    assert govctl("work", "tick", ID, "tests pass").exit_code == 0
    assert govctl("work", "move", ID, "active", "--date", "2026-11-30").exit_code == 0
    r = govctl("work", "move", ID, "done", "--date", "2026-12-01")
    assert (r.exit_code, "1 criterion still pending" in r.stderr) == (1, True)


@pytest.mark.parametrize(
    ("entries", "header", "shown"),
    [
        (1, "  journal (1 entry; newest first):", ["2026-11-29"]),
        (3, "  journal (3 entries; newest first):", ["2026-12-01", "2026-11-30", "2026-11-29"]),
        (
            4,
            "  journal (4 entries; the last 3, newest first):",
            ["2026-12-02", "2026-12-01", "2026-11-30"],
        ),
    ],
)
def test_show_says_how_many_journal_entries_it_lists(
    govctl, item: Path, entries: int, header: str, shown: list[str]
) -> None:
    for day in range(entries):
        date = f"2026-{11 + (29 + day > 30)}-{(29 + day - 1) % 30 + 1:02d}"
        assert govctl("work", "journal", "add", ID, f"entry {day}", "--date", date).exit_code == 0
    lines = govctl("work", "show", ID).stdout.splitlines()
    at = lines.index(header)
    assert [line.split()[0] for line in lines[at + 1 :]] == shown
