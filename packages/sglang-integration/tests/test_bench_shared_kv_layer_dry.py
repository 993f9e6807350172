"""bench_shared_kv_layer.py --dry on CPU: SGLang's sparse-MLA kernel imports with the signature
the benchmark calls, and the whole layer runs at toy sizes (a smoke check, not a timing).

Test doubles, because the real kernels need CUDA: DeepGEMM's fp8 ``mqa_logits`` and SGLang's
Triton ``sparse_mla_prefill`` are replaced by float32 torch references inside the benchmark's
``--dry`` mode; the cpkv ops run for real on the torch backend.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).parents[1] / "benchmarks"
pytestmark = pytest.mark.slow  # imports sglang (tens of seconds on a busy runner)


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(BENCH_DIR))
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_shared_kv_layer", BENCH_DIR / "bench_shared_kv_layer.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH_DIR))


def test_dry_run_checks_parity_and_writes_the_record(bench, tmp_path):
    summaries = bench.main(["--dry", "--out", str(tmp_path)])
    (summary,) = summaries.values()
    assert summary["sparse_mla_prefill_params"] == ["q", "kv", "indices", "sm_scale", "d_v"]
    assert summary["parity[torch]"] == {
        "scratch_equals_torch_path": True,
        "indices_equal_torch_path": True,
        "attention_cpkv_equals_replica": True,
    }
    # 3 requests on a 128-token prefix (8 pages of 16) + 40 new tokens each (3 private pages):
    # the prefix is materialised once.
    assert summary["used_slots[torch]"] == 8 + 3 * 3
    assert 0 < summary["share"] < 1
    # the headline's inputs were timed (a missing row reads as 0.0 or None), each goal judged
    assert summary["plan_us"] > 0 and summary["host_us_per_layer"] > 0
    assert all(isinstance(met, bool) for met in summary["goals_met"].values())
    record = json.loads((tmp_path / "shared-kv-layer.json").read_text())
    rows = record["rows"]
    timed = {(r["phase"], r["path"], r["mode"]) for r in rows if r["p50"] is not None}
    assert timed >= {
        ("plan", "cpkv", "host"),
        ("plan", "cpkv", "eager"),
        ("prepare", "cpkv", "host"),
        ("cpkv_ops", "cpkv", "eager"),
        ("cpkv_ops", "cpkv", "host"),
        ("cpkv_ops: materialize + fill", "cpkv", "eager"),
        ("cpkv_ops: remap", "cpkv", "eager"),
        ("indexer", "both", "eager"),
        ("attention", "cpkv", "eager"),
        ("attention", "replica", "eager"),
        ("layer", "cpkv", "eager"),
        ("layer", "replica", "eager"),
    }
    graphs = [r for r in rows if r["mode"] == "graph"]
    assert graphs and all(r["note"] == "CUDA graphs need a GPU" for r in graphs)
    variants = {r["meta"].get("variant") for r in rows if r["phase"] == "plan"}
    assert "plan_layout (definition)" in variants
    assert "plan_layout_static validate=False (launch)" in variants
    for key in ("p50", "p20", "p80", "unit", "torch", "timestamp", "command", "gpu_name"):
        assert key in rows[0]
    assert record["benchmark"] == "shared-kv-layer" and all(r["dry"] is True for r in rows)
    (summary_row,) = [r for r in rows if r["phase"] == "summary"]
    assert summary_row["meta"]["share"] == summary["share"]
    assert (tmp_path / "shared-kv-layer.png").stat().st_size > 0


def test_the_real_run_refuses_without_cuda(bench, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(SystemExit, match="no CUDA device: run with --dry"):
        bench.main(["--out", str(tmp_path)])


def test_ipython_stand_in_only_for_the_import(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    from _sglang_kernels import ipython_stand_in

    real = importlib.util.find_spec("IPython") is not None
    with ipython_stand_in() as stood_in:
        from IPython.display import HTML, display  # what sglang.utils imports

        assert stood_in is not real
    if stood_in:
        assert HTML("x") is None and display("x") is None
        assert "IPython" not in sys.modules and "IPython.display" not in sys.modules
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    saved = {n: sys.modules.pop(n) for n in ("IPython", "IPython.display") if n in sys.modules}
    try:
        with ipython_stand_in() as stood_in:
            assert stood_in and sys.modules["IPython.display"].HTML("x") is None
        assert "IPython" not in sys.modules  # taken out again
    finally:
        sys.modules.update(saved)
    # matplotlib asks a loaded IPython whether a REPL runs (an H200 run died there once, with the
    # stand-in left behind); after the block it finds none
    import matplotlib.pyplot as plt

    plt.switch_backend("agg")
    plt.close(plt.figure())


def test_render_redraws_the_table_from_the_record_without_graph_times(bench, tmp_path):
    bench.main(["--dry", "--out", str(tmp_path)])
    page = tmp_path / "page.md"
    page.write_text("# prose kept\n")
    (tmp_path / "shared-kv-layer.png").unlink()
    bench.main(["--render", "--out", str(tmp_path), "--md", str(page)])
    text = page.read_text()
    assert text.startswith("# prose kept\n")
    assert "<!-- shared-kv-layer cpu:begin -->" in text and "LayerStep share of the layer" in text
    # SGLang runs prefill eager under KV sharding: the graph rows stay in the JSON, unshown
    assert "graph" not in text.lower()
    assert (tmp_path / "shared-kv-layer.png").stat().st_size > 0
