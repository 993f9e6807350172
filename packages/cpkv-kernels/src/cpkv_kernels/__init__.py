"""Triton and CUDA kernels for the cpkv shared-KV hot path.

Importing the package registers nothing; ``cpkv_runtime`` finds the backends through the
``cpkv_runtime.backends`` entry points (or :func:`register`).

Environment variables:

- ``CPKV_CACHE_DIR``: path, where built CUDA kernels live, ``~/.cache/cpkv`` by default.
- ``TORCH_CUDA_ARCH_LIST``: archs to build for, the visible GPUs' by default (``9.0`` with none).
- ``CUDA_HOME``: CUDA toolkit, by default the one of ``nvcc`` on PATH, else ``/usr/local/cuda``.
- ``TRITON_INTERPRET``: ``1`` runs the Triton kernels on CPU tensors (set before import).
"""

from ._jit import BuildResult, cache_root
from ._jit import build as build_extension
from ._jit import load as load_extension
from ._jit_key import CacheKey, JitSpec, cache_key, gen_ops_spec
from ._registry import cuda_backend, register, triton_backend
from .errors import BuildWarning, KernelBuildError, KernelInputError

__version__ = "0.1.0"

__all__ = [  # noqa: RUF022 - grouped by kind, as the house style asks
    # Backends
    "cuda_backend",
    "register",
    "triton_backend",
    # JIT
    "BuildResult",
    "CacheKey",
    "JitSpec",
    "build_extension",
    "cache_key",
    "cache_root",
    "gen_ops_spec",
    "load_extension",
    # Errors
    "BuildWarning",
    "KernelBuildError",
    "KernelInputError",
]
