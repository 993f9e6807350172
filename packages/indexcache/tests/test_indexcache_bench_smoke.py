"""The benchmark runs end to end at toy sizes (a smoke check, not a timing), and re-renders."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import benchkit
import pytest
import torch

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench_indexer.py"
RECORD = Path(__file__).parents[3] / "docs" / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("indexcache_bench_indexer", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    yield module
    torch.set_num_threads(threads)  # main() pins CPU threads for timing


def test_bench_writes_json_png_and_md_section(bench, tmp_path):
    md = tmp_path / "indexcache.md"
    stale = "stale section body 7f3e"  # a marker no path or command line contains
    md.write_text(
        f"# x\n<!-- indexcache cpu:begin -->\n{stale}\n<!-- indexcache cpu:end -->\ntail\n"
    )
    recorded = benchkit.read_rows(RECORD / "indexcache.json")  # H200 rows, CPU rows at T >= 1K
    cpu_layer = next(r for r in recorded if r["gpu_name"] is None and r["op"] == "indexer_layer")
    redone = {**cpu_layer, "case": "T=96 Q=16 H=32 D=128 topk=2048", "p50": -1.0}
    benchkit.write_record(tmp_path / "indexcache.json", "indexcache", [*recorded, redone])
    bench.main(
        ["--cpu", "--seq-lens", "64", "96", "--query-rows", "16", "--reps", "2",
         "--out", str(tmp_path), "--md", str(md)]
    )  # fmt: skip
    rows = benchkit.read_rows(tmp_path / "indexcache.json")
    # other devices' rows and this device's cases not run again are kept; a case run again is not
    assert rows[: len(recorded)] == recorded and redone not in rows
    rows = rows[len(recorded) :]
    assert {(r["op"], r["schedule"]) for r in rows} == {
        ("indexer_layer", None),
        ("indexer_78_layers", "freq 1"),
        ("indexer_78_layers", "freq 4 offset 2"),
    }
    assert {r["computed_layers"] for r in rows} == {1, 78, 21}
    for key in ("p50", "p20", "p80", "unit", "torch", "timestamp", "command", "cpu", "gpu_name"):
        assert key in rows[0]
    assert rows[0]["command"].endswith(f"--out {tmp_path} --md {md}")
    assert (tmp_path / "indexcache.png").stat().st_size > 0
    text = md.read_text()
    assert stale not in text and text.startswith("# x\n<!-- indexcache cpu:begin -->\nDevice: CPU")
    assert "<!-- indexcache cpu:end -->\ntail\n" in text  # the text around it is kept
    cpu = benchkit.read_section(text, "indexcache cpu")
    assert cpu.count("Device: CPU") == 2  # the recorded smoke run and this one
    assert cpu.index("| 96 | 16 | torch-ref |") < cpu.index("| 1,024 | 128 | torch-ref |")
    assert "<!-- indexcache NVIDIA H200:begin -->" in text  # appended: the md lacked it


def test_render_reproduces_the_record(bench, tmp_path):
    for name in ("indexcache.json", "indexcache.md"):
        shutil.copy(RECORD / name, tmp_path / name)
    bench.main(["--render", "--out", str(tmp_path), "--md", str(tmp_path / "indexcache.md")])
    for name in ("indexcache.json", "indexcache.md"):
        assert (tmp_path / name).read_text() == (RECORD / name).read_text(), name
