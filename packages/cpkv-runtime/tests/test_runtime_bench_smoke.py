"""bench_runtime.py on CPU at toy sizes (a smoke check, not a timing) and its re-render.

Each run is its own process, as the benchmark is run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import benchkit
import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench_runtime.py"
RECORD = Path(__file__).parents[3] / "docs" / "benchmarks"
KEY = ("op", "case", "provider", "row_bytes")


def run_bench(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def copy_record(tmp_path: Path) -> None:
    for name in ("cpkv-runtime.json", "cpkv-runtime.md"):
        shutil.copy(RECORD / name, tmp_path / name)


@pytest.mark.slow
def test_cpu_run_replaces_only_the_cases_it_measured(tmp_path):
    copy_record(tmp_path)
    recorded = benchkit.read_rows(tmp_path / "cpkv-runtime.json")
    # --max-gib 0.05 keeps only B=1 x 8K of the quick grid (and the dedup case)
    out = run_bench("--device", "cpu", "--quick", "--reps", "2", "--max-gib", "0.05",
                    "--out", str(tmp_path), "--md", str(tmp_path / "cpkv-runtime.md"))  # fmt: skip
    assert "# cpkv-runtime ops on" in out
    rows = benchkit.read_rows(tmp_path / "cpkv-runtime.json")
    new = [r for r in rows if r["timestamp"] not in {x["timestamp"] for x in recorded}]
    assert {r["case"] for r in new} == {
        "B=1 tok=8K ext=1024",
        "8 x 64K shared prefix, dedup=on",
        "8 x 64K shared prefix, dedup=off",
    }
    assert all(r["gpu_name"] is None and r["device"] == "cpu" for r in new)
    assert all(r["p20"] <= r["p50"] <= r["p80"] and r["unit"] == "us" for r in new)
    redone = {(benchkit.device_label(r), *(r[k] for k in KEY)) for r in new}
    kept = [r for r in recorded if (benchkit.device_label(r), *(r[k] for k in KEY)) not in redone]
    assert rows == kept + new  # H200 rows and CPU cases not run again stay as recorded
    assert any(r["case"] == "B=8 tok=32K ext=1024" and r["gpu_name"] is None for r in kept)
    md = (tmp_path / "cpkv-runtime.md").read_text()
    old = (RECORD / "cpkv-runtime.md").read_text()
    h200 = "cpkv-runtime NVIDIA H200 row copies"
    assert benchkit.read_section(md, h200) == benchkit.read_section(old, h200)
    assert md.split("<!--")[0] == old.split("<!--")[0]  # the hand-written opening is kept
    assert (tmp_path / "cpkv-runtime.png").stat().st_size > 0


def test_render_reproduces_the_record(tmp_path):
    copy_record(tmp_path)
    run_bench("--render", "--out", str(tmp_path), "--md", str(tmp_path / "cpkv-runtime.md"))
    for name in ("cpkv-runtime.json", "cpkv-runtime.md"):
        assert (tmp_path / name).read_text() == (RECORD / name).read_text(), name
