"""Build the ABI shim that lets SGLang's kernel wheels load on the GPU box's torch (if needed).

The serve suite runs SGLang 0.5.20, whose kernel wheels (``sglang-kernel`` 0.4.7, ``sgl-deep-gemm``
0.2.0) are built for the torch SGLang pins. The GPU box has another torch (2.11). Where the two
differ, the wheels import a few C++ symbols the box's libtorch names otherwise; ``abi_shim.cpp``
forwards exactly those. This is how the suite runs on that box, not a configuration for users.

Every run checks, with ``nm``, that the torch symbols the wheels import and the box's torch lacks
are exactly the ones the shim forwards, and says so: a new wheel or another torch that needs one
more symbol is refused by name, never loaded to crash later.

Usage: ``python3 scripts/serve/abi_shim.py SITE OUT.so`` prints one line of what it decided; the
last line of stdout is the library to put in ``LD_PRELOAD`` (empty when torch matches the pin):
not the shim itself but ``abi_shim_loader.c``, built beside it, which loads it into Python
processes only, so the compilers SGLang's JIT paths start do not each load libtorch. A fresh
Python process first checks, through the loader, that the wheels' FlashMLA op has its CUDA kernel;
if it has not, the shim is preloaded itself, as before, and the line says so.
Exit 2 with one line on stderr when the missing symbols are not the forwarded ones, or when
neither the loader nor the shim itself gives the wheels' op its CUDA kernel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("abi_shim.cpp")
LOADER = Path(__file__).with_name("abi_shim_loader.c")
WHEEL_LIBS = ("sgl_kernel", "deep_gemm")  # the packages under SITE whose .so files are checked

# A symbol of torch's own namespaces (c10, at, torch, caffe2), functions and vtables alike.
_TORCH_SYMBOL = re.compile(r"^_Z(?:T[VIS])?N[KRO]*(?:3c10|2at|5torch|6caffe2)")
_LINK_NAME = re.compile(r'(\w+)\([^;{]*?\)\s*LINK_NAME\(\s*"(\w+)"\s*\);', re.S)


def forwarded_symbols(source: str) -> set[str]:
    """The symbols ``source`` defines: a function declared with ``LINK_NAME`` and given a body."""
    names = {c_name: symbol for c_name, symbol in _LINK_NAME.findall(source)}
    return {
        sym for c_name, sym in names.items() if re.search(rf"\b{c_name}\([^;]*\)\s*\{{", source)
    }


def missing_torch_symbols(imported: set[str], exported: set[str]) -> set[str]:
    """Torch-namespace symbols the wheels import that the box's torch does not export."""
    return {s for s in imported - exported if _TORCH_SYMBOL.match(s)}


def _nm(paths: list[Path], which: str) -> set[str]:
    out: set[str] = set()
    for path in paths:
        proc = subprocess.run(
            ["nm", "-D", which, str(path)], capture_output=True, text=True, check=True
        )
        out |= {line.split()[-1] for line in proc.stdout.splitlines() if line.strip()}
    return out


def pinned_torch(site: Path) -> str:
    """The torch release SGLang in ``site`` requires (``Requires-Dist: torch==X``)."""
    for meta in site.glob("sglang-*.dist-info/METADATA"):
        if m := re.search(r"^Requires-Dist: torch==([\w.+]+)", meta.read_text(), re.M):
            return m.group(1)
    raise SystemExit(f"abi_shim: no sglang dist-info with a torch pin in {site}")


#: The dispatch-key values the shim translates into (torch 2.11's); the wheels use 2.13's.
KEYS_211 = {"Python": 12, "Fake": 13, "Conjugate": 17, "CPU": 50, "CUDA": 51, "Meta": 65}


def box_dispatch_keys(torch_include: Path, work: Path) -> dict[str, int]:
    """The values of :data:`KEYS_211`'s keys in the box's torch headers (compiled and run)."""
    prints = "".join(f'printf("{k} %d\\n", (int)c10::DispatchKey::{k});' for k in KEYS_211)
    src = work / "dispatch_keys.cpp"
    src.write_text(
        f"#include <c10/core/DispatchKey.h>\n#include <cstdio>\nint main() {{ {prints} }}\n"
    )
    exe = work / "dispatch_keys"
    subprocess.run(
        ["g++", "-std=c++17", f"-I{torch_include}", str(src), "-o", str(exe)], check=True
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def build_loader(shim: Path, flags: str | None = None) -> Path:
    """``abi_shim_loader.c`` built beside ``shim`` (which it loads, by file name); ``flags``
    overrides its dlopen flags (tests plant RTLD_LOCAL)."""
    loader = shim.with_name(shim.stem + "_loader.so")
    defines = [f'-DSHIM_NAME="{shim.name}"'] + ([f"-DSHIM_DLOPEN_FLAGS=({flags})"] if flags else [])
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", *defines, str(LOADER), "-o", str(loader), "-ldl"],
        check=True,
    )
    return loader


