"""bench_shared_kv_vs_upstream.py on CPU at toy scale, with both of SGLang's DSA prefill kernels
it measures (``--prefill-backends triton_sparse_mla flashmla_sparse``): each kernel's rows are
their own (keyed by ``prefill``, with the query heads it ran), and the TTFT model keeps them apart.

The script runs in a subprocess (it loads the plugin into SGLang's modules), through SGLang's own
backend, indexer and pools. Stood in because they need CUDA: the sparse-MLA kernels (FlashMLA's
``flash_mla_sparse_fwd``, SGLang's Triton ``sparse_mla_prefill``; the suite's float32 reference
in ``_skv_backend_stand_ins``), DeepGEMM's fp8 MQA logits (SGLang's torch fallback,
``SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1``); SGLang's other Triton kernels run in Triton's
interpreter. A smoke check of the record, not a timing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench_shared_kv_vs_upstream.py"
pytestmark = pytest.mark.slow  # imports sglang twice (tens of seconds on a busy runner)


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_shared_kv_vs_upstream", BENCH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH.parent))


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> list[dict]:
    pytest.importorskip("sglang")
    pytest.importorskip("matplotlib")
    out = tmp_path_factory.mktemp("vs")
    env = os.environ | {
        "CPKV_SHARED_KV": "1",
        "SGLANG_DSA_FUSE_TOPK": "0",
        "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1",
        "TRITON_INTERPRET": "1",
    }
    cmd = [sys.executable, str(BENCH), "--device", "cpu", "--out", str(out), "--scale", "0.004",
           "--cp", "2", "--cases", "8x8K fresh", "--no-ttft", "--reps", "1",
           "--prefill-backends", "triton_sparse_mla", "flashmla_sparse"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "shared-kv-vs-upstream.json").read_text())["rows"]


def test_each_prefill_kernel_has_its_own_rows_and_heads(record):
    rows = {(r["prefill"], r["pool"]): r for r in record}
    assert set(rows) == {(k, p) for k in ("triton_sparse_mla", "flashmla_sparse")
                         for p in ("sglang", "cpkv", "replica")}  # fmt: skip
    for pool in ("sglang", "cpkv", "replica"):
        # Triton's sparse MLA is validated to 32 heads; FlashMLA runs GLM-5.1's 64 per rank
        assert rows["triton_sparse_mla", pool]["query_heads"] == 32
        assert rows["flashmla_sparse", pool]["query_heads"] == 64
        # the pool's capacity and gathers do not depend on the attention kernel
        for key in ("tokens_per_rank", "gather_received_bytes", "scratch_pages"):
            assert rows["triton_sparse_mla", pool][key] == rows["flashmla_sparse", pool][key]
    for kernel in ("triton_sparse_mla", "flashmla_sparse"):
        assert rows[kernel, "cpkv"]["layer_ms"] > 0 and rows[kernel, "replica"]["layer_ms"] > 0
        assert "layer_ms" not in rows[kernel, "sglang"]  # refused by SGLang's gate on SM90
        assert rows[kernel, "sglang"]["refusal"].startswith("refused by SGLang's gate")


def test_rerun_of_one_kernel_keeps_the_other(bench, record):
    """A FlashMLA-only rerun replaces FlashMLA's rows and keeps Triton's (the report key)."""
    from benchkit._record import merge_rows

    flash = [r | {"layer_ms": 1.0} for r in record if r["prefill"] == "flashmla_sparse"]
    merged = merge_rows(record, flash, bench.REPORT_KEY)
    assert len(merged) == len(record)
    flash_ms = {r["layer_ms"] for r in merged if r["prefill"] == "flashmla_sparse"}
    assert flash_ms == {1.0}
    assert all(r.get("layer_ms") != 1.0 for r in merged if r["prefill"] == "triton_sparse_mla")


def _point(case: str, pool: str, prefill: str, layer_ms: float) -> dict:
    return {"case": case, "pool": pool, "prefill": prefill, "query_heads": 64, "layer_ms": layer_ms,
            "plan_host_us": 0.0, "gather_ms_model": 0.0, "nvlink_gbps": 450.0}  # fmt: skip


def test_ttft_model_per_kernel(bench):
    """One TTFT row per (kernel, pool); each from its own kernel's points: 8 chunks of 16K over
    78 layers, layer time linear in the prefix between the measured points."""
    points = (("ttft 0+16K", 1.0), ("ttft 56K+16K", 2.0), ("ttft 112K+16K", 3.0))
    rows = [_point(case, pool, kernel, ms * scale)
            for kernel, scale in (("triton_sparse_mla", 1.0), ("flashmla_sparse", 0.25))
            for pool in ("cpkv", "replica") for case, ms in points]  # fmt: skip
    ttft = {(r["prefill"], r["pool"]): r for r in bench.ttft_model(rows)}
    assert set(ttft) == {(k, p) for k in ("triton_sparse_mla", "flashmla_sparse")
                         for p in ("cpkv", "replica")}  # fmt: skip
    # chunks start at 0, 16K, ..., 112K: layer ms 1 + start / 56K (the points lie on a line)
    per_chunk = [1.0 + start / 57344 for start in range(0, 131072, 16384)]
    expected = 78 * sum(per_chunk)
    assert ttft["triton_sparse_mla", "cpkv"]["ttft_ms_gather_serial"] == pytest.approx(expected)
    assert ttft["flashmla_sparse", "cpkv"]["ttft_ms_gather_serial"] == pytest.approx(expected / 4)
