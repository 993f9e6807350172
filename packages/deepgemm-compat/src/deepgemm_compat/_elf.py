"""Read the dynamic symbol table of an ELF64 shared library, in plain Python.

Used to check, before ``import deep_gemm``, that every libtorch symbol its ``_C.so``
needs is exported by the installed torch: the wheels link against one torch build
and die at import (``undefined symbol``) with any other. No ``nm`` or ``pyelftools``
needed, so ``deepgemm-compat doctor`` works on a bare serving image.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable
from pathlib import Path

_SHT_DYNSYM = 11
_STB_LOCAL = 0
_SHN_UNDEF = 0


def _sections(data: bytes) -> list[tuple[int, int, int, int, int]]:
    """(type, offset, size, link, entsize) of every section header."""
    if bytes(data[:4]) != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    out = []
    for i in range(shnum):
        base = shoff + i * shentsize
        _name, sh_type, _flags, _addr, off, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, base
        )
        out.append((sh_type, off, size, link, entsize))
    return out


def dynamic_symbols(path: str | Path) -> tuple[set[str], set[str]]:
    """Return ``(defined, undefined)`` global/weak dynamic symbol names (mangled).

    Args:
        path: an ELF64 little-endian shared object (x86_64 / aarch64 Linux).

    Raises:
        ValueError: the file is not ELF64 little-endian or has no ``.dynsym``.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return _read_dynsym(data, str(path))


def _read_dynsym(data, path: str) -> tuple[set[str], set[str]]:
    sections = _sections(data)
    defined: set[str] = set()
    undefined: set[str] = set()
    found = False
    for sh_type, off, size, link, entsize in sections:
        if sh_type != _SHT_DYNSYM or entsize == 0:
            continue
        found = True
        _, str_off, str_size, _, _ = sections[link]
        strtab = data[str_off : str_off + str_size]
        for i in range(1, size // entsize):  # entry 0 is the null symbol
            st_name, st_info, _other, st_shndx = struct.unpack_from(
                "<IBBH", data, off + i * entsize
            )
            if st_info >> 4 == _STB_LOCAL:
                continue
            end = strtab.index(b"\0", st_name)
            name = strtab[st_name:end].decode("ascii", "replace")
            (undefined if st_shndx == _SHN_UNDEF else defined).add(name)
    if not found:
        raise ValueError(f"{path}: no .dynsym section")
    return defined, undefined


# The torch libraries every sgl-deep-gemm _C.so lists as DT_NEEDED (readelf -d).
TORCH_LIBS = ("libtorch.so", "libtorch_cpu.so", "libc10.so", "libc10_cuda.so", "libtorch_cuda.so")

# Symbols a DeepGEMM _C.so takes from torch: c10, at::, torch:: and the C shims.
_TORCH_PREFIXES = ("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch", "_ZNK5torch", "torch_")


def torch_symbols(names: Iterable[str]) -> set[str]:
    """The subset of ``names`` that libtorch / libc10 are expected to provide."""
    return {n for n in names if n.startswith(_TORCH_PREFIXES)}


def missing_torch_symbols(so_path: str | Path, torch_lib_dir: str | Path) -> list[str]:
    """Torch symbols ``so_path`` needs that no ``libtorch*.so`` / ``libc10*.so`` exports.

    Args:
        so_path: the extension, e.g. ``site-packages/deep_gemm/_C.so``.
        torch_lib_dir: ``torch/lib`` of the installed torch.

    Returns:
        Sorted mangled names; empty means the pairing resolves at load time.
    """
    _, needed = dynamic_symbols(so_path)
    needed = torch_symbols(needed)
    provided: set[str] = set()
    for name in TORCH_LIBS:
        lib = Path(torch_lib_dir) / name
        if lib.exists():
            provided |= dynamic_symbols(lib)[0]
    return sorted(needed - provided)
