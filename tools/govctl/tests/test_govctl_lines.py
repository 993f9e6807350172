"""Key -> line mapping on raw TOML text, checked against tomllib's view of the same text."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from _govctl_support import FIXTURES
from govctl._lines import key_lines, lookup, split_key

TRICKY = '''\
#:schema x
[govctl]
id = "WI-2026-08-01-a3f9"
"title" = "a = b # not a comment"
tags = [
  "x", # comment with [brackets]
  "y",
]

[content]
description = """
fake = "key inside a multi-line string"
[not.a.header]
escaped \\""" still inside
ends with a quote""""
notes = [\'\'\'multi
line literal\'\'\', "z"]
a.b.c = 1
'odd key' = { x = 1, y = [1,
  2] }

[[content.journal]]
date = "2026-08-02"

[[content.journal]]
date = "2026-08-03"
after = "the ]] inside"
'''


def test_tricky_layout() -> None:
    tomllib.loads(TRICKY)  # the text is valid TOML
    lines = key_lines(TRICKY)
    assert lines[("govctl",)] == 2
    assert lines[("govctl", "title")] == 4
    assert lines[("govctl", "tags")] == 5
    assert lines[("content",)] == 10
    assert lines[("content", "description")] == 11
    assert ("content", "fake") not in lines and ("not", "a", "header") not in lines
    assert lines[("content", "notes")] == 16
    assert lines[("content", "a", "b", "c")] == 18
    assert lines[("content", "odd key")] == 19
    assert lines[("content", "journal", 0)] == 22
    assert lines[("content", "journal", 1, "date")] == 26
    assert lines[("content", "journal", 1, "after")] == 27


def test_lookup_falls_back_to_the_nearest_parent() -> None:
    lines = key_lines(TRICKY)
    assert lookup(lines, ("govctl", "tags", 1)) == 5
    assert lookup(lines, ("content", "journal", 1, "missing")) == 25
    assert lookup(lines, ("nowhere",)) == 1


def test_split_key() -> None:
    assert split_key("a.\"b.c\".'d e'") == ("a", "b.c", "d e")


def _leaf_paths(node: Any, where: tuple = ()) -> list[tuple]:
    out = []
    for k, v in node.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                out += _leaf_paths(x, (*where, k, i))
        elif isinstance(v, dict):
            out += _leaf_paths(v, (*where, k))
        else:
            out.append((*where, k))
    return out


FILES = [
    p for p in sorted(FIXTURES.rglob("*.toml")) if "E001" not in p.parts and "E003" not in p.parts
]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_every_key_of_every_fixture_is_found_on_its_own_line(path: Path) -> None:
    text = path.read_text()
    lines = key_lines(text)
    raw = text.splitlines()
    for key_path in _leaf_paths(tomllib.loads(text)):
        line = lookup(lines, key_path)
        inline = next(
            (
                i
                for i, k in enumerate(key_path)
                if isinstance(k, int) and key_path[: i + 1] not in lines
            ),
            None,
        )
        if inline is not None:  # inside an inline array of tables: the array's own key line
            assert line == lines[key_path[:inline]]
        else:
            assert str(key_path[-1]) in raw[line - 1], (key_path, line, raw[line - 1])
