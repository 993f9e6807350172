"""``scripts/serve/kernel_abi.py``: the carried kernel wheels must be built for the box's torch.

The GPU box runs it on the real wheels and torch 2.11. Here it runs on this machine's torch with
kernel libraries compiled in the test: one that imports only symbols this libtorch exports, and a
planted one that imports a torch symbol nobody exports, which must be refused by name. A site
recorded as built for another torch is refused before any library is read.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "serve" / "kernel_abi.py"
spec = importlib.util.spec_from_file_location("kernel_abi", SCRIPT)
kernel_abi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel_abi)

torch = pytest.importorskip("torch")
TORCH_LIB = Path(torch.__file__).parent / "lib"
BOX = torch.__version__
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc on this machine")

# c10::detail::torchCheckFail is exported by every libc10 this project meets; the planted symbol
# is a c10 function no torch defines
REAL = (
    "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
)
PLANTED = "_ZN3c1023cpkvPlantedMissingSymbolEv"


def _kernel_lib(folder: Path, symbol: str) -> Path:
    """A shared library under ``folder/sgl_kernel`` whose only import is ``symbol``."""
    src = folder / "k.c"
    src.write_text(f'extern void ext(void) __asm__("{symbol}");\nvoid entry(void) {{ ext(); }}\n')
    lib = folder / "sgl_kernel" / "common_ops.abi3.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return lib


def _site(tmp_path: Path, built_for: str, symbol: str | None = REAL) -> Path:
    (tmp_path / kernel_abi.RECORD).write_text(built_for + "\n")
    if symbol:
        _kernel_lib(tmp_path, symbol)
    return tmp_path


def test_only_torch_namespaces_count_as_missing():
    imported = {
        "_ZN3c104cuda9SomethingEv",  # c10: missing
        "_ZTVN3c1010ValueErrorE",  # c10 vtable: missing
        "_ZNK2at10TensorBase3dimEv",  # at, exported
        "cudaMalloc",  # C symbol: not torch's
        "_ZNSt6vectorIiSaIiEE9push_backEOi",  # std: not torch's
        "_ZN5torch7Library5_implEv",  # torch: missing
    }
    exported = {"_ZNK2at10TensorBase3dimEv"}
    assert kernel_abi.missing_torch_symbols(imported, exported) == {
        "_ZN3c104cuda9SomethingEv",
        "_ZTVN3c1010ValueErrorE",
        "_ZN5torch7Library5_implEv",
    }


def test_release_lines_compare_major_minor():
    assert kernel_abi.same_release("2.11.0+cu130", "2.11")
    assert not kernel_abi.same_release("2.11.0+cu130", "2.13.0")
    assert not kernel_abi.same_release("2.1.0", "2.11.0")


def test_the_torch_comes_from_the_record_or_sglang_kernels_pin_and_they_must_agree(tmp_path):
    meta = tmp_path / "sglang_kernel-0.4.7.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text("Name: sglang-kernel\nRequires-Dist: torch==2.13.0\n")
    assert kernel_abi.kernels_torch(tmp_path) == "2.13.0"
    (tmp_path / kernel_abi.RECORD).write_text("2.13\n")
    assert kernel_abi.kernels_torch(tmp_path) == "2.13"
    (tmp_path / kernel_abi.RECORD).write_text("2.11\n")  # a record from another carry
    with pytest.raises(ValueError, match="mixes two carries"):
        kernel_abi.kernels_torch(tmp_path)
    meta.unlink()
    assert kernel_abi.kernels_torch(tmp_path) == "2.11"  # sglang-kernel 0.4.6 declares none


@needs_gcc
def test_kernels_built_for_this_torch_pass(tmp_path):
    line = kernel_abi.check(_site(tmp_path, BOX), BOX, TORCH_LIB)
    assert "import no torch symbol it lacks" in line and "1 kernel libraries" in line


@needs_gcc
def test_mutation_a_missing_torch_symbol_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=PLANTED):
        kernel_abi.check(_site(tmp_path, BOX, PLANTED), BOX, TORCH_LIB)


def test_kernels_built_for_another_torch_are_refused_before_reading_them(tmp_path):
    # no library at all: were the libraries read first, "no kernel libraries" would come instead
    with pytest.raises(ValueError, match=r"built for torch 2\.13\.0 .* misread every tensor"):
        kernel_abi.check(_site(tmp_path, "2.13.0", symbol=None), "2.11.0+cu130", TORCH_LIB)


def test_a_site_without_kernel_libraries_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no kernel libraries"):
        kernel_abi.check(_site(tmp_path, BOX, symbol=None), BOX, TORCH_LIB)


def test_the_command_says_one_line_and_exits_2(tmp_path):
    site = _site(tmp_path, "1.0", symbol=None)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(site)], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("kernel_abi: ") and len(proc.stderr.strip().splitlines()) == 1


def test_the_carry_pins_every_package():
    """``scripts/serve/carry``: every wheel it downloads is pinned (a pydantic and pydantic-core
    fetched apart at their newest need not pair; the carry must be the set that ran)."""
    text = (SCRIPT.parent / "carry").read_text()
    names = []
    for array in ("KERNELS", "SERVER", "PURE"):
        for body in text.split(f"{array}=(")[1:]:
            names += [n for n in body.split(")", 1)[0].split() if not n.startswith('"$')]
    assert len(names) > 40
    assert [n for n in names if "==" not in n] == []
