"""The JIT cache key: every build input changes it; the cache location follows CPKV_CACHE_DIR."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from cpkv_kernels import CacheKey, JitSpec, KernelBuildError, cache_key, cache_root, gen_ops_spec
from cpkv_kernels._jit_key import arch_list, gencode_flags, source_sha256

BASE = CacheKey(
    name="cpkv_ops",
    source_sha256="0" * 64,
    torch_version="2.9.0+cu130",
    torch_git="0123abc",
    cuda_version="13.0",
    nvcc_version="Cuda compilation tools, release 13.0, V13.0.88",
    arch_list=("9.0",),
    cflags=("-O3",),
    cuda_cflags=("-O3", "-lineinfo"),
    ldflags=(),
    host_compiler="c++ (GCC) 12.2.0",
)

CHANGES = {
    "name": "other",
    "source_sha256": "1" * 64,
    "torch_version": "2.11.0+cu130",
    "torch_git": "4567def",
    "cuda_version": "13.1",
    "nvcc_version": "Cuda compilation tools, release 13.0, V13.0.99",
    "arch_list": ("9.0a",),
    "cflags": ("-O2",),
    "cuda_cflags": ("-O3",),
    "ldflags": ("-lfoo",),
    "host_compiler": "c++ (GCC) 13.1.0",
}


def test_changes_cover_every_field():
    assert set(CHANGES) == {f.name for f in dataclasses.fields(CacheKey)}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_each_component_changes_the_key(field):
    assert dataclasses.replace(BASE, **{field: CHANGES[field]}).digest() != BASE.digest()


def test_torch_upgrade_with_same_cuda_changes_the_key():
    """Regression: torch 2.9 -> 2.11 on one CUDA 13.0 once reused an ABI-incompatible build."""
    newer = dataclasses.replace(BASE, torch_version="2.11.0+cu130")
    assert newer.cuda_version == BASE.cuda_version and newer.digest() != BASE.digest()


def test_key_is_stable_and_arch_order_free():
    assert BASE.digest() == dataclasses.replace(BASE).digest()
    two = dataclasses.replace(BASE, arch_list=("8.0", "9.0"))
    assert (
        two.digest() == dataclasses.replace(BASE, arch_list=tuple(sorted(("9.0", "8.0")))).digest()
    )


def test_source_bytes_change_the_key(tmp_path: Path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() {}\n")
    spec = JitSpec(name="t", sources=(src,))
    before = cache_key(spec, archs=("9.0",))
    src.write_text("__global__ void k() { }\n")
    after = cache_key(spec, archs=("9.0",))
    assert before.source_sha256 != after.source_sha256 and before.digest() != after.digest()
    assert (
        dataclasses.replace(after, source_sha256=before.source_sha256).digest() == before.digest()
    )


def test_headers_are_hashed(tmp_path: Path):
    h = tmp_path / "k.cuh"
    h.write_text("#define A 1\n")
    one = source_sha256((h,))
    h.write_text("#define A 2\n")
    assert source_sha256((h,)) != one


def test_real_key_describes_this_toolchain():
    import torch

    key = cache_key(gen_ops_spec(), archs=("9.0",))
    assert key.torch_version == torch.__version__ and key.torch_git == torch.version.git_version
    assert "release" in key.nvcc_version and key.host_compiler
    assert {p.name for p in gen_ops_spec().sources} >= {
        "binding.cpp",
        "materialize.cu",
        "remap_locs.cu",
    }
    json.dumps(dataclasses.asdict(key))  # key.json material


def test_cache_dir_env(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("CPKV_CACHE_DIR", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("CPKV_CACHE_DIR")
    assert cache_root() == Path.home() / ".cache" / "cpkv"
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CPKV_CACHE_DIR", str(tmp_path / "file"))  # the declaration's parser
    with pytest.raises(KernelBuildError, match=r"CPKV_CACHE_DIR='.*file': expected a directory"):
        cache_root()


@pytest.mark.parametrize(
    ("env", "archs", "flags"),
    [
        ("9.0", ("9.0",), ["-gencode=arch=compute_90,code=sm_90"]),
        ("9.0a", ("9.0a",), ["-gencode=arch=compute_90a,code=sm_90a"]),
        (
            "9.0;8.0+PTX",
            ("8.0+PTX", "9.0"),
            [
                "-gencode=arch=compute_80,code=sm_80",
                "-gencode=arch=compute_80,code=compute_80",
                "-gencode=arch=compute_90,code=sm_90",
            ],
        ),
    ],
)
def test_arch_list_from_env(monkeypatch, env, archs, flags):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", env)
    assert arch_list() == archs
    assert gencode_flags(archs) == flags


def test_named_arch_is_refused(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "Hopper")
    with pytest.raises(KernelBuildError, match=r"use numbers like '9\.0'"):
        arch_list()
