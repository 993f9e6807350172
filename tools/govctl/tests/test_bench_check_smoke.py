"""bench_check.py end to end at toy sizes (a smoke check, not a timing), and its re-render."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import benchkit
import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench_check.py"
RECORD = Path(__file__).parents[3] / "docs" / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("govctl_bench_check", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_merges_rows_and_writes_json_png_md(bench, tmp_path):
    for name in ("govctl.json", "govctl.md"):
        shutil.copy(RECORD / name, tmp_path / name)
    recorded = benchkit.read_rows(tmp_path / "govctl.json")
    bench.main(["--sizes", "3", "--runs", "2", "--warmup", "0", "--out", str(tmp_path)])
    rows = benchkit.read_rows(tmp_path / "govctl.json")
    assert rows[: len(recorded)] == recorded  # sizes not run again are kept as they were
    new = rows[len(recorded) :]
    assert [(r["provider"], r["items"], r["runs"]) for r in new] == [
        ("govctl", 3, 2), ("check-jsonschema", 3, 2),
    ]  # fmt: skip
    for r in new:
        assert r["p20"] <= r["p50"] <= r["p80"] and r["unit"] == "s"
        assert r["timestamp"].endswith("+00:00") and r["check_jsonschema"]
    md = (tmp_path / "govctl.md").read_text()
    assert md.startswith("# govctl check: speed\n\n<!-- govctl summary:begin -->\nAt 1,000 items")
    assert "\n| 3 | " in md and "\n| 1,000 | 0.254 s (0.250-0.281) |" in md
    assert "median of 2 runs per cell after 0 warm-up runs" in md  # the new run's notes
    assert "median of 21 runs per cell after 2 warm-up runs" in md  # the recorded run's
    # hand-written prose around the generated sections is kept, the upstream record included
    assert "\n![govctl check vs check-jsonschema](govctl.png)\n" in md
    assert md.endswith(RECORD.joinpath("govctl.md").read_text().rpartition("\n\n")[2])
    assert (tmp_path / "govctl.png").stat().st_size > 0


def test_render_of_the_record_changes_nothing(bench, tmp_path):
    for name in ("govctl.json", "govctl.md"):
        shutil.copy(RECORD / name, tmp_path / name)
    bench.main(["--render", "--out", str(tmp_path)])
    for name in ("govctl.json", "govctl.md"):
        assert (tmp_path / name).read_text() == (RECORD / name).read_text()
