"""PNG plots: drawn for real with matplotlib Agg and read back; rows grouped into lines."""

from __future__ import annotations

import sys

import matplotlib.image
import pytest
from benchkit import Figure, HLine, Line, Panel, lines_from_rows, write_png

ROWS = [
    {"provider": "cuda", "n": 64, "p50": 2.0, "p20": 1.5, "p80": 2.5},
    {"provider": "torch", "n": 8, "p50": 3.0, "p20": 2.0, "p80": 4.0},
    {"provider": "cuda", "n": 8, "p50": 1.0, "p20": 0.5, "p80": 1.5},
    {"provider": "torch", "n": 64, "p50": None, "p20": None, "p80": None},  # failed: skipped
]


def test_lines_from_rows_groups_sorts_and_skips_failures():
    lines = lines_from_rows(
        ROWS, x="n", label=lambda r: r["provider"], band=("p20", "p80"),
        style=lambda name: {"color": "C1"} if name == "cuda" else {},
    )  # fmt: skip
    assert lines == [
        Line("cuda", [8, 64], [1.0, 2.0], band=([0.5, 1.5], [1.5, 2.5]), color="C1"),
        Line("torch", [8], [3.0], band=([2.0], [4.0])),
    ]
    (line,) = lines_from_rows(ROWS, x=lambda r: r["n"] * 2, label=lambda r: "all")
    assert line.x == [16, 16, 128]


def test_write_png_draws_every_panel_kind(tmp_path):
    lines = lines_from_rows(ROWS, x="n", label=lambda r: r["provider"], band=("p20", "p80"))
    panels = [
        Panel("log", "n", "us", lines, hlines=[HLine(2.2, "ceiling")], xscale="log", yscale="log"),
        Panel("cat", "case", "us", [Line("a", [0, 1], [1, 2])], xticks=["x", "y"], ymin=0),
        Panel("symlog", "s", "calls", [Line("t", [0, 1], [0, 5000], marker=None)],
              yscale="symlog", linthresh=100),
    ]  # fmt: skip
    path = write_png(tmp_path / "p" / "x.png", Figure(panels, title="t", ncols=2), dpi=50)
    assert path == tmp_path / "p" / "x.png"
    height, width, _ = matplotlib.image.imread(path).shape
    assert (width, height) == (2 * 5.5 * 50, 2 * 3.8 * 50)  # 2 columns x 2 rows of panels


def test_write_png_needs_a_panel(tmp_path):
    with pytest.raises(ValueError, match="the figure has no panels"):
        write_png(tmp_path / "x.png", Figure([]))


def test_write_png_without_matplotlib_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    assert write_png(tmp_path / "x.png", Figure([Panel("t", "x", "y", [])])) is None
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert not (tmp_path / "x.png").exists()
