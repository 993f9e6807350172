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


def _script_module():
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("fetch_gpu_wheels", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_packed_site_leaves_out_what_the_box_has_and_sglangs_unused_parts(tmp_path):
    import tarfile
    import zipfile

    fgw = _script_module()
    wheels = {
        "numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl": ["numpy/__init__.py"],
        "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl": [
            "sglang/__init__.py", "sglang/srt/layers/attn.py", "sglang/test/t.py",
            "sglang/multimodal_gen/m.py", "sglang/srt/rust_extensions/_server.so",
            "sglang/srt/rust_extensions/__init__.py", "sglang/__pycache__/x.pyc",
        ],
        "fastapi-0.165.0-py3-none-any.whl": ["fastapi/__init__.py"],
    }  # fmt: skip
    for name, files in wheels.items():
        with zipfile.ZipFile(tmp_path / name, "w") as zf:
            for f in files:
                zf.writestr(f, "x = 1\n")
    packed = fgw.pack(tmp_path)
    with tarfile.open(packed) as tf:
        got = {m.name.removeprefix("./") for m in tf.getmembers() if m.isfile()}
    assert got == {
        "sglang/__init__.py", "sglang/srt/layers/attn.py",
        "sglang/srt/rust_extensions/__init__.py", "fastapi/__init__.py",
    }  # fmt: skip
    assert not list(tmp_path.glob("*.part"))
