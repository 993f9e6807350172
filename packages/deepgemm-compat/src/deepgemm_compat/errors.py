"""Exceptions raised by deepgemm_compat.

```
DeepGemmCompatError
├── DeepGemmUnavailable(ImportError)      sgl-deep-gemm cannot be loaded here; .fix says how
│   ├── WheelMissingError                 not installed
│   ├── TorchAbiMismatchError             its _C.so was linked against another torch
│   ├── TvmFfiMissingError                <= 0.2.2 without (the pinned) apache-tvm-ffi
│   ├── CudaUnavailableError              no CUDA runtime / toolkit / device
│   └── UntestedVersionError              newer than every wheel this release was checked on
├── InputError(ValueError)                a tensor or argument the kernels would misread,
│                                         or a warmup-plan input out of its bound
├── UnsupportedFeatureError(NotImplementedError)   the installed wheel lacks the feature
└── KernelPackageError(RuntimeError)      sglang-kernel / sgl-kernel below the minimum
```
Every error's message names what is wrong and the fix; ``DeepGemmUnavailable.fix`` holds
the fix alone (a shell line where there is one).
"""

from __future__ import annotations


class DeepGemmCompatError(Exception):
    """Base class of every error this package raises."""


class DeepGemmUnavailable(DeepGemmCompatError, ImportError):
    """sgl-deep-gemm cannot be used in this environment.

    Attributes:
        code: a short stable identifier (``"torch-abi"``, ``"no-cuda"``, ...).
        fix: what to do about it, e.g. the exact ``pip install`` line.
    """

    code = "unavailable"

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(f"{message}\n  fix: {fix}" if fix else message)
        self.fix = fix


class WheelMissingError(DeepGemmUnavailable):
    """sgl-deep-gemm is not installed."""

    code = "missing"


class TorchAbiMismatchError(DeepGemmUnavailable):
    """The wheel's _C.so needs symbols the installed torch does not export."""

    code = "torch-abi"


class TvmFfiMissingError(DeepGemmUnavailable):
    """A tvm-ffi wheel (<= 0.2.2) without apache-tvm-ffi, or with another version than pinned."""

    code = "tvm-ffi"


class CudaUnavailableError(DeepGemmUnavailable):
    """No CUDA runtime libraries, toolkit or device where the wheel needs one."""

    code = "no-cuda"


class UntestedVersionError(DeepGemmUnavailable):
    """A release newer than every wheel this package's surface table was built from."""

    code = "untested"


class InputError(DeepGemmCompatError, ValueError):
    """A tensor or argument that the kernels would misread (shape, dtype, layout, device), or a
    warmup-plan input out of its bound (the message names the bound and why)."""


class UnsupportedFeatureError(DeepGemmCompatError, NotImplementedError):
    """The installed wheel has no such feature (the message names the release that adds it)."""


class KernelPackageError(DeepGemmCompatError, RuntimeError):
    """sglang-kernel (formerly sgl-kernel) is missing or older than the configured minimum."""
