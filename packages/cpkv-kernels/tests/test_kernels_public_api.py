"""The public surface is exactly ``__all__``."""

from __future__ import annotations

import cpkv_kernels
import cpkv_kernels.ops
from cpkv_runtime import NO_TRITON, OP_NAMES

PUBLIC = {
    "cuda_backend",
    "register",
    "triton_backend",
    "BuildResult",
    "CacheKey",
    "JitSpec",
    "build_extension",
    "cache_key",
    "cache_root",
    "gen_ops_spec",
    "load_extension",
    "BuildWarning",
    "KernelBuildError",
    "KernelInputError",
}


def test_all_is_the_public_surface():
    assert set(cpkv_kernels.__all__) == PUBLIC
    assert len(cpkv_kernels.__all__) == len(PUBLIC)
    for name in PUBLIC:
        assert getattr(cpkv_kernels, name) is not None
    public_attrs = {n for n in vars(cpkv_kernels) if not n.startswith("_")}
    assert public_attrs - PUBLIC <= {
        "annotations",
        "ops",
        "errors",
        "build",
    }  # build: the CLI module  # submodules


def test_ops_module_exports_the_triton_custom_ops():
    assert set(cpkv_kernels.ops.__all__) == {
        f"{op}_triton" for op in OP_NAMES if op not in NO_TRITON
    }
