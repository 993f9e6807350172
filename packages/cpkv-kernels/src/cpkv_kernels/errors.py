"""Errors raised by cpkv_kernels, rooted in ``cpkv_runtime``'s hierarchy.

```
cpkv_runtime.CpkvError
├── cpkv_runtime.LayoutError(ValueError)
│   └── KernelInputError        bad shape, dtype or device, raised before any launch
└── cpkv_runtime.BuildError(RuntimeError)
    └── KernelBuildError        the CUDA extension failed to build or load (names the log)
cpkv_runtime.BackendWarning(UserWarning)
└── BuildWarning                emitted once when the CUDA backend falls back to Triton
```
"""

from __future__ import annotations

from cpkv_runtime import BackendWarning, BuildError, LayoutError

__all__ = ["BuildWarning", "KernelBuildError", "KernelInputError"]


class KernelInputError(LayoutError):
    """An op got tensors of the wrong shape, dtype or device; raised before any kernel launch."""


class KernelBuildError(BuildError):
    """The JIT build or load of the CUDA extension failed; the message names the build log."""


class BuildWarning(BackendWarning):
    """The CUDA backend is unavailable (build or load failed); dispatch falls back to Triton."""
