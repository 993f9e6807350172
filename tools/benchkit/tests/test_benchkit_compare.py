"""lost_rows and `python -m benchkit compare`: a rewritten record keeps every old value."""

from __future__ import annotations

import json

from benchkit import lost_rows
from benchkit.__main__ import main

OLD = [
    {"op": "a", "case": "x", "p50": 0.1 + 0.2, "shape": [1, 2]},
    {"op": "a", "case": "x", "p50": 0.1 + 0.2, "shape": [1, 2]},  # a duplicate is a row too
    {"op": "b", "case": "y", "p50": 2.0, "note": None},
]


def test_same_rows_in_another_order_with_more_fields():
    new = [{**OLD[2], "git_commit": "abc"}, OLD[1], {**OLD[0], "shape": (1, 2)}]
    assert lost_rows(OLD, new) == []


def test_a_changed_value_is_named():
    new = [OLD[0], OLD[1], {**OLD[2], "p50": 2.0000000001}]
    (line,) = lost_rows(OLD, new)
    assert line.startswith("old row 2 not preserved: op='b' case='y'")
    assert "'p50': (2.0, 2.0000000001)" in line


def test_dropped_rows_are_named():
    assert lost_rows(OLD, OLD[:2]) == ["old row 2 not preserved: op='b' case='y' (no new row left)"]
    (line,) = lost_rows(OLD, OLD[1:])  # one of the two duplicates dropped
    assert line.startswith("old row 1 not preserved: op='a' case='x'; nearest new row differs")
    (line,) = lost_rows(OLD, [OLD[0], OLD[2], {"op": "a", "case": "x"}])
    assert line.startswith("old row 1 not preserved") and "'<missing>'" in line


def test_cli_exit_codes(tmp_path, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(OLD))  # a bare list: the records' old shape
    new.write_text(json.dumps({"benchmark": "t", "rows": OLD}))
    assert main(["compare", str(old), str(new)]) == 0
    assert "all 3 rows" in capsys.readouterr().out
    new.write_text(json.dumps({"benchmark": "t", "rows": OLD[:2]}))
    assert main(["compare", str(old), str(new)]) == 1
    assert "old row 2 not preserved" in capsys.readouterr().out


def test_cli_ignores_fields_rewritten_on_purpose(tmp_path, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps([{**OLD[2], "command": "run --out /scratch/x"}]))
    new.write_text(json.dumps([{**OLD[2], "command": "run --out $OUT"}]))
    assert main(["compare", str(old), str(new)]) == 1
    assert main(["compare", "--ignore", "command", str(old), str(new)]) == 0
    assert capsys.readouterr().out.endswith("(ignoring command)\n")
    new.write_text(json.dumps([{**OLD[2], "command": "run --out $OUT", "p50": 3.0}]))
    assert main(["compare", "--ignore", "command", str(old), str(new)]) == 1  # values still count
