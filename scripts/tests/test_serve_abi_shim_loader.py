"""``scripts/serve/abi_shim_loader.c``: the ABI shim reaches Python processes with the precedence it
had when preloaded itself, and no other process maps it.

The real shim links the GPU box's torch 2.11 and cannot be built here, so three small libraries
take its place with the same structure: ``libreal`` stands for libtorch (it defines the function),
the shim needs ``libreal`` and defines the same function, reaching the original through
``dlsym(RTLD_NEXT)``, and ``libext`` stands for a kernel wheel: it needs ``libreal`` and is loaded
later, with ``RTLD_LOCAL``, the way Python loads an extension module. The loader is built by
``abi_shim.build_loader``, as on the box. The box's check that the wheels' FlashMLA op gets its CUDA
kernel through the loader runs here on a torch op, and the fallback to preloading the shim itself
is driven by given check results (the wheel cannot load without a GPU).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc on this machine")

SCRIPT = Path(__file__).resolve().parents[1] / "serve" / "abi_shim.py"
spec = importlib.util.spec_from_file_location("abi_shim", SCRIPT)
abi_shim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(abi_shim)

REAL = "int cpkv_probe(void) { return 1; }\n"
SHIM = """#define _GNU_SOURCE
#include <dlfcn.h>
int cpkv_probe(void) {
  int (*real)(void) = (int (*)(void))dlsym(RTLD_NEXT, "cpkv_probe");
  return 100 + (real ? real() : -1000);
}
"""
EXT = "int cpkv_probe(void);\nint ext_call(void) { return cpkv_probe(); }\n"
CALL = (
    "import ctypes, os, sys; ext = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL); "
    "print(ext.ext_call())"
)


def build(tmp: Path, name: str, source: str, *needs: str) -> Path:
    src = tmp / f"{name}.c"
    src.write_text(source)
    out = tmp / f"{name}.so"
    links = [f"-l{n}" for n in needs]
    subprocess.run(
        ["gcc", "-shared", "-fPIC", str(src), "-o", str(out), "-Wl,--no-as-needed", f"-L{tmp}",
         *links, "-ldl", "-Wl,-rpath,$ORIGIN"],
        check=True,
    )  # fmt: skip
    return out


@pytest.fixture
def libs(tmp_path) -> dict[str, Path]:
    real = build(tmp_path, "libreal", REAL)
    shim = build(tmp_path, "libcpkv_abi_shim", SHIM, "real")
    ext = build(tmp_path, "libext", EXT, "real")
    return {"real": real, "shim": shim, "ext": ext, "loader": abi_shim.build_loader(shim)}


def call_from_python(ext: Path, preload: Path | None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if preload:
        env["LD_PRELOAD"] = str(preload)
    out = subprocess.run(
        [sys.executable, "-c", CALL, str(ext)], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip().splitlines()[-1])


def test_the_shim_preloaded_itself_takes_precedence(libs):
    """The behaviour the suite relied on: the extension's call goes through the shim to libreal."""
    assert call_from_python(libs["ext"], None) == 1
    assert call_from_python(libs["ext"], libs["shim"]) == 101


def test_through_the_loader_python_sees_the_same(libs):
    assert call_from_python(libs["ext"], libs["loader"]) == 101


def test_mutation_a_local_dlopen_loses_the_precedence(libs):
    """Planted bug: the loader opening the shim RTLD_LOCAL; the extension bypasses the shim."""
    local = abi_shim.build_loader(libs["shim"], flags="RTLD_NOW | RTLD_LOCAL")
    assert call_from_python(libs["ext"], local) == 1


def mapped(preload: Path) -> str:
    """/proc/self/maps of a non-Python process (cat) started with ``preload``."""
    env = {**os.environ, "LD_PRELOAD": str(preload)}
    return subprocess.run(
        ["cat", "/proc/self/maps"], env=env, capture_output=True, text=True, check=True
    ).stdout


def test_a_compiler_like_process_does_not_map_the_shim_or_what_it_needs(libs):
    direct = mapped(libs["shim"])
    assert str(libs["shim"]) in direct and str(libs["real"]) in direct
    through_loader = mapped(libs["loader"])
    assert str(libs["loader"]) in through_loader
    assert str(libs["shim"]) not in through_loader and str(libs["real"]) not in through_loader


def test_the_loader_names_the_shim_it_was_built_beside(tmp_path):
    shim = build(tmp_path, "libother_name", SHIM)
    loader = abi_shim.build_loader(shim)
    assert loader == tmp_path / "libother_name_loader.so"
    env = {**os.environ, "LD_PRELOAD": str(loader)}
    maps = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/maps').read())"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert str(shim) in maps


def test_the_cuda_probe_runs_a_fresh_python_with_the_preload(libs, tmp_path):
    """The box probes sgl_kernel's FlashMLA op; here a torch op with a CUDA kernel registered (the
    locked torch is a CUDA build) and one that does not exist stand in for it."""
    ok, said = abi_shim.registers_for_cuda(libs["loader"], tmp_path, ("json", "aten::add.Tensor"))
    assert ok and said == "cuda kernel: True"
    ok, said = abi_shim.registers_for_cuda(libs["loader"], tmp_path, ("json", "cpkv_missing::op"))
    assert not ok and "does not exist" in said
    ok, said = abi_shim.registers_for_cuda(libs["loader"], tmp_path, ("cpkv_absent", "aten::add"))
    assert not ok and "ModuleNotFoundError" in said
    # a module that warns on import, as torch's and the wheels' do, is no failure
    (tmp_path / "cpkv_noisy.py").write_text("import sys\nprint('a warning', file=sys.stderr)\n")
    ok, said = abi_shim.registers_for_cuda(
        libs["loader"], tmp_path, ("cpkv_noisy", "aten::add.Tensor")
    )
    assert ok and said == "cuda kernel: True"


def test_the_loader_is_chosen_when_the_wheels_register_for_cuda_through_it(tmp_path):
    loader, shim = tmp_path / "libcpkv_abi_shim_loader.so", tmp_path / "libcpkv_abi_shim.so"
    seen = []

    def check(lib):
        seen.append(lib)
        return True, "cuda kernel: True"

    assert abi_shim.choose_preload(loader, shim, check)[0] == loader and seen == [loader]


def test_the_shim_itself_is_preloaded_when_the_loader_falls_short(tmp_path):
    loader, shim = tmp_path / "libcpkv_abi_shim_loader.so", tmp_path / "libcpkv_abi_shim.so"
    results = {loader: (False, "cuda kernel: False"), shim: (True, "cuda kernel: True")}
    chosen, line = abi_shim.choose_preload(loader, shim, results.__getitem__)
    assert chosen == shim and "(cuda kernel: False)" in line and "loads libtorch" in line
    results[shim] = (False, "cuda kernel: False")
    chosen, line = abi_shim.choose_preload(loader, shim, results.__getitem__)
    assert chosen is None and line.startswith("neither the loader")
