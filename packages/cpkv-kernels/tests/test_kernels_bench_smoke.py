"""bench_kernels.py on CPU (torch + interpreted Triton, toy sizes) and its re-render of the record.

A smoke check of every case's setup, parity check, rows, tables and plot, not a timing. Each run is
its own process, as the benchmark is run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import benchkit
import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench_kernels.py"
RECORD = Path(__file__).parents[3] / "docs" / "benchmarks"


def run_bench(*args: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_cpu_smoke_run_keeps_the_gpu_rows(tmp_path):
    shutil.copy(RECORD / "cpkv-kernels.json", tmp_path)
    recorded = benchkit.read_rows(tmp_path / "cpkv-kernels.json")
    out = run_bench("--device", "cpu", "--out", str(tmp_path), "--md", str(tmp_path / "k.md"))
    rows = benchkit.read_rows(tmp_path / "cpkv-kernels.json")
    assert rows[: len(recorded)] == recorded  # the H200 rows are another device's: kept
    cpu = rows[len(recorded) :]
    assert {r["gpu_name"] for r in cpu} == {None} and {r["mode"] for r in cpu} == {"host"}
    assert {r["provider"] for r in cpu} == {
        "torch",
        "triton",
        "index_select",
        "index_copy_",
        "copy",
    }
    ops = {r["op"] for r in cpu}
    assert ops == {"copy_ceiling", "materialize", "fill_current", "remap_locs", "build_inverse",
                   "current_page_mask"}  # fmt: skip
    assert all(r["parity"] for r in cpu if r["provider"] == "triton")  # checked against torch
    assert all(r["p50"] is not None and r["p20"] <= r["p50"] <= r["p80"] for r in cpu)
    md = (tmp_path / "k.md").read_text()
    assert "<!-- cpkv-kernels cpu host:begin -->" in md
    assert "<!-- cpkv-kernels NVIDIA H200 graph:begin -->" in md  # every device's tables
    assert "[host] p50, us" in out and (tmp_path / "cpkv-kernels.png").stat().st_size > 0


def test_render_reproduces_the_record(tmp_path):
    for name in ("cpkv-kernels.json", "cpkv-kernels.md"):
        shutil.copy(RECORD / name, tmp_path)
    run_bench("--render", "--out", str(tmp_path), "--md", str(tmp_path / "cpkv-kernels.md"))
    for name in ("cpkv-kernels.json", "cpkv-kernels.md"):
        assert (tmp_path / name).read_text() == (RECORD / name).read_text(), name
    record = json.loads((tmp_path / "cpkv-kernels.json").read_text())
    assert record["benchmark"] == "cpkv-kernels"
