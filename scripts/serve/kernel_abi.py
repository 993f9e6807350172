"""Check, on the GPU box, that the carried kernel wheels were built for the box's torch.

Compiled C++ reads a tensor's fields (device, sizes, dtype) at the offsets of the torch headers it
was built against, and torch 2.13 moved them: ``c10::TensorImpl``'s ``PyObjectSlot`` shrank from 16
to 8 bytes, so every field after it sits 8 bytes earlier than in 2.11 (the device at byte 162, not
170). Forwarding the few C++ symbols 2.13 renamed makes a wheel built for 2.13 *load* on 2.11, and
it then reads the wrong bytes: on the H100 (2026-12-07), sglang-kernel 0.4.7 under such a shim
refused SGLang's first top-k with "score must be a CUDA tensor", given a CUDA tensor. No symbol
forwarding can fix an inline field read, so ``scripts/serve/carry`` packs the kernel releases
built for the box's torch, and this check refuses any other pairing before a server starts.

It also checks, with ``nm``, that the kernel libraries import no symbol of torch's namespaces that
the box's libtorch lacks, and names any that are missing. This is how the serve suite runs SGLang
on that box, not a configuration for users.

Usage: ``python3 scripts/serve/kernel_abi.py SITE`` prints one line; exit 2 with one line on
stderr when the kernels were built for another torch or miss a torch symbol here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

KERNEL_PACKAGES = ("sgl_kernel", "deep_gemm")  # the packages under SITE whose .so files are read
#: written by scripts/serve/carry: the torch the kernel wheels were built for (sglang-kernel 0.4.6
#: does not declare it; 0.4.7 pins torch==2.13.0 in its metadata)
RECORD = "cpkv-kernels-torch.txt"

# A symbol of torch's own namespaces (c10, at, torch, caffe2), functions and vtables alike.
_TORCH_SYMBOL = re.compile(r"^_Z(?:T[VIS])?N[KRO]*(?:3c10|2at|5torch|6caffe2)")


def missing_torch_symbols(imported: set[str], exported: set[str]) -> set[str]:
    """Torch-namespace symbols the kernels import that the box's torch does not export."""
    return {s for s in imported - exported if _TORCH_SYMBOL.match(s)}


def kernels_torch(site: Path) -> str:
    """The torch release the kernel wheels in ``site`` were built for: what the carry recorded
    and ``sglang-kernel``'s own ``Requires-Dist: torch==X``, whichever exist; when both do, they
    must agree (a record left from another carry would otherwise pass a wheel it does not
    describe)."""
    recorded = (site / RECORD).read_text().strip() if (site / RECORD).is_file() else None
    pinned = None
    for meta in site.glob("sglang_kernel-*.dist-info/METADATA"):
        if m := re.search(r"^Requires-Dist: torch==([\w.+]+)", meta.read_text(), re.M):
            pinned = m.group(1)
    if recorded and pinned and not same_release(recorded, pinned):
        raise ValueError(
            f"{RECORD} says torch {recorded} but sglang-kernel pins torch=={pinned}: the site "
            f"mixes two carries; rebuild it with scripts/serve/carry"
        )
    if recorded or pinned:
        return recorded or pinned
    raise ValueError(f"no {RECORD} and no sglang-kernel dist-info with a torch pin in {site}")


def same_release(a: str, b: str) -> bool:
    """``2.11.0+cu130`` and ``2.11`` are one release line (major.minor)."""
    return a.split("+")[0].split(".")[:2] == b.split("+")[0].split(".")[:2]


def _nm(paths: list[Path], which: str) -> set[str]:
    out: set[str] = set()
    for path in paths:
        try:
            proc = subprocess.run(
                ["nm", "-D", which, str(path)], capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError) as e:
            raise ValueError(f"nm -D {which} {path} failed ({e}); binutils' nm is needed") from e
        out |= {line.split()[-1] for line in proc.stdout.splitlines() if line.strip()}
    return out


def check(site: Path, box_torch: str, torch_lib: Path) -> str:
    """The line to print when the kernels under ``site`` fit ``box_torch`` (whose libraries are in
    ``torch_lib``); raises ValueError with the one-line reason when they do not."""
    built_for = kernels_torch(site)
    if not same_release(built_for, box_torch):
        raise ValueError(
            f"the kernel wheels in {site} were built for torch {built_for} and this box has "
            f"{box_torch}: compiled code reads tensor fields at its own torch's offsets (2.13 "
            f"moved them 8 bytes), so they would load and misread every tensor; rebuild the "
            f"carry with SERVE_BOX_TORCH={'.'.join(box_torch.split('.')[:2])} scripts/serve/carry"
        )
    libs = [p for pkg in KERNEL_PACKAGES for p in sorted((site / pkg).rglob("*.so"))]
    if not libs:
        raise ValueError(f"no kernel libraries under {site} ({', '.join(KERNEL_PACKAGES)})")
    missing = missing_torch_symbols(
        _nm(libs, "--undefined-only"), _nm(sorted(torch_lib.glob("*.so*")), "--defined-only")
    )
    if missing:
        raise ValueError(
            f"the kernel libraries import {len(missing)} torch symbol(s) torch {box_torch} "
            f"lacks, e.g. {sorted(missing)[0]}: they were not built for this torch"
        )
    return (
        f"kernel ABI: built for torch {built_for}, this box has {box_torch}; the {len(libs)} "
        f"kernel libraries import no torch symbol it lacks"
    )


def main(site: Path) -> int:
    import torch

    try:
        print(check(site, torch.__version__, Path(torch.__file__).parent / "lib"))
    except ValueError as e:
        print(f"kernel_abi: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 scripts/serve/kernel_abi.py SITE", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
