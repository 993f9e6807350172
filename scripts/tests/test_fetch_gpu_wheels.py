"""``scripts/fetch-gpu-wheels``: the wheel folders ``scripts/gpu-suite`` reads, pinned, in one
command. Checked without downloading (``--dry-run``): every pin is exact, sglang and
apache-tvm-ffi are the lock's, and the sgl-deep-gemm releases are the ones that pair with the GPU
box's torch 2.11 (the locked 0.2.3.post2 pairs with torch 2.14 only), by ``deepgemm_compat``'s
own pairing table; and the box's image plus the packed site hold every module the GPU steps'
SGLang imports load (imported here with everything else blocked).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from deepgemm_compat._detect import pairing_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fetch-gpu-wheels"
GPU_BOX_TORCH = "2.11"  # docs/benchmarks/*.md: torch 2.11.0+cu130 on the H200
#: What the GPU box's ``backend`` and ``vsupstream`` steps import, after the stand-ins' stubs.
BOX_IMPORTS = (
    "sglang.srt.layers.attention.dsa_backend", "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.layers.attention.dsa.dsa_indexer", "sglang.srt.mem_cache.page_interleave_pool",
    "sglang.srt.model_executor.model_runner", "sglang_cpkv.plugin.entry",
)  # fmt: skip
#: Where ``_skv_backend_stand_ins`` (whose ``stub_missing_packages`` the GPU steps call) lives.
STAND_INS = ROOT / "packages" / "sglang-integration" / "tests"
#: On the box but not in ``SGLANG_NEEDS``: sglang (packed with them) and ``.whl/``'s wheels.
CARRIED = ("sglang", "sgl-deep-gemm", "apache-tvm-ffi")


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


def _import_as_on_the_box(allowed, ours, stand_ins, modules, out, without_stand_in=None):
    """The child's program (its source is run alone in a fresh interpreter): import ``modules``
    with every top-level module blocked whose distributions are none of ``allowed`` (normalised
    names) and that is none of ``ours``, after the GPU steps' own stubs (less
    ``without_stand_in``); write to ``out`` what failed, as {"failed": {module: {"missing",
    "distributions", "error"}}, "cuda_only": {module: [importers]}}. ``cuda_only``: imports that
    SGLang's loaded modules make at module level under a CUDA test (``if _is_cuda:``), outside
    any ``try``, of a blocked module that no stub provides: they do not run on a CPU, and fail on
    the box."""
    import ast
    import importlib
    import importlib.abc
    import importlib.metadata
    import importlib.util
    import json
    import re
    import sys
    from pathlib import Path

    owners = importlib.metadata.packages_distributions()
    blocked = {
        top for top, dists in owners.items()
        if top not in ours and not any(re.sub(r"[-_.]+", "-", d).lower() in allowed for d in dists)
    }  # fmt: skip

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, package=None: (
        None if name.split(".")[0] in blocked else find_spec(name, package)
    )
    sys.path.insert(0, stand_ins)
    stubs = importlib.import_module("_skv_backend_stand_ins")
    stubs._KERNEL_MODULES = tuple(m for m in stubs._KERNEL_MODULES if m != without_stand_in)
    stubs.stub_missing_packages()
    failed = {}
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:
            missing = (e.name or "").split(".")[0] if isinstance(e, ModuleNotFoundError) else ""
            failed[module] = {
                "missing": missing,
                "distributions": owners.get(missing, []),
                "error": f"{type(e).__name__}: {e}",
            }

    def guarded_imports(stmts, guarded=False):
        for st in stmts:
            if isinstance(st, ast.If):
                test = ast.unparse(st.test)
                cuda = "cuda" in test.lower() and not test.startswith("not ")
                yield from guarded_imports(st.body, guarded or cuda)
                yield from guarded_imports(st.orelse, guarded)
            elif guarded and isinstance(st, ast.ImportFrom) and st.level == 0 and st.module:
                yield st.module
            elif guarded and isinstance(st, ast.Import):
                yield from (a.name for a in st.names)

    cuda_only = {}
    for name, module in sorted(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if not name.startswith("sglang.") or not path.endswith(".py"):
            continue
        for target in guarded_imports(ast.parse(Path(path).read_text()).body):
            if target.split(".")[0] in blocked and target not in sys.modules:
                cuda_only.setdefault(target, []).append(name)
    Path(out).write_text(json.dumps({"failed": failed, "cuda_only": cuda_only}))


def _box_import_failures(tmp_path, without=(), without_stand_in=None):
    """:data:`BOX_IMPORTS` that fail to import, in a subprocess, with only what the GPU box has:
    its image (``BOX_IMAGE``), the packed site (``SGLANG_NEEDS``), the carried wheels and our own
    packages; ``without``: distributions taken out of that. Returns the child's report (see
    :func:`_import_as_on_the_box`)."""
    fgw = _script_module()
    allowed = {fgw._norm(n) for n in (*fgw.SGLANG_NEEDS, *fgw.BOX_IMAGE, *CARRIED)}
    allowed -= {fgw._norm(n) for n in without}
    ours = sorted(
        p.name for p in ROOT.glob("*/*/src/*")
        if p.parts[-4] in ("packages", "tools") and p.is_dir() and p.name.isidentifier()
    )  # fmt: skip
    program = tmp_path / "import_as_on_the_box.py"
    program.write_text(
        f"{inspect.getsource(_import_as_on_the_box)}\n"
        "import json, sys\n_import_as_on_the_box(*json.loads(sys.argv[1]))\n"
    )
    out = tmp_path / "failed.json"
    args = [sorted(allowed), ours, str(STAND_INS), list(BOX_IMPORTS), str(out), without_stand_in]
    run = subprocess.run(
        [sys.executable, str(program), json.dumps(args)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_box_imports_the_gpu_steps_sglang_modules_from_its_image_and_the_packed_site(tmp_path):
    """The box has its image and the packed site, nothing else: a distribution that an import of
    the GPU steps' modules loads but that is in neither fails there only, after a GPU run has
    started (``sniffio``, which SGLang's anyio imports, did in ``backend`` and ``vsupstream``).
    Here, everything else is blocked and the same modules are imported on the CPU.

    An import SGLang makes only on CUDA (``if _is_cuda: from sgl_kernel.utils import ...`` in its
    Triton attention backend, which failed on the box next) does not run on a CPU: those are read
    from the loaded modules' source instead, and each must be one the GPU steps stub
    (``_skv_backend_stand_ins._KERNEL_MODULES``)."""
    fgw = _script_module()
    assert set(fgw.ON_THE_BOX) <= set(fgw.BOX_IMAGE)  # left out of the site because it is there
    report = _box_import_failures(tmp_path)
    failed, cuda_only = report["failed"], report["cuda_only"]
    assert not failed, (
        "on the GPU box these would fail to import:\n"
        + "".join(
            f"  {module}: {f['error']} (distribution: {', '.join(f['distributions']) or '?'})\n"
            for module, f in failed.items()
        )
        + "add each missing module's distribution to SGLANG_NEEDS in scripts/fetch-gpu-wheels, "
        "then rerun scripts/fetch-gpu-wheels"
    )
    assert not cuda_only, (
        "on the GPU box SGLang imports these under `if _is_cuda:`, and nothing provides them: "
        f"{cuda_only}; stub them in _skv_backend_stand_ins._KERNEL_MODULES or carry them"
    )


@pytest.mark.slow
def test_the_box_import_check_catches_a_distribution_or_a_stand_in_left_out(tmp_path):
    """The planted bugs, one run each: ``sniffio`` taken out of what the box has (as before it
    was added to ``SGLANG_NEEDS``) must be reported, and only it, missing; ``sgl_kernel.utils``
    taken out of the stand-ins (as before it was added) must be reported as a CUDA-only import
    of SGLang's Triton attention backend, and nothing else."""
    failed = _box_import_failures(tmp_path, without=["sniffio"])["failed"]
    assert "sglang.srt.layers.attention.dsa_backend" in failed, failed
    assert {f["missing"] for f in failed.values()} == {"sniffio"}, failed
    report = _box_import_failures(tmp_path, without_stand_in="sgl_kernel.utils")
    assert not report["failed"]
    assert report["cuda_only"] == {
        "sgl_kernel.utils": ["sglang.srt.layers.attention.triton_backend"]
    }, report["cuda_only"]