#: (module, op): an op the wheels register for CUDA; under an untranslated dispatch key it lands
#: on CPU and SGLang's first sparse prefill fails
CUDA_PROBE = ("sgl_kernel.flashmla_ops", "sgl_kernel::sparse_prefill_fwd")


def registers_for_cuda(
    preload: Path, site: Path, probe: tuple[str, str] = CUDA_PROBE
) -> tuple[bool, str]:
    """Whether, with ``preload`` in ``LD_PRELOAD``, importing ``probe``'s module from ``site``
    gives its op a CUDA kernel (a fresh Python process, as SGLang's are); and the last line said."""
    module, op = probe
    code = (
        f"import importlib, torch; importlib.import_module({module!r}); "
        f"print('cuda kernel:', torch._C._dispatch_has_kernel_for_dispatch_key({op!r}, 'CUDA'))"
    )
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, "LD_PRELOAD": str(preload), "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    # the verdict is stdout's last line; a warning on stderr (torch's, the wheel's) is no failure
    verdict = proc.stdout.strip().splitlines()[-1:]
    if proc.returncode == 0 and verdict:
        return verdict == ["cuda kernel: True"], verdict[0]
    return False, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]


def choose_preload(loader: Path, shim: Path, check) -> tuple[Path | None, str]:
    """The loader when ``check`` (:func:`registers_for_cuda` bound to the site) passes through
    it; else the shim itself, preloaded as before (every process then loads libtorch, compilers
    included); ``None`` when neither registers the wheels' CUDA kernels. With what was seen."""
    ok, said = check(loader)
    if ok:
        return loader, f"through {loader.name}, {CUDA_PROBE[1]} has its CUDA kernel"
    ok_shim, said_shim = check(shim)
    if ok_shim:
        return shim, (
            f"through {loader.name} {CUDA_PROBE[1]} had no CUDA kernel ({said}); the shim is "
            f"preloaded itself, so every process, each compiler included, loads libtorch"
        )
    return None, f"neither the loader ({said}) nor the shim ({said_shim}) registers it for CUDA"


def main(site: Path, out: Path) -> int:
    import torch

    box, pin = torch.__version__.split("+")[0], pinned_torch(site)
    if box.split(".")[:2] == pin.split(".")[:2]:
        print(f"abi shim: none; torch {box} on this box matches SGLang's pin {pin}")
        print()
        return 0
    if not pin.startswith("2.13."):
        print(
            f"abi_shim: the shim translates torch 2.13's symbols and dispatch keys, but SGLang "
            f"here pins torch {pin}; update abi_shim.cpp for that release",
            file=sys.stderr,
        )
        return 2
    libs = [p for pkg in WHEEL_LIBS for p in sorted((site / pkg).rglob("*.so"))]
    torch_lib = Path(torch.__file__).parent / "lib"
    missing = missing_torch_symbols(
        _nm(libs, "--undefined-only"), _nm(sorted(torch_lib.glob("*.so*")), "--defined-only")
    )
    forwarded = forwarded_symbols(SOURCE.read_text())
    if missing != forwarded:
        print(
            f"abi_shim: torch {box} here, {pin} pinned: the wheels miss "
            f"{sorted(missing - forwarded)} that abi_shim.cpp does not forward (and it "
            f"forwards {sorted(forwarded - missing)} nobody misses); update abi_shim.cpp",
            file=sys.stderr,
        )
        return 2
    keys = box_dispatch_keys(torch_lib.parent / "include", out.parent)
    if keys != KEYS_211:
        print(
            f"abi_shim: the shim translates dispatch keys into torch 2.11's {KEYS_211}, but this "
            f"torch numbers them {keys}; update abi_shim.cpp",
            file=sys.stderr,
        )
        return 2
    subprocess.run(
        ["g++", "-shared", "-fPIC", "-O1", str(SOURCE), "-o", str(out), f"-L{torch_lib}",
         "-ltorch_cpu", "-lc10", "-ldl", f"-Wl,-rpath,{torch_lib}"],
        check=True,
    )  # fmt: skip
    built = _nm([out], "--defined-only")
    assert forwarded <= built, f"the shim lacks {sorted(forwarded - built)}"
    preload, seen = choose_preload(
        build_loader(out), out, lambda lib: registers_for_cuda(lib, site)
    )
    if preload is None:
        print(f"abi_shim: {seen}", file=sys.stderr)
        return 2
    print(
        f"abi shim: torch {box} here, {pin} pinned; the {len(libs)} kernel libraries miss exactly "
        f"the {len(forwarded)} symbols the shim forwards: {', '.join(sorted(forwarded))}; "
        f"dispatch keys of this torch are 2.11's ({keys}), translated from the wheels' 2.13 ones;"
        f" {seen}"
    )
    print(preload)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("Usage: ")[1].split("\n")[0])
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
