"""The benchmark harness runs end to end at toy sizes (a smoke check, not a timing)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench_indexer.py"


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
    md.write_text("# x\n<!-- BEGIN cpu -->\nold\n<!-- END cpu -->\ntail\n")
    recorded = [{"gpu_name": "NVIDIA H200", "op": "indexer_layer"}, {"gpu_name": None, "op": "x"}]
    (tmp_path / "indexcache.json").write_text(json.dumps(recorded))
    bench.main(
        ["--cpu", "--seq-lens", "64", "96", "--query-rows", "16", "--reps", "2",
         "--out", str(tmp_path), "--md", str(md)]
    )  # fmt: skip
    rows = json.loads((tmp_path / "indexcache.json").read_text())
    # the other device's rows are kept, this device's earlier rows replaced
    assert rows[0] == recorded[0] and recorded[1] not in rows
    rows = rows[1:]
    assert {(r["op"], r["schedule"]) for r in rows} == {
        ("indexer_layer", None),
        ("indexer_78_layers", "freq 1"),
        ("indexer_78_layers", "freq 4 offset 2"),
    }
    assert {r["computed_layers"] for r in rows} == {1, 78, 21}
    for key in ("p50", "p20", "p80", "unit", "torch", "timestamp", "command", "cpu", "gpu_name"):
        assert key in rows[0]
    assert (tmp_path / "indexcache.png").stat().st_size > 0
    text = md.read_text()
    assert "old" not in text and text.endswith("<!-- END cpu -->\ntail\n")
    assert "| 96 | 16 | torch-ref |" in text


def test_md_section_needs_begin_then_end(bench, tmp_path):
    md = tmp_path / "indexcache.md"
    md.write_text("<!-- END cpu -->\n<!-- BEGIN cpu -->\n")
    with pytest.raises(
        SystemExit, match=r"no '<!-- BEGIN cpu -->' \.\.\. '<!-- END cpu -->' section"
    ):
        bench.write_md_section(md, "cpu", "table")
    md.write_text("a\n<!-- BEGIN cpu -->\nold\n<!-- END cpu -->\nb\n")
    bench.write_md_section(md, "cpu", "table")
    assert md.read_text() == "a\n<!-- BEGIN cpu -->\ntable\n<!-- END cpu -->\nb\n"
