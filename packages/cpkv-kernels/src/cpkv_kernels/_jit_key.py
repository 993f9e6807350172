"""What a CUDA build depends on: the spec, the toolchain, and the cache key over both.

A key without the torch version once reused an ABI-incompatible build across torch 2.9 -> 2.11
(same CUDA 13.0). The key therefore hashes every input that can change the binary: source bytes,
torch version and git hash, CUDA version (torch's and nvcc's), the sorted arch list, all flags and
the host compiler version.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import KernelBuildError

CSRC = Path(__file__).parent / "csrc"
DEFAULT_ARCHS = ("9.0",)  # H100/H200: the target when no GPU is visible (image builds)


@dataclass(frozen=True)
class JitSpec:
    """One extension: its sources, the headers they include, and its flags."""

    name: str
    sources: tuple[Path, ...]
    headers: tuple[Path, ...] = ()
    cflags: tuple[str, ...] = ("-O3",)
    cuda_cflags: tuple[str, ...] = ("-O3", "-lineinfo")
    ldflags: tuple[str, ...] = ()


def gen_ops_spec() -> JitSpec:
    """The extension holding every ``cpkv::<op>_cuda`` op (one build, one load)."""
    return JitSpec(
        name="cpkv_ops",
        sources=(*sorted(CSRC.glob("*.cu")), *sorted(CSRC.glob("*.cpp"))),
        headers=tuple(sorted([*CSRC.glob("*.h"), *CSRC.glob("*.cuh")])),
    )


@dataclass(frozen=True)
class CacheKey:
    """Every input of a build; ``digest()`` names its cache directory."""

    name: str
    source_sha256: str
    torch_version: str
    torch_git: str
    cuda_version: str
    nvcc_version: str
    arch_list: tuple[str, ...]
    cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    host_compiler: str

    def digest(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def source_sha256(paths: tuple[Path, ...]) -> str:
    """Hash of every file's name and bytes (sources and headers)."""
    h = hashlib.sha256()
    for p in sorted(paths, key=lambda p: p.name):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def cuda_home() -> Path:
    """The CUDA toolkit: ``$CUDA_HOME``/``$CUDA_PATH``, ``nvcc``'s, /usr/local/cuda."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:  # a real binary (or a symlink to one) sits in <home>/bin; a wrapper script does not
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if (
            c
            and (Path(c) / "bin" / "nvcc").exists()
            and (Path(c) / "include" / "cuda_runtime.h").exists()
        ):
            return Path(c)
    raise KernelBuildError(
        f"no CUDA toolkit found (tried {[c for c in candidates if c]}): set CUDA_HOME to a toolkit "
        f"with bin/nvcc and include/cuda_runtime.h"
    )


def _version_output(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelBuildError(f"could not run {' '.join(cmd)}: {exc}") from exc
    return " | ".join(line.strip() for line in out.strip().splitlines() if line.strip())


@functools.cache
def nvcc_version(home: Path) -> str:
    return _version_output([str(home / "bin" / "nvcc"), "--version"])


@functools.cache
def host_compiler_version(cxx: str) -> str:
    return _version_output([cxx, "--version"]).split(" | ")[0]


def arch_list() -> tuple[str, ...]:
    """Archs to build for: ``$TORCH_CUDA_ARCH_LIST`` (``"9.0;10.0+PTX"``), the GPUs, or 9.0."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        archs = [a for a in re.split(r"[;\s,]+", env) if a]
        bad = [a for a in archs if not re.fullmatch(r"\d+\.\d+a?(\+PTX)?", a)]
        if bad:
            raise KernelBuildError(
                f"TORCH_CUDA_ARCH_LIST={env!r}: cannot read {bad}; use numbers like '9.0', "
                f"'9.0a' or '9.0+PTX'"
            )
        return tuple(sorted(set(archs)))
    if torch.cuda.is_available():
        caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
        return tuple(sorted(f"{major}.{minor}" for major, minor in caps))
    return DEFAULT_ARCHS


def gencode_flags(archs: tuple[str, ...]) -> list[str]:
    """nvcc ``-gencode`` flags: ``9.0`` -> sm_90, ``9.0a`` -> sm_90a, a ``+PTX`` suffix adds PTX."""
    flags = []
    for arch in archs:
        num, ptx = arch.removesuffix("+PTX"), arch.endswith("+PTX")
        cc = num.replace(".", "")
        flags.append(f"-gencode=arch=compute_{cc},code=sm_{cc}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{cc},code=compute_{cc}")
    return flags


def cache_key(spec: JitSpec, archs: tuple[str, ...] | None = None) -> CacheKey:
    """The key of ``spec`` built with this process's torch and toolchain."""
    home = cuda_home()
    return CacheKey(
        name=spec.name,
        source_sha256=source_sha256((*spec.sources, *spec.headers)),
        torch_version=torch.__version__,
        torch_git=torch.version.git_version or "unknown",
        cuda_version=torch.version.cuda or "none",
        nvcc_version=nvcc_version(home),
        arch_list=tuple(sorted(archs if archs is not None else arch_list())),
        cflags=spec.cflags,
        cuda_cflags=spec.cuda_cflags,
        ldflags=spec.ldflags,
        host_compiler=host_compiler_version(os.environ.get("CXX", "c++")),
    )
