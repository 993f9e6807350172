"""bench_cp_layer_scaling.py --dry on CPU: two gloo ranks (cp 2) and one (cp 1) run the real
per-rank layer at toy sizes into one record; the efficiency table is computed from both.

Test doubles, because the real kernels need CUDA: DeepGEMM's fp8 ``mqa_logits`` and SGLang's
Triton ``sparse_mla_prefill`` are the float32 torch references of ``_layer_cases`` inside the
benchmark's ``--dry`` mode; the gather (``cpkv_runtime.gather_pages`` + a gloo all-gather), the
placement (``sglang_cpkv.plugin.shared_kv.plan_forward``) and the cpkv ops run for real.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).parents[1] / "benchmarks"
BENCH = BENCH_DIR / "bench_cp_layer_scaling.py"
PHASES = {"gather", "cpkv_ops", "indexer", "attention", "layer"}


def _report():
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import _cp_scaling_report

        return _cp_scaling_report
    finally:
        sys.path.remove(str(BENCH_DIR))


def _run(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=1800,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.mark.slow
def test_dry_cp2_and_cp1_runs_make_one_record_with_efficiency(tmp_path):
    pytest.importorskip("matplotlib")
    _run("--dry", "--world", "2", "--out", str(tmp_path))
    one = _run("--dry", "--world", "1", "--cases", "dry 1x96", "--out", str(tmp_path))
    record = json.loads((tmp_path / "cp-layer-scaling.json").read_text())
    rows = record["rows"]
    got = {(r["case"], r["cp"], r["phase"]) for r in rows}
    want = {(c, 2, p) for c in ("dry 1x96", "dry 3x(128+40)") for p in PHASES}
    assert got == want | {("dry 1x96", 1, p) for p in PHASES}
    for r in rows:
        assert r["parity"] and r["rows_equal_replica"] and r["attention_equals_replica"], r
        assert len(r["p50_ranks"]) == r["cp"] and r["p50"] == max(r["p50_ranks"]) > 0
        assert r["dry"] is True and r["gpu_name"] is None
    shared = [r for r in rows if r["case"] == "dry 3x(128+40)"]
    # 3 requests on a 128-token prefix (8 pages of 16): the prefix is gathered once, split
    # over the 2 ranks by page owner
    assert {r["gathered_pages"] for r in shared} == {8}
    assert all(r["block_pages"] >= 4 for r in shared)
    assert all(r["gathered_pages"] == 0 for r in rows if r["case"] == "dry 1x96")
    # one efficiency per row of the record: the case run at both sizes has one per phase and
    # size (cp 1 its own baseline), the case run at cp 2 only has none (no baseline)
    eff = {(e["case"], e["cp"], e["phase"]): e["efficiency"] for e in _report().efficiency(rows)}
    assert set(eff) == got
    for phase in PHASES:
        assert eff[("dry 1x96", 1, phase)] == 1.0
        at2 = eff[("dry 1x96", 2, phase)]
        assert isinstance(at2, float) and at2 > 0, (phase, at2)
        assert eff[("dry 3x(128+40)", 2, phase)] is None
    assert "cp 2 p50 (eff.)" in one.stdout and "%)" in one.stdout
    assert (tmp_path / "cp-layer-scaling.png").stat().st_size > 0


def test_efficiency_table():
    rep = _report()
    row = {"op": "cp_layer", "provider": "cpkv", "gpu_name": "H200"}
    rows = [
        {**row, "case": "c", "phase": "attention", "cp": 1, "p50": 100.0},
        {**row, "case": "c", "phase": "attention", "cp": 2, "p50": 60.0},
        {**row, "case": "c", "phase": "attention", "cp": 4, "p50": 25.0},
        {**row, "case": "d", "phase": "gather", "cp": 2, "p50": 7.0},  # no cp 1 run: no efficiency
        {**row, "gpu_name": None, "case": "c", "phase": "attention", "cp": 2, "p50": 1.0},
    ]
    eff = {(e["device"], e["case"], e["cp"]): e["efficiency"] for e in rep.efficiency(rows)}
    assert eff == {
        ("H200", "c", 1): 1.0,
        ("H200", "c", 2): pytest.approx(100 / 120),
        ("H200", "c", 4): 1.0,
        ("H200", "d", 2): None,
        ("cpu", "c", 2): None,  # another device's cp 1 is not its baseline
    }
    text = rep.table(rows)
    assert "83%" in text and "100%" in text


def test_bad_input_is_refused():
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--dry", "--cases", "1x64K", "--out", "x"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "is not a case of --dry" in proc.stderr
