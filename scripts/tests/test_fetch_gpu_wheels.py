"""``scripts/fetch-gpu-wheels``: the wheel folders ``scripts/gpu-suite`` reads, pinned, in one
command. Checked without downloading (``--dry-run``): every pin is exact, sglang and
apache-tvm-ffi are the lock's, and the sgl-deep-gemm releases are the ones that pair with the GPU
box's torch 2.11 (the locked 0.2.3.post2 pairs with torch 2.14 only), by ``deepgemm_compat``'s
own pairing table.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from deepgemm_compat._detect import pairing_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fetch-gpu-wheels"
GPU_BOX_TORCH = "2.11"  # docs/benchmarks/*.md: torch 2.11.0+cu130 on the H200


def _plan() -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, check=True
    ).stdout
    return {line.split(":")[0]: line.split(": ", 1)[1].split() for line in out.splitlines() if line}


def _locked(name: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return next(p["version"] for p in lock["package"] if p["name"] == name)


def test_the_folders_are_gpu_suites():
    plan = _plan()
    assert set(plan) == {".whl/", ".whl-015/", ".whl-sglang/"}
    suite = (ROOT / "scripts" / "gpu-suite").read_text()
    assert all(f"{folder}*.whl" in suite for folder in plan)
    assert all("==" in req for reqs in plan.values() for req in reqs)


def test_sglang_and_tvm_ffi_are_the_locks():
    plan = _plan()
    assert plan[".whl-sglang/"][0] == f"sglang=={_locked('sglang')}"
    assert f"apache-tvm-ffi=={_locked('apache-tvm-ffi')}" in plan[".whl/"]


def test_deep_gemm_pairs_with_the_gpu_boxs_torch_and_the_locked_one_does_not():
    plan = _plan()
    for folder in (".whl/", ".whl-015/"):
        (dg,) = [r for r in plan[folder] if r.startswith("sgl-deep-gemm==")]
        row = pairing_for(dg.split("==")[1])
        assert row is not None and GPU_BOX_TORCH in row[2], dg
        assert row[4] is None or f"apache-tvm-ffi=={row[4]}" in plan[".whl/"]
    locked = pairing_for(_locked("sgl-deep-gemm"))
    assert locked is not None and GPU_BOX_TORCH not in locked[2]
